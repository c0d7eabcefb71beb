/* alloc_hook.h - a test-only allocator that counts allocations and fails the n-th one on
 * demand (style.md §11 and §12; SQLite's test_malloc.c), with no hook in library code.
 *
 * Including this header defines malloc, calloc, realloc, free, posix_memalign,
 * aligned_alloc, memalign, valloc and pvalloc in the test executable. ELF symbol
 * interposition makes those definitions the ones every library calls: libc's own internal
 * calls (strdup, fopen, qsort), jansson, oniguruma, libstdc++'s operator new. Each one
 * forwards to glibc's allocator (__libc_malloc, ...). Between alloc_hook_start and
 * alloc_hook_stop the hook counts allocation calls (all, or only those made from the
 * executable's own code), blocks made minus blocks freed (a leak check that needs no
 * sanitizer), frees, and their first callers; it can fail one chosen call.
 *
 * AddressSanitizer defines the same symbols to run its own allocator. Forwarding to glibc
 * there would hide every block from ASan (and a block ASan allocated inside one of its
 * interceptors would reach glibc's free), so a test chooses:
 *  - default: under ASan nothing is interposed and alloc_hook_on() is 0; the test runs
 *    its scenario without counting (test_decode_alloc.c does this);
 *  - ALLOC_HOOK_WITH_ASAN defined before the include: under gcc's ASan every function
 *    forwards to ASan's entry points (__interceptor_malloc, ...), so ASan still checks
 *    every block and LeakSanitizer still reports a leak at exit. Allocations that ASan
 *    makes for itself (its strdup and getline interceptors, its operator new) bypass the
 *    hook there; the plain build of the same test sees them.
 * Include it in exactly one file of a test binary. Thread-safe (atomics). */
#ifndef STRATA_ALLOC_HOOK_H
#define STRATA_ALLOC_HOOK_H

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define ALLOC_HOOK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ALLOC_HOOK_ASAN 1
#endif
#endif

/* ALLOC_HOOK_REAL(malloc) names the allocator the hooks forward to. */
#if !defined(ALLOC_HOOK_ASAN)
#define ALLOC_HOOK_ON 1
#define ALLOC_HOOK_REAL(name) __libc_##name
#elif defined(ALLOC_HOOK_WITH_ASAN) && defined(__GNUC__) && !defined(__clang__)
/* gcc's libasan names its allocator entry points __interceptor_<name>. */
#define ALLOC_HOOK_ON 1
#define ALLOC_HOOK_REAL(name) __interceptor_##name
#else
#define ALLOC_HOOK_ON 0
#endif

#if ALLOC_HOOK_ON
extern void *ALLOC_HOOK_REAL(malloc)(size_t n);
extern void *ALLOC_HOOK_REAL(calloc)(size_t n, size_t size);
extern void *ALLOC_HOOK_REAL(realloc)(void *p, size_t n);
extern void ALLOC_HOOK_REAL(free)(void *p);
extern void *ALLOC_HOOK_REAL(memalign)(size_t align, size_t n);
#define ALLOC_HOOK_MALLOC ALLOC_HOOK_REAL(malloc)
#define ALLOC_HOOK_CALLOC ALLOC_HOOK_REAL(calloc)
#define ALLOC_HOOK_REALLOC ALLOC_HOOK_REAL(realloc)
#define ALLOC_HOOK_FREE ALLOC_HOOK_REAL(free)
#define ALLOC_HOOK_MEMALIGN ALLOC_HOOK_REAL(memalign)
#endif

#define ALLOC_HOOK_SITES 32
#define ALLOC_HOOK_SPARED 8 /* code ranges of spared libraries */

/* Which allocation calls count towards fail_at (every call is counted in live/frees). */
enum {
    ALLOC_HOOK_ALL = 0, /* every call */
    ALLOC_HOOK_EXE = 1, /* calls made from the executable's own code: the statically linked
                         * library, not jansson / oniguruma / libc on its behalf */
};

static struct {
    atomic_int counting;     /* count (and maybe fail) allocation calls */
    atomic_int scope;        /* ALLOC_HOOK_ALL / ALLOC_HOOK_EXE */
    atomic_long allocs;      /* allocation calls in scope while counting */
    atomic_long frees;       /* blocks released while counting (free, realloc(p, 0)) */
    atomic_long live;        /* blocks made minus blocks released while counting */
    atomic_long fail_at;     /* the in-scope allocation call number that returns NULL; 0: none */
    atomic_int failed;       /* that call happened */
    void *_Atomic fail_site; /* its caller */
    atomic_int n_sites;
    void *_Atomic sites[ALLOC_HOOK_SITES];  /* callers of the first counted calls */
    atomic_int site_free[ALLOC_HOOK_SITES]; /* that call was a free */
    atomic_int n_spared;                    /* calls from these ranges are not counted */
    uintptr_t spared_lo[ALLOC_HOOK_SPARED], spared_hi[ALLOC_HOOK_SPARED];
} alloc_hook_state;

