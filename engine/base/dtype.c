/* dtype.c - name and size tables generated from DTYPE_LIST. */
#include "engine/base/dtype.h"

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
#define DTYPE_ROW(n, s, b) {s, b},
    DTYPE_LIST(DTYPE_ROW)
#undef DTYPE_ROW
};

size_t dtype_size(dtype t) { return (unsigned)t < DTYPE_COUNT ? dtype_table[t].size : 0; }

const char *dtype_name(dtype t) { return (unsigned)t < DTYPE_COUNT ? dtype_table[t].name : "?"; }

int dtype_parse(const char *s, dtype *out) {
    for (int i = 0; i < DTYPE_COUNT; i++) {
        if (strcmp(s, dtype_table[i].name) == 0) {
            *out = (dtype)i;
            return 0;
        }
    }
    return -1;
}
