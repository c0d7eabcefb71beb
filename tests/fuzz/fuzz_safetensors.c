/* fuzz_safetensors.c - the safetensors header checks and st_open on arbitrary bytes.
 *
 * Each input is taken as a whole .safetensors file: its header goes through
 * st_check_header, the raw bytes go through st_check_header as JSON too, and the file
 * (written to a memfd) through st_open, whose tensors must then lie inside the file. */
// fuzz-sources: models/load/safetensors.c engine/base/dtype.c engine/base/err.c
// fuzz-libs: -ljansson
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "models/load/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_open(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
    if (fd < 0) return;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    st_model *m = NULL;
    strata_err err = {0};
    if (st_open(&m, path, &err) == 0) {
        /* Every tensor must be findable and lie inside the file: read its bytes (a
         * pointer outside the mapping faults, one past it reads the next tensor). */
        unsigned sum = 0;
        for (int i = 0; i < st_count(m); i++) {
            const st_tensor *t = st_get(m, i);
            if (st_find(m, t->name) != t) abort();
            if (t->nbytes > size) abort();
            const uint8_t *p = t->data;
            if (t->nbytes) sum += p[0] + p[t->nbytes - 1];
            size_t elems = t->nbytes / dtype_size(t->dt);
            uint64_t prod = 1; /* may wrap before a zero dim; the loader allows that */
            for (int d = 0; d < t->ndim; d++) prod *= (uint64_t)t->shape[d];
            if (prod != elems || t->nbytes % dtype_size(t->dt)) abort();
        }
        if (sum == 0xdeadbeef) fputc(' ', stderr); /* keep the reads */
        st_close(m);
    } else if (!err.msg[0]) {
        abort(); /* every failure must say why */
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    strata_err err = {0};
    if (size >= 8) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
        if (hlen <= size - 8)
            st_check_header((const char *)data + 8, (size_t)hlen, size - 8 - (size_t)hlen, "fuzz",
                            &err);
    }
    st_check_header((const char *)data, size, size, "fuzz", &err);
    fuzz_open(data, size);
    return 0;
}
