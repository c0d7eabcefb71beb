/* cpu_ssd_chunk.c - the chunked (state space dual) form of the Mamba2 SSD on the CPU, for
 * the heads of one (sequence, B/C group): Nemotron-H spec §7, perf-anchors §6.3.
 *
 * Per chunk of n <= CPU_SSD_CHUNK tokens entering with a head's state S0 [P, N], with
 * x̃_t = Δ_t x_t, ℓ_t = Δ_t A, s_i = Σ_{t<=i} ℓ_t and D[i, j] = exp(s_i − s_j) (j <= i):
 *   Yᵀ = S0 · Cᵀ · diag(e^s) + X̃ᵀ · upper_incl(B Cᵀ ∘ Dᵀ)       (y = Y + D_h x)
 *   S  = e^{s_last} · S0 + X̃ᵀ · diag(e^{s_last − s}) · B
 * which is the recurrence S_t = e^{ℓ_t} S_{t−1} + x̃_t ⊗ B_t, y_t = S_t C_t + D_h x_t
 * unrolled over the chunk. Written with the state in its own [P, N] layout and the
 * outputs transposed, every term is a tile product (cpu_tile.h) and nothing of the state
 * is transposed; B, Cᵀ and B Cᵀ are gathered once per chunk for all the heads that share
 * the group (12 in the 4B), which per head leaves 2·P·N + P·n/2 multiply-adds per token.
 *
 * Chunk 32, not the checkpoint's 256 (the chunk size changes only rounding): the
 * quadratic term costs P·n/2 multiply-adds per token and head, 3% of the state terms at
 * 32 and 25% at 256, a group's tiles stay in L2, and 32 measured at least as fast as 64
 * (tools/bench_cpu_mixers.c). */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_mamba.h"
#include "kernels/cpu/cpu_tile.h"

/* B Cᵀ and the masks fill whole 16-column blocks of a [CS, CS] tile. */
_Static_assert(CPU_SSD_CHUNK % CPU_TILE_VW == 0, "chunk is a multiple of the tile width");

/* Floats of scratch one group needs (see the layout in cpu_ssd_chunk_group). */
static size_t cpu_ssd_chunk_floats(int P, int N) {
    size_t C = CPU_SSD_CHUNK, Np = (size_t)cpu_tile_pad(N);
    return C * Np + (size_t)N * C + 2 * C * C + 2 * (size_t)P * C + (size_t)P * Np;
}

int cpu_ssd_chunk_fits(int P, int N) {
    return cpu_ssd_chunk_floats(P, N) <= CPU_TILE_SCRATCH_FLOATS;
}

/* Δ and the cumulative log decay of one head over a chunk: s in double, so s_i − s_j keeps
 * the digits a chunk of 64 f32 steps would lose; ℓ is floored at −1000 so differences stay
 * finite where e^ℓ is 0 in f32 anyway. es[i] = e^{s_i}; is[j] = e^{−s_j} when no factor
 * can overflow (returns 1), so D[i, j] = es[i]·is[j] costs no exp. */
static int cpu_ssd_chunk_decay(float *restrict delta, double *restrict s, double *restrict es,
                               double *restrict is, const float *restrict dt, int ld_dt, float A,
                               float bias, float dt_min, int n) {
    double acc = 0.0;
    for (int j = 0; j < n; j++) {
        delta[j] = cpu_ssd_delta(dt[(size_t)j * ld_dt] + bias, dt_min);
        double l = (double)delta[j] * A;
        s[j] = acc += l > -1000.0 ? l : -1000.0;
        es[j] = exp(s[j]);
    }
    if (s[n - 1] <= -600.0) return 0; /* e^{600} < DBL_MAX, e^{-600} is no subnormal */
    for (int j = 0; j < n; j++) is[j] = exp(-s[j]);
    return 1;
}