/* 1 when the hook is compiled in (see the top of the file). */
static inline int alloc_hook_on(void) { return ALLOC_HOOK_ON; }

/* Starts counting from zero; fail_at > 0 makes that in-scope allocation call (1-based)
 * fail, once. */
static inline void alloc_hook_start_scope(long fail_at, int scope) {
    atomic_store(&alloc_hook_state.allocs, 0);
    atomic_store(&alloc_hook_state.frees, 0);
    atomic_store(&alloc_hook_state.live, 0);
    atomic_store(&alloc_hook_state.failed, 0);
    atomic_store(&alloc_hook_state.n_sites, 0);
    atomic_store(&alloc_hook_state.fail_at, fail_at);
    atomic_store(&alloc_hook_state.scope, scope);
    atomic_store(&alloc_hook_state.counting, 1);
}

static inline void alloc_hook_start(long fail_at) {
    alloc_hook_start_scope(fail_at, ALLOC_HOOK_ALL);
}

static inline void alloc_hook_stop(void) {
    atomic_store(&alloc_hook_state.counting, 0);
    atomic_store(&alloc_hook_state.fail_at, 0);
}

static inline long alloc_hook_allocs(void) { return atomic_load(&alloc_hook_state.allocs); }
static inline long alloc_hook_frees(void) { return atomic_load(&alloc_hook_state.frees); }
static inline long alloc_hook_live(void) { return atomic_load(&alloc_hook_state.live); }
static inline int alloc_hook_failed(void) { return atomic_load(&alloc_hook_state.failed); }

struct alloc_hook_spare_arg {
    const char *lib;
    int found;
};

static inline int alloc_hook_spare_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct alloc_hook_spare_arg *a = data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, a->lib)) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        int k = atomic_load(&alloc_hook_state.n_spared);
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || k == ALLOC_HOOK_SPARED) continue;
        alloc_hook_state.spared_lo[k] = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
        alloc_hook_state.spared_hi[k] = alloc_hook_state.spared_lo[k] + ph->p_memsz;
        atomic_store(&alloc_hook_state.n_spared, k + 1);
        a->found = 1;
    }
    return 0;
}

/* From now on allocation calls made by the code of the loaded shared object whose file
 * name contains `lib` are neither counted nor failed: for a library that does not survive
 * a failed allocation, so that a test fails only what the code under test must handle
 * (the test says which library and why). Call it while not counting. Returns 0, or -1 when
 * no such object is loaded or there is no room left. */
static inline int alloc_hook_spare(const char *lib) {
    struct alloc_hook_spare_arg a = {lib, 0};
    dl_iterate_phdr(alloc_hook_spare_object, &a);
    return a.found ? 0 : -1;
}

/* Spares nothing again. */
static inline void alloc_hook_spare_none(void) { atomic_store(&alloc_hook_state.n_spared, 0); }

/* Prints "what called from <where>": a symbol when the caller is exported, else
 * file+offset for addr2line -e FILE OFFSET. */
static inline void alloc_hook_print_addr(FILE *f, const char *what, void *a) {
    Dl_info di;
    if (dladdr(a, &di) && di.dli_fname && di.dli_sname)
        fprintf(f, "    %s called from %s+0x%tx (%s)\n", what, di.dli_sname,
                (char *)a - (char *)di.dli_saddr, di.dli_fname);
    else if (di.dli_fname)
        fprintf(f, "    %s called from %s+0x%tx\n", what, di.dli_fname,
                (char *)a - (char *)di.dli_fbase);
    else fprintf(f, "    %s called from %p\n", what, a);
}

/* Where the allocation that was made to fail was called from. */
static inline void alloc_hook_print_fail_site(FILE *f) {
    if (atomic_load(&alloc_hook_state.failed))
        alloc_hook_print_addr(f, "failed allocation", atomic_load(&alloc_hook_state.fail_site));
}

/* Prints the distinct callers of the first counted calls, each with how often it came. */
static inline void alloc_hook_print_sites(FILE *f) {
    int n = atomic_load(&alloc_hook_state.n_sites);
    if (n > ALLOC_HOOK_SITES) n = ALLOC_HOOK_SITES;
    for (int i = 0; i < n; i++) {
        void *a = atomic_load(&alloc_hook_state.sites[i]);
        int fr = atomic_load(&alloc_hook_state.site_free[i]), seen = 0, times = 0;
        for (int j = 0; j < n; j++) {
            int same = atomic_load(&alloc_hook_state.sites[j]) == a &&
                       atomic_load(&alloc_hook_state.site_free[j]) == fr;
            seen |= j < i && same;
            times += same;
        }
        if (seen) continue;
        char what[32];
        snprintf(what, sizeof what, "%dx %s", times, fr ? "free" : "allocation");
        alloc_hook_print_addr(f, what, a);
    }
}

