/* cuda_norm.cu - the row normalisations: RMSNorm (plain, 1+w, none), gated RMSNorm,
 * gate-first grouped RMSNorm (Mamba2), the L2 norm of the DeltaNet q/k heads, and the
 * residual step fused with the norms around it.
 *
 * One row per warp for short rows, one row per 256-thread block from NORM_WIDE on (a decode
 * step has a single 1-4K row, or Nemotron-H's 8 groups of 960 for its gated norm: a warp
 * alone walks 30 elements a lane in each pass, one load round after another; on the H200
 * that norm took 30 us a call).
 * Two passes over the row: the sum of squares, then the scaled write, reading x again
 * from L1/L2; every thread writes only elements it read, so out may alias x. The scale
 * factor is computed as the CPU reference computes it (1 / sqrtf(...)), not rsqrtf. */
#include "kernels/cuda/cuda_norm.cuh"

/* kind: 0 rmsnorm (mode), 1 gated (x̂·w·silu(z)), 2 l2norm (x·scale/sqrt(Σx²+eps)),
 * 3 grouped gate-first (v = x·silu(z), v̂ = v / sqrt(mean v² + eps), v̂·w).
 * Rows: m of n floats, ld apart (ld = n except rmsnorm / l2norm). For kinds 2 and 3 a
 * "row" is one group (a head): row r is group r % gpr of token r / gpr, at
 * r/gpr·ld + (r%gpr)·n, weight offset (r%gpr)·n (kind 3). */
template <int TPR>
__global__ void __launch_bounds__(NORM_BLOCK)
    norm_rows(float *out, const float *x, const float *z, const void *w, int wdt, int m, int n,
              int ld, int gpr, float eps, float scale, int mode, int kind) {
    cuda_pdl_trigger(); /* the GEMV after it may launch (cuda_launch_pdl) */
    __shared__ float sm[NORM_BLOCK / 32];
    int row = blockIdx.x * (NORM_BLOCK / TPR) + threadIdx.x / TPR;
    int t = threadIdx.x % TPR;
    if (row >= m) return; /* TPR 32: a whole warp; TPR 256: a whole block (one row) */
    size_t base = (size_t)row * ld, woff = 0;
    if (kind == 3 || kind == 2) {
        base = (size_t)(row / gpr) * ld + (size_t)(row % gpr) * n;
        woff = (size_t)(row % gpr) * n;
    }
    const float *xr = x + base;
    const float *zr = z ? z + base : NULL;
    float ss = norm_row_sum<TPR>(norm_part_ss<TPR>(xr, zr, n, t, kind == 3), sm);
    float r;
    if (kind == 2) r = scale / sqrtf(ss + eps);
    else r = norm_inv_rms(ss, n, eps);
    float *o = out + base;
    for (int j = t; j < n; j += TPR) {
        float v = xr[j];
        if (kind == 0) {
            float g = mode == BK_NORM_PLAIN      ? cuda_wget(w, wdt, j)
                      : mode == BK_NORM_ONE_PLUS ? 1.0f + cuda_wget(w, wdt, j)
                                                 : 1.0f;
            o[j] = v * r * g;
        } else if (kind == 1) {
            o[j] = norm_gated(false, v, zr[j], r, cuda_wget(w, wdt, j));
        } else if (kind == 2) {
            o[j] = v * r;
        } else {
            o[j] = norm_gated(true, v, zr[j], r, cuda_wget(w, wdt, woff + j));
        }
    }
}

__device__ __forceinline__ float norm_gain(const void *w, int wdt, int mode, int j) {
    return mode == BK_NORM_PLAIN      ? cuda_wget(w, wdt, j)
           : mode == BK_NORM_ONE_PLUS ? 1.0f + cuda_wget(w, wdt, j)
                                      : 1.0f;
}

/* The residual step of one row of up to NORM_CACHED · NORM_BLOCK floats (every model's
 * hidden size) by a whole block: each thread loads its elements of delta and x and both
 * norms' gains at once and keeps them in registers, so the three passes (delta's sum of
 * squares, the add and x's, the normed write) wait for one round of loads instead of
 * three. The same sums in the same order as the loops of norm_residual. */
