/* backend_select.c - backend choice and the run-time load of the CUDA backend.
 *
 * dlopen() keeps CUDA out of the strata binary's link: a machine without the library,
 * the driver or a GPU gets a clear message for "cuda" and the CPU for "auto". The handle
 * is never closed: backends made from the library may live until exit, and the static
 * CUDA runtime inside it registers exit-time handlers. The library's one entry point is
 * the only symbol looked up by name: everything else it offers (graphs, device
 * sampling, memory) is a slot of the ops table it fills. */
#include "kernels/backend_select.h"

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BACKEND_CUDA_LIB "libstrata_cuda.so"

/* Tries one path; keeps the first loader message in why (a library that exists but
 * cannot load - a missing libcublas, say - explains more than "not found"). */
static void *backend_try_open(const char *path, char *why, size_t why_len) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && !why[0] && (strchr(path, '/') == NULL || access(path, F_OK) == 0)) {
        const char *e = dlerror();
        snprintf(why, why_len, "%s", e ? e : path);
    }
    return h;
}

static void *backend_open_cuda_lib(char *why, size_t why_len) {
    char exe[PATH_MAX], path[PATH_MAX + 64];
    void *h = NULL;
    const char *env = getenv("STRATA_CUDA_LIB");
    if (env && *env && (h = backend_try_open(env, why, why_len))) return h;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        for (int up = 0; up < 2 && !h; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = 0;
            snprintf(path, sizeof path, "%s/%s", exe, BACKEND_CUDA_LIB);
            h = backend_try_open(path, why, why_len);
        }
    }
    if (!h) h = backend_try_open(BACKEND_CUDA_LIB, why, why_len);
    return h;
}

/* "cuda" -> 0, "cuda:N" -> N; -1 when malformed. */
static int backend_cuda_index(const char *device) {
    if (!strcmp(device, "cuda") || !strcmp(device, "auto")) return 0;
    if (strncmp(device, "cuda:", 5)) return -1;
    char *end;
    long v = strtol(device + 5, &end, 10);
    return *end || end == device + 5 || v < 0 || v > 1024 ? -1 : (int)v;
}

int backend_create(const char *device, int threads, backend **out, strata_err *err) {
    if (!device || !strcmp(device, "cpu")) return backend_cpu_create(threads, out, err);
    int is_auto = !strcmp(device, "auto");
    if (!is_auto && strncmp(device, "cuda", 4))
        return strata_err_set(err, STRATA_EINVALID,
                              "--device %s: expected cpu, cuda, cuda:N or auto", device);
    int idx = backend_cuda_index(device);
    if (idx < 0)
        return strata_err_set(err, STRATA_EINVALID, "--device %s: bad CUDA device index", device);
    char why[512] = "";
    void *h = backend_open_cuda_lib(why, sizeof why);
    if (!h) {
        if (is_auto) return backend_cpu_create(threads, out, err);
        return strata_err_set(err, STRATA_ENOTFOUND,
                              "cuda backend: cannot load %s (%s); build it with `make cuda`, and "
                              "the CUDA libraries it needs (libcublas) must be on LD_LIBRARY_PATH",
                              BACKEND_CUDA_LIB, why[0] ? why : "not found next to strata");
    }
    strata_cuda_backend_create_fn create;
    *(void **)&create = dlsym(h, "strata_cuda_backend_create");
    if (!create) {
        if (is_auto) return backend_cpu_create(threads, out, err);
        return strata_err_set(err, STRATA_EUNSUPPORTED, "cuda backend: %s has no entry point",
                              BACKEND_CUDA_LIB);
    }
    strata_err cerr = {0};
    int rc = create(idx, out, &cerr);
    if (rc == 0) return 0;
    if (is_auto) return backend_cpu_create(threads, out, err);
    return strata_err_set(err, rc, "%s", cerr.msg);
}