#if ALLOC_HOOK_ON
/* The hook runs before ASan has mapped its shadow memory (the dynamic loader allocates
 * while ASan resolves its interceptors), so it must not be instrumented itself. */
#define ALLOC_HOOK_RAW __attribute__((no_sanitize_address, no_sanitize_undefined))

/* Bounds of the executable's code, from the linker (GNU ld and lld define both). */
extern char __executable_start[], etext[];

/* Records the caller of a counted call. */
ALLOC_HOOK_RAW static void alloc_hook_site(void *caller, int is_free) {
    int s = atomic_fetch_add(&alloc_hook_state.n_sites, 1);
    if (s < ALLOC_HOOK_SITES) {
        atomic_store(&alloc_hook_state.sites[s], caller);
        atomic_store(&alloc_hook_state.site_free[s], is_free);
    }
}

/* 1 when this allocation call must fail. */
ALLOC_HOOK_RAW static int alloc_hook_note(void *caller) {
    if (!atomic_load_explicit(&alloc_hook_state.counting, memory_order_relaxed)) return 0;
    if (atomic_load(&alloc_hook_state.scope) == ALLOC_HOOK_EXE &&
        !((char *)caller >= __executable_start && (char *)caller < etext))
        return 0;
    int n_spared = atomic_load_explicit(&alloc_hook_state.n_spared, memory_order_relaxed);
    for (int i = 0; i < n_spared; i++)
        if ((uintptr_t)caller >= alloc_hook_state.spared_lo[i] &&
            (uintptr_t)caller < alloc_hook_state.spared_hi[i])
            return 0;
    long k = atomic_fetch_add(&alloc_hook_state.allocs, 1) + 1;
    alloc_hook_site(caller, 0);
    if (k == atomic_load(&alloc_hook_state.fail_at)) {
        atomic_store(&alloc_hook_state.fail_site, caller);
        atomic_store(&alloc_hook_state.failed, 1);
        return 1;
    }
    return 0;
}

/* Returns p after counting a new block. */
ALLOC_HOOK_RAW static void *alloc_hook_made(void *p) {
    if (p && atomic_load_explicit(&alloc_hook_state.counting, memory_order_relaxed))
        atomic_fetch_add(&alloc_hook_state.live, 1);
    return p;
}

ALLOC_HOOK_RAW static void alloc_hook_note_free(void *p, void *caller) {
    if (p && atomic_load_explicit(&alloc_hook_state.counting, memory_order_relaxed)) {
        atomic_fetch_add(&alloc_hook_state.frees, 1);
        atomic_fetch_sub(&alloc_hook_state.live, 1);
        alloc_hook_site(caller, 1);
    }
}

ALLOC_HOOK_RAW void *malloc(size_t n) {
    if (alloc_hook_note(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return alloc_hook_made(ALLOC_HOOK_MALLOC(n));
}

ALLOC_HOOK_RAW void *calloc(size_t n, size_t size) {
    if (alloc_hook_note(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return alloc_hook_made(ALLOC_HOOK_CALLOC(n, size));
}

ALLOC_HOOK_RAW void *realloc(void *p, size_t n) {
    if (p && !n) { /* glibc frees the block and returns NULL */
        alloc_hook_note_free(p, __builtin_return_address(0));
        return ALLOC_HOOK_REALLOC(p, n);
    }
    if (alloc_hook_note(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL; /* p stays valid, as with a real failure */
    }
    void *q = ALLOC_HOOK_REALLOC(p, n);
    return p ? q : alloc_hook_made(q);
}

ALLOC_HOOK_RAW void free(void *p) {
    alloc_hook_note_free(p, __builtin_return_address(0));
    ALLOC_HOOK_FREE(p);
}

ALLOC_HOOK_RAW static void *alloc_hook_aligned(size_t align, size_t n, void *caller) {
    if (alloc_hook_note(caller)) {
        errno = ENOMEM;
        return NULL;
    }
    return alloc_hook_made(ALLOC_HOOK_MEMALIGN(align, n));
}

ALLOC_HOOK_RAW int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = alloc_hook_aligned(align, n, __builtin_return_address(0));
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

ALLOC_HOOK_RAW void *aligned_alloc(size_t align, size_t n) {
    return alloc_hook_aligned(align, n, __builtin_return_address(0));
}

ALLOC_HOOK_RAW void *memalign(size_t align, size_t n) {
    return alloc_hook_aligned(align, n, __builtin_return_address(0));
}

ALLOC_HOOK_RAW void *valloc(size_t n) {
    return alloc_hook_aligned((size_t)sysconf(_SC_PAGESIZE), n, __builtin_return_address(0));
}

ALLOC_HOOK_RAW void *pvalloc(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return alloc_hook_aligned(pg, (n + pg - 1) & ~(pg - 1), __builtin_return_address(0));
}
#endif

#endif