void cpu_ssd_chunk_group(float *restrict state, float *restrict y, int ld_y,
                         const float *restrict x, int ld_x, const float *restrict B,
                         const float *restrict C, int ld_bc, const float *restrict dt, int ld_dt,
                         const float *restrict A, const float *restrict bias,
                         const float *restrict d, float dt_min, int nh, int T, int P, int N,
                         float *restrict ws, cpu_tile_gemm_fn gemm) {
    assert(cpu_ssd_chunk_fits(P, N));
    const int CS = CPU_SSD_CHUNK, Np = cpu_tile_pad(N);
    /* scratch layout, every tile row-major */
    float *Bm = ws;                   /* [CS, Np] the chunk's B rows, zero-padded */
    float *Ct = Bm + (size_t)CS * Np; /* [N, CS]  Cᵀ */
    float *BC = Ct + (size_t)N * CS;  /* [CS, CS] B Cᵀ */
    float *Mt = BC + (size_t)CS * CS; /* [CS, CS] upper_incl(B Cᵀ ∘ Dᵀ) of one head */
    float *Xt = Mt + (size_t)CS * CS; /* [P, CS]  X̃ᵀ, then X̃ᵀ diag(e^{s_last − s}) */
    float *Yt = Xt + (size_t)P * CS;  /* [P, CS]  Yᵀ */
    float *Sp = Yt + (size_t)P * CS;  /* [P, Np]  a head's state where N is no tile width */
    float delta[CPU_SSD_CHUNK];
    double s[CPU_SSD_CHUNK], es[CPU_SSD_CHUNK], is[CPU_SSD_CHUNK];

    memset(Bm, 0, sizeof(float) * (size_t)CS * Np); /* padded columns stay 0 */
    memset(Sp, 0, sizeof(float) * (size_t)P * Np);
    for (int t0 = 0; t0 < T; t0 += CS) {
        const int n = T - t0 < CS ? T - t0 : CS, np = cpu_tile_pad(n);
        if (t0 + n < T) {
            int nn = T - t0 - n < CS ? T - t0 - n : CS;
            cpu_tile_prefetch_rows(x + (size_t)(t0 + n) * ld_x, ld_x, nn, nh * P);
            cpu_tile_prefetch_rows(B + (size_t)(t0 + n) * ld_bc, ld_bc, nn, N);
            cpu_tile_prefetch_rows(C + (size_t)(t0 + n) * ld_bc, ld_bc, nn, N);
            cpu_tile_prefetch_rows(dt + (size_t)(t0 + n) * ld_dt, ld_dt, nn, nh);
        }
        /* the group's B rows, Cᵀ (columns past n zero: the products below read them) and
         * B Cᵀ, upper triangle by blocks of 16 rows */
        for (int j = 0; j < n; j++)
            memcpy(Bm + (size_t)j * Np, B + (size_t)(t0 + j) * ld_bc, sizeof(float) * N);
        for (int k = 0; k < N; k++) {
            float *row = Ct + (size_t)k * CS;
            for (int i = 0; i < n; i++) row[i] = C[(size_t)(t0 + i) * ld_bc + k];
            for (int i = n; i < np; i++) row[i] = 0.0f;
        }
        for (int r0 = 0; r0 < n; r0 += CPU_TILE_VW) {
            int r1 = r0 + CPU_TILE_VW < n ? r0 + CPU_TILE_VW : n;
            gemm(BC + (size_t)r0 * CS + r0, CS, Bm + (size_t)r0 * Np, Np, Ct + r0, CS, r1 - r0,
                 np - r0, N, 0.0f);
        }
        for (int h = 0; h < nh; h++) {
            const float *xh = x + (size_t)t0 * ld_x + (size_t)h * P;
            float *Sh = state + (size_t)h * P * N;
            int factor = cpu_ssd_chunk_decay(delta, s, es, is, dt + (size_t)t0 * ld_dt + h, ld_dt,
                                             A[h], bias[h], dt_min, n);
            /* X̃ᵀ, and Mt[j, i] = (B_j · C_i) e^{s_i − s_j} for j <= i < n, else 0 */
            for (int p = 0; p < P; p++) {
                float *row = Xt + (size_t)p * CS;
                for (int j = 0; j < n; j++) row[j] = delta[j] * xh[(size_t)j * ld_x + p];
            }
            for (int j = 0; j < n; j++) {
                float *mr = Mt + (size_t)j * CS;
                const float *br = BC + (size_t)j * CS;
                for (int i = 0; i < j; i++) mr[i] = 0.0f;
                for (int i = j; i < n; i++)
                    mr[i] = br[i] * (float)(factor ? es[i] * is[j] : exp(s[i] - s[j]));
                for (int i = n; i < np; i++) mr[i] = 0.0f;
            }
            /* the state, padded to a tile width where N is none */
            float *S = Sh;
            int lds = N;
            if (Np != N) {
                for (int p = 0; p < P; p++)
                    memcpy(Sp + (size_t)p * Np, Sh + (size_t)p * N, sizeof(float) * N);
                S = Sp;
                lds = Np;
            }
            /* Yᵀ = S0 Cᵀ diag(e^s) + X̃ᵀ Mt; Mt's column block [c0, c0 + 16) has no row past it */
            gemm(Yt, CS, S, lds, Ct, CS, P, np, N, 0.0f);
            for (int p = 0; p < P; p++) {
                float *row = Yt + (size_t)p * CS;
                for (int i = 0; i < n; i++) row[i] *= (float)es[i];
            }
            for (int c0 = 0; c0 < n; c0 += CPU_TILE_VW)
                gemm(Yt + c0, CS, Xt, CS, Mt + c0, CS, P, CPU_TILE_VW,
                     c0 + CPU_TILE_VW < n ? c0 + CPU_TILE_VW : n, 1.0f);
            for (int i = 0; i < n; i++) {
                const float *xr = xh + (size_t)i * ld_x;
                float *yr = y + (size_t)(t0 + i) * ld_y + (size_t)h * P;
                for (int p = 0; p < P; p++) yr[p] = Yt[(size_t)p * CS + i] + d[h] * xr[p];
            }
            /* S = e^{s_last} S0 + X̃ᵀ diag(e^{s_last − s}) B */
            float w[CPU_SSD_CHUNK];
            for (int j = 0; j < n; j++)
                w[j] = (float)(factor ? es[n - 1] * is[j] : exp(s[n - 1] - s[j]));
            for (int p = 0; p < P; p++) {
                float *row = Xt + (size_t)p * CS;
                for (int j = 0; j < n; j++) row[j] *= w[j];
            }
            gemm(S, lds, Xt, CS, Bm, Np, P, Np, n, (float)es[n - 1]);
            if (S != Sh)
                for (int p = 0; p < P; p++)
                    memcpy(Sh + (size_t)p * N, Sp + (size_t)p * Np, sizeof(float) * N);
        }
    }
}