enum { NORM_CACHED = 16 };
__device__ __forceinline__ void norm_residual_cached(float *__restrict__ xr, float *__restrict__ o,
                                                     const float *__restrict__ dr, const void *dw,
                                                     int dwdt, int dmode, const void *sw, int swdt,
                                                     const void *nw, int nwdt, int nmode, int n,
                                                     float eps, float *sm) {
    const int t = threadIdx.x;
    float d[NORM_CACHED], v[NORM_CACHED], gd[NORM_CACHED], gn[NORM_CACHED];
#pragma unroll
    for (int e = 0; e < NORM_CACHED; e++) {
        const int j = t + e * NORM_BLOCK;
        d[e] = v[e] = gd[e] = gn[e] = 0.0f;
        if (j < n) {
            d[e] = dr[j], v[e] = xr[j];
            if (dw) gd[e] = norm_gain(dw, dwdt, dmode, j);
            if (o) gn[e] = norm_gain(nw, nwdt, nmode, j);
        }
    }
    const float f = sw ? 1.0f * cuda_wget(sw, swdt, 0) : 1.0f; /* as the scale op */
    float r = 1.0f;
    if (dw) {
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < NORM_CACHED; e++)
            if (t + e * NORM_BLOCK < n) ss += d[e] * d[e];
        ss = norm_row_sum<NORM_BLOCK>(ss, sm);
        r = 1.0f / sqrtf(ss / (float)n + eps);
    }
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < NORM_CACHED; e++) {
        const int j = t + e * NORM_BLOCK;
        if (j >= n) continue;
        float w = v[e] + (dw ? d[e] * r * gd[e] : d[e]);
        if (sw) w *= f;
        xr[j] = v[e] = w;
        ss += w * w;
    }
    if (!o) return;
    ss = norm_row_sum<NORM_BLOCK>(ss, sm);
    r = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
    for (int e = 0; e < NORM_CACHED; e++) {
        const int j = t + e * NORM_BLOCK;
        if (j < n) o[j] = v[e] * r * gn[e];
    }
}

/* The fused residual step (backend.h, residual) on rows of n, TPR threads a row: the
 * delta's norm (when dw), x += d, then x's norm into xn (when xn). Each thread reads and
 * writes only its own elements of x, so the second sum sees this thread's new values. */
template <int TPR>
__global__ void __launch_bounds__(NORM_BLOCK)
    norm_residual(float *__restrict__ x, float *__restrict__ xn, const float *__restrict__ delta,
                  const void *dw, int dwdt, int dmode, const void *sw, int swdt, const void *nw,
                  int nwdt, int nmode, int m, int n, float eps) {
    cuda_pdl_trigger(); /* the GEMV after it may launch (cuda_launch_pdl) */
    __shared__ float sm[NORM_BLOCK / 32];
    int row = blockIdx.x * (NORM_BLOCK / TPR) + threadIdx.x / TPR;
    int t = threadIdx.x % TPR;
    if (row >= m) return; /* TPR 32: a whole warp; TPR 256: a whole block (one row) */
    float *xr = x + (size_t)row * n;
    const float *dr = delta + (size_t)row * n;
    if (TPR == NORM_BLOCK && n <= NORM_CACHED * NORM_BLOCK) {
        norm_residual_cached(xr, xn ? xn + (size_t)row * n : NULL, dr, dw, dwdt, dmode, sw, swdt,
                             nw, nwdt, nmode, n, eps, sm);
        return;
    }
    float r = 1.0f;
    if (dw) {
        float ss = 0.0f;
        for (int j = t; j < n; j += TPR) ss += dr[j] * dr[j];
        ss = norm_row_sum<TPR>(ss, sm);
        r = 1.0f / sqrtf(ss / (float)n + eps);
    }
    const float f = sw ? 1.0f * cuda_wget(sw, swdt, 0) : 1.0f; /* as the scale op */
    float ss = 0.0f;
    for (int j = t; j < n; j += TPR) {
        float v = xr[j] + (dw ? dr[j] * r * norm_gain(dw, dwdt, dmode, j) : dr[j]);
        if (sw) v *= f;
        xr[j] = v;
        ss += v * v;
    }
    if (!xn) return;
    ss = norm_row_sum<TPR>(ss, sm);
    r = 1.0f / sqrtf(ss / (float)n + eps);
    float *o = xn + (size_t)row * n;
    for (int j = t; j < n; j += TPR) o[j] = xr[j] * r * norm_gain(nw, nwdt, nmode, j);
}

/* ---- launchers ---- */

