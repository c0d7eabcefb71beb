/* test_file.h - a test's files: reading a fixture whole, and a scratch directory that goes
 * away with the test. Test-only. */
#ifndef STRATA_TEST_FILE_H
#define STRATA_TEST_FILE_H

#include <stdio.h>
#include <stdlib.h>

/* The file's bytes with a NUL after them (so a text file is also a string), malloc'ed;
 * len (may be NULL) receives their count. NULL when it cannot be read whole. */
static inline char *test_file_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *p = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (!p) return NULL;
    p[n] = 0;
    if (len) *len = (size_t)n;
    return p;
}

static const char *test_scratch_path;

static inline void test_scratch_remove(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_scratch_path);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_scratch_path);
}

/* Makes the directory of the mkdtemp template tmpl (ending in XXXXXX, rewritten in place)
 * and removes it, with all the test wrote there, when the test exits. One a test; 0 when
 * made. */
static inline int test_scratch_dir(char *tmpl) {
    if (test_scratch_path || !mkdtemp(tmpl)) return -1;
    test_scratch_path = tmpl;
    atexit(test_scratch_remove);
    return 0;
}

#endif
