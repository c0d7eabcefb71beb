/* dtype.c - name and size tables generated from DTYPE_LIST. */
#include "engine/base/dtype.h"

static const struct {
    const char *name;
    int block;    /* elements per block */
    size_t bytes; /* bytes per block */
} dtype_table[] = {
#define DTYPE_ROW(n, s, e, b) {s, e, b},
    DTYPE_LIST(DTYPE_ROW)
#undef DTYPE_ROW
};

size_t dtype_size(dtype t) {
    return (unsigned)t < DTYPE_COUNT && dtype_table[t].block == 1 ? dtype_table[t].bytes : 0;
}

int dtype_block_elems(dtype t) { return (unsigned)t < DTYPE_COUNT ? dtype_table[t].block : 0; }

size_t dtype_row_bytes(dtype t, int64_t n) {
    if ((unsigned)t >= DTYPE_COUNT || n < 0 || n % dtype_table[t].block) return 0;
    return (size_t)(n / dtype_table[t].block) * dtype_table[t].bytes;
}

const char *dtype_name(dtype t) { return (unsigned)t < DTYPE_COUNT ? dtype_table[t].name : "?"; }

int dtype_parse(const char *s, dtype *out) {
    for (int i = 0; i < DTYPE_COUNT; i++) {
        if (dtype_table[i].block == 1 && strcmp(s, dtype_table[i].name) == 0) {
            *out = (dtype)i;
            return 0;
        }
    }
    return -1;
}