static void norm_launch(cuda_impl *c, const char *name, float *out, const float *x, const float *z,
                        const bk_weight *w, int m, int n, int ld, int gpr, float eps, float scale,
                        int mode, int kind) {
    const void *wd = w ? w->data : NULL;
    int wdt = w ? (int)w->dt : 0;
    if (n >= NORM_WIDE) {
        norm_rows<NORM_BLOCK><<<m, NORM_BLOCK, 0, c->stream>>>(out, x, z, wd, wdt, m, n, ld, gpr,
                                                               eps, scale, mode, kind);
    } else {
        unsigned blocks = (unsigned)((m + NORM_BLOCK / 32 - 1) / (NORM_BLOCK / 32));
        norm_rows<32><<<blocks, NORM_BLOCK, 0, c->stream>>>(out, x, z, wd, wdt, m, n, ld, gpr, eps,
                                                            scale, mode, kind);
    }
    cuda_check_launch(c, name);
}

void cuda_rmsnorm(backend *b, float *out, const float *x, const bk_weight *w, int m, int n, int ld,
                  float eps, int mode) {
    cuda_impl *c = cuda_impl_of(b);
    if (m <= 0 || n <= 0 ||
        !cuda_enter(c, CUDA_OP_RMSNORM, (const void *)out, (const void *)x, w ? w->data : NULL, m,
                    n, ld, eps, mode))
        return;
    norm_launch(c, "rmsnorm", out, x, NULL, mode == BK_NORM_NONE ? NULL : w, m, n, ld, 1, eps, 1.0f,
                mode, 0);
}

void cuda_rmsnorm_gated(backend *b, float *out, const float *x, const float *z, const bk_weight *w,
                        int m, int n, float eps) {
    cuda_impl *c = cuda_impl_of(b);
    if (m <= 0 || n <= 0 ||
        !cuda_enter(c, CUDA_OP_RMSNORM_GATED, (const void *)out, (const void *)x, (const void *)z,
                    w->data, m, n, eps))
        return;
    norm_launch(c, "rmsnorm_gated", out, x, z, w, m, n, n, 1, eps, 1.0f, 0, 1);
}

void cuda_residual(backend *b, float *x, float *xn, const float *delta, const bk_weight *dnorm,
                   int dmode, const bk_weight *s, const bk_weight *nw, int nmode, int m, int n,
                   float eps) {
    cuda_impl *c = cuda_impl_of(b);
    const void *dw = dnorm ? dnorm->data : NULL, *nwd = xn && nw ? nw->data : NULL;
    const void *sw = s ? s->data : NULL;
    if (m <= 0 || n <= 0 ||
        !cuda_enter(c, CUDA_OP_RESIDUAL, (const void *)x, (const void *)xn, (const void *)delta, dw,
                    dmode, sw, nwd, nmode, m, n, eps))
        return;
    int dwdt = dnorm ? (int)dnorm->dt : 0, nwdt = nwd ? (int)nw->dt : 0;
    int swdt = s ? (int)s->dt : 0;
    if (n >= NORM_WIDE) {
        norm_residual<NORM_BLOCK><<<m, NORM_BLOCK, 0, c->stream>>>(
            x, xn, delta, dw, dwdt, dmode, sw, swdt, nwd, nwdt, nmode, m, n, eps);
    } else {
        unsigned blocks = (unsigned)((m + NORM_BLOCK / 32 - 1) / (NORM_BLOCK / 32));
        norm_residual<32><<<blocks, NORM_BLOCK, 0, c->stream>>>(x, xn, delta, dw, dwdt, dmode, sw,
                                                                swdt, nwd, nwdt, nmode, m, n, eps);
    }
    cuda_check_launch(c, "residual");
}

void cuda_l2norm(backend *b, float *x, int m, int n, int ld, int gpr, float eps, float scale) {
    cuda_impl *c = cuda_impl_of(b);
    if (m <= 0 || n <= 0 || gpr <= 0 ||
        !cuda_enter(c, CUDA_OP_L2NORM, (const void *)x, m, n, ld, gpr, eps, scale))
        return;
    norm_launch(c, "l2norm", x, x, NULL, NULL, m, n, ld, gpr, eps, scale, 0, 2);
}

void cuda_rmsnorm_gated_grouped(backend *b, float *out, const float *x, const float *z,
                                const bk_weight *w, int m, int width, int group, float eps) {
    cuda_impl *c = cuda_impl_of(b);
    if (m <= 0 || width <= 0 || group <= 0 ||
        !cuda_enter(c, CUDA_OP_NORM_GROUPED, (const void *)out, (const void *)x, (const void *)z,
                    w->data, m, width, group, eps))
        return;
    int gpr = width / group;
    norm_launch(c, "rmsnorm_gated_grouped", out, x, z, w, m * gpr, group, width, gpr, eps, 1.0f, 0,
                3);
}
