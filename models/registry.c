/* registry.c - the architectures this build runs, listed once. */
#include <string.h>

#include "models/arch.h"

#define ARCH_LIST(X) X(arch_qwen35) X(arch_gemma4) X(arch_nemotron_h)

#define ARCH_DECL(a) extern const model_arch a;
ARCH_LIST(ARCH_DECL)
#undef ARCH_DECL

static const model_arch *const arch_table[] = {
#define ARCH_ROW(a) &a,
    ARCH_LIST(ARCH_ROW)
#undef ARCH_ROW
};

const model_arch *arch_find(const char *model_type) {
    if (!model_type) return NULL;
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++) {
        const model_arch *a = arch_table[i];
        if (!strcmp(a->model_type, model_type) || (a->alt_type && !strcmp(a->alt_type, model_type)))
            return a;
    }
    return NULL;
}
