/* test_backend_select.c - backend choice (kernels/backend_select.c): "cpu", "auto" and bad
 * names on any machine; "cuda" either makes a CUDA backend (a GPU machine with
 * build/libstrata_cuda.so) or fails with a message naming what is missing, never crashes;
 * "auto" always yields a working backend. */
#include <stdlib.h>
#include <string.h>

#include "kernels/backend_select.h"
#include "tests/test.h"

/* A backend that runs: one add through its own memory. */
static int backend_works(backend *b) {
    float a[3] = {1, 2, 3}, r[3] = {0};
    float *d = b->ops->alloc(b, sizeof a);
    if (!d) return 0;
    b->ops->upload(b, d, a, sizeof a);
    b->ops->add(b, d, d, d, 3);
    b->ops->download(b, r, d, sizeof r);
    b->ops->free(b, d);
    return r[0] == 2 && r[1] == 4 && r[2] == 6;
}

static void test_cpu_and_auto(void) {
    const char *names[] = {"cpu", "auto"};
    for (int i = 0; i < 2; i++) {
        backend *b = NULL;
        strata_err err = {0};
        CHECK_MSG(backend_create(names[i], 1, &b, &err) == 0, "%s: %s", names[i], err.msg);
        if (!b) continue;
        CHECK(backend_works(b));
        backend_mem m;
        if (!strcmp(backend_name(b), "cpu")) {
            CHECK(backend_memory(b, &m) == -1);
            CHECK(b->ops->sample == NULL && !backend_supports(b, BK_OP_SAMPLE, DTYPE_COUNT));
            CHECK(backend_graph_begin(b, 1, &err) == STRATA_EUNSUPPORTED);
        } else {
            CHECK(backend_memory(b, &m) == 0 && m.total > 0);
        }
        backend_destroy(b);
    }
}

static void test_bad_names(void) {
    const char *bad[] = {"gpu", "cudax", "cuda:", "cuda:-1", "cuda:1x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        backend *b = NULL;
        strata_err err = {0};
        int rc = backend_create(bad[i], 1, &b, &err);
        CHECK_MSG(rc == STRATA_EINVALID && b == NULL && strstr(err.msg, "--device"),
                  "'%s': rc %d, %s", bad[i], rc, err.msg);
    }
}

static void test_cuda(void) {
    backend *b = NULL;
    strata_err err = {0};
    int rc = backend_create("cuda", 1, &b, &err);
    if (rc == 0) { /* a GPU machine */
        CHECK(!strcmp(backend_name(b), "cuda"));
        CHECK(backend_works(b));
        backend_destroy(b);
        return;
    }
    CHECK_MSG((rc == STRATA_ENOTFOUND || rc == STRATA_EDEVICE || rc == STRATA_EUNSUPPORTED) &&
                  b == NULL && strstr(err.msg, "cuda"),
              "rc %d: %s", rc, err.msg);
    /* A library path that does not exist is not fatal when another one is found. */
    setenv("STRATA_CUDA_LIB", "/nonexistent/libstrata_cuda.so", 1);
    strata_err err2 = {0};
    int rc2 = backend_create("cuda", 1, &b, &err2);
    CHECK(rc2 == rc || rc2 == STRATA_ENOTFOUND);
    if (rc2 == 0) backend_destroy(b);
    unsetenv("STRATA_CUDA_LIB");
}

int main(void) {
    RUN(test_cpu_and_auto);
    RUN(test_bad_names);
    RUN(test_cuda);
    TEST_DONE();
}
