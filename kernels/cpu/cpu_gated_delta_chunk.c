/* cpu_gated_delta_chunk.c - the chunked (WY) form of the gated delta rule for one
 * (sequence, value head) on the CPU: Qwen3.5 spec §7.1, perf-anchors §6.2.
 *
 * Per chunk of n <= CPU_GATED_DELTA_CHUNK tokens entering with state S0 [dk, dv], with
 * Γ_r = Σ_{i<=r} g_i and D[r, s] = exp(Γ_r − Γ_s) (s <= r):
 *   A  = strict_lower(diag(β) · (K Kᵀ ∘ D)),        T = (I + A)⁻¹ (forward substitution)
 *   U  = T · diag(β) · V,   W = T · diag(β e^Γ) · K,  Ũ = U − W · S0  (the tokens' deltas)
 *   O  = diag(e^Γ) · Q · S0 + lower_incl(Q Kᵀ ∘ D) · Ũ
 *   S  = e^{Γ_last} · S0 + (diag(e^{Γ_last − Γ}) · K)ᵀ · Ũ
 * which is the recurrence of backend.h in exact arithmetic: unrolled, the state a token
 * r sees after its decay is e^{Γ_r} S0 + Σ_{s<r} D[r, s] k_s d_sᵀ, so its delta d_r =
 * β_r (v_r − that ᵀ k_r) gives (I + A) Ũ = diag(β) V − diag(β e^Γ) K S0, and o_r, S follow.
 * Everything but the small triangular solve is a tile product (cpu_tile.h), at FMA speed,
 * where the recurrence makes two passes over a 64 KiB state per token.
 *
 * The tiles live in the calling worker's scratch (cpu_impl.tile): columns are padded with
 * zeros to CPU_TILE_VW, which leaves every product unchanged. */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_tile.h"

/* Floats of scratch one head needs (see the layout in cpu_gated_delta_chunk_head). */
static size_t cpu_gated_delta_chunk_floats(int dk, int dv) {
    size_t C = CPU_GATED_DELTA_CHUNK, dkp = (size_t)cpu_tile_pad(dk),
           dvp = (size_t)cpu_tile_pad(dv);
    return dkp * dvp + dkp * C + 2 * C * dkp + C * (dvp + dkp) + C * dvp + 2 * C * C;
}

int cpu_gated_delta_chunk_fits(int dk, int dv) {
    return cpu_gated_delta_chunk_floats(dk, dv) <= CPU_TILE_SCRATCH_FLOATS;
}

/* The Gram products fill whole 16-column blocks of a [C, C] tile. */
_Static_assert(CPU_GATED_DELTA_CHUNK % CPU_TILE_VW == 0, "chunk is a multiple of the tile width");

/* Γ_r (double, so Γ_r − Γ_s keeps the digits a chunk of steps of g ~ −1 would lose in
 * f32) and the decay factors: eg[r] = e^{Γ_r}, and D[r, s] = e^{Γ_r − Γ_s} for s <= r,
 * written as (double) e^{Γ_r} · e^{−Γ_s} when that cannot overflow, else one exp each. g
 * is floored at −1000: e^g is 0 in f32 below −104 either way, and a finite Γ keeps
 * Γ_r − Γ_s from becoming −inf − (−inf). */
static void cpu_gated_delta_chunk_decay(float *restrict D, int ldd, double *restrict eg,
                                        const float *restrict g, int ld_g, int n) {
    double G[CPU_GATED_DELTA_CHUNK], ig[CPU_GATED_DELTA_CHUNK], acc = 0.0;
    for (int r = 0; r < n; r++) {
        double gr = g[(size_t)r * ld_g];
        G[r] = acc += gr > -1000.0 ? gr : -1000.0;
        eg[r] = exp(G[r]);
    }
    int factor = G[n - 1] > -600.0; /* e^{600} < DBL_MAX, and e^{-600} is no subnormal */
    for (int s = 0; s < n && factor; s++) ig[s] = exp(-G[s]);
    for (int r = 0; r < n; r++)
        for (int s = 0; s <= r; s++)
            D[(size_t)r * ldd + s] = (float)(factor ? eg[r] * ig[s] : exp(G[r] - G[s]));
}

void cpu_gated_delta_chunk_head(float *restrict state, float *restrict out, int ld_out,
                                const float *restrict q, const float *restrict k, int ld_qk,
                                const float *restrict v, int ld_v, const float *restrict g,
                                const float *restrict beta, int ld_gb, int T, int dk, int dv,
                                float *restrict ws, cpu_tile_gemm_fn gemm) {
    assert(cpu_gated_delta_chunk_fits(dk, dv));
    const int C = CPU_GATED_DELTA_CHUNK, dkp = cpu_tile_pad(dk), dvp = cpu_tile_pad(dv);
    const int ldx = dvp + dkp;
    /* scratch layout, every tile row-major */
    float *S = ws;                     /* [dkp, dvp] the state, zero-padded */
    float *Kt = S + (size_t)dkp * dvp; /* [dkp, C]   Kᵀ, then (diag(e^{Γ_last − Γ}) K)ᵀ */
    float *K = Kt + (size_t)dkp * C;   /* [C, dkp]   the chunk's k rows */
    float *Q = K + (size_t)C * dkp;    /* [C, dkp]   q rows, then diag(e^Γ) Q */
    float *X = Q + (size_t)C * dkp; /* [C, dvp | dkp]  [β V | −β e^Γ K] → [U | −W] → [Ũ | −W] */
    float *O = X + (size_t)C * ldx;  /* [C, dvp]   outputs */
    float *Am = O + (size_t)C * dvp; /* [C, C]     K Kᵀ, then −A (strict lower) */
    float *P = Am + (size_t)C * C;   /* [C, C]     Q Kᵀ, then lower_incl(Q Kᵀ ∘ D) */
    double eg[CPU_GATED_DELTA_CHUNK];
    float D[CPU_GATED_DELTA_CHUNK * CPU_GATED_DELTA_CHUNK];

    memset(S, 0, sizeof(float) * (size_t)dkp * dvp);
    for (int i = 0; i < dk; i++)
        memcpy(S + (size_t)i * dvp, state + (size_t)i * dv, sizeof(float) * dv);
    memset(K, 0, sizeof(float) * (size_t)2 * C * dkp); /* K and Q: padded columns stay 0 */
    memset(X, 0, sizeof(float) * (size_t)C * ldx);

    for (int t0 = 0; t0 < T; t0 += C) {
        const int n = T - t0 < C ? T - t0 : C, np = cpu_tile_pad(n);
        if (t0 + n < T) {
            int nn = T - t0 - n < C ? T - t0 - n : C;
            cpu_tile_prefetch_rows(q + (size_t)(t0 + n) * ld_qk, ld_qk, nn, dk);
            cpu_tile_prefetch_rows(k + (size_t)(t0 + n) * ld_qk, ld_qk, nn, dk);
            cpu_tile_prefetch_rows(v + (size_t)(t0 + n) * ld_v, ld_v, nn, dv);
        }
        for (int r = 0; r < n; r++) {
            memcpy(K + (size_t)r * dkp, k + (size_t)(t0 + r) * ld_qk, sizeof(float) * dk);
            memcpy(Q + (size_t)r * dkp, q + (size_t)(t0 + r) * ld_qk, sizeof(float) * dk);
        }
        for (int i = 0; i < dk; i++) {
            float *row = Kt + (size_t)i * C;
            for (int r = 0; r < n; r++) row[r] = K[(size_t)r * dkp + i];
            for (int r = n; r < np; r++) row[r] = 0.0f; /* read by the Gram products below */
        }
        /* K Kᵀ and Q Kᵀ, lower triangle by blocks of 16 rows */
        for (int r0 = 0; r0 < n; r0 += CPU_TILE_VW) {
            int r1 = r0 + CPU_TILE_VW < n ? r0 + CPU_TILE_VW : n;
            gemm(Am + (size_t)r0 * C, C, K + (size_t)r0 * dkp, dkp, Kt, C, r1 - r0,
                 cpu_tile_pad(r1), dk, 0.0f);
            gemm(P + (size_t)r0 * C, C, Q + (size_t)r0 * dkp, dkp, Kt, C, r1 - r0, cpu_tile_pad(r1),
                 dk, 0.0f);
        }
        const float *gc = g + (size_t)t0 * ld_gb, *bc = beta + (size_t)t0 * ld_gb;
        cpu_gated_delta_chunk_decay(D, C, eg, gc, ld_gb, n);
        for (int r = 0; r < n; r++) {
            float br = bc[(size_t)r * ld_gb], *ar = Am + (size_t)r * C, *pr = P + (size_t)r * C;
            const float *dr = D + (size_t)r * C;
            for (int s = 0; s < r; s++) ar[s] = -br * ar[s] * dr[s];
            for (int s = 0; s <= r; s++) pr[s] *= dr[s];
            /* P·Ũ below sums a row block's columns up to its end: zero past the diagonal */
            for (int s = r + 1; s < np; s++) pr[s] = 0.0f;
            /* right-hand sides: β v_r and −β e^{Γ_r} k_r */
            float *xr = X + (size_t)r * ldx;
            const float *vr = v + (size_t)(t0 + r) * ld_v, *kr = K + (size_t)r * dkp;
            float bw = -br * (float)eg[r];
            for (int j = 0; j < dv; j++) xr[j] = br * vr[j];
            for (int i = 0; i < dk; i++) xr[dvp + i] = bw * kr[i];
        }
        /* (I + A) [U | −W] = RHS by blocks of 16 rows: the rows above a block come in as one
         * tile product, then the block itself row by row (each row a 1-row product). */
        for (int r0 = 0; r0 < n; r0 += CPU_TILE_VW) {
            int r1 = r0 + CPU_TILE_VW < n ? r0 + CPU_TILE_VW : n;
            if (r0 > 0)
                gemm(X + (size_t)r0 * ldx, ldx, Am + (size_t)r0 * C, C, X, ldx, r1 - r0, ldx, r0,
                     1.0f);
            for (int r = r0 + 1; r < r1; r++)
                gemm(X + (size_t)r * ldx, ldx, Am + (size_t)r * C + r0, C, X + (size_t)r0 * ldx,
                     ldx, 1, ldx, r - r0, 1.0f);
        }
        /* Ũ = U − W S0 */
        gemm(X, ldx, X + dvp, ldx, S, dvp, n, dvp, dk, 1.0f);
        /* O = diag(e^Γ) Q S0 + P Ũ */
        for (int r = 0; r < n; r++) {
            float e = (float)eg[r], *qr = Q + (size_t)r * dkp;
            for (int i = 0; i < dk; i++) qr[i] *= e;
        }
        gemm(O, dvp, Q, dkp, S, dvp, n, dvp, dk, 0.0f);
        for (int r0 = 0; r0 < n; r0 += CPU_TILE_VW) {
            int r1 = r0 + CPU_TILE_VW < n ? r0 + CPU_TILE_VW : n;
            gemm(O + (size_t)r0 * dvp, dvp, P + (size_t)r0 * C, C, X, ldx, r1 - r0, dvp, r1, 1.0f);
        }
        for (int r = 0; r < n; r++)
            memcpy(out + (size_t)(t0 + r) * ld_out, O + (size_t)r * dvp, sizeof(float) * dv);
        /* S = e^{Γ_last} S0 + (diag(e^{Γ_last − Γ}) K)ᵀ Ũ */
        const float *dl = D + (size_t)(n - 1) * C;
        for (int i = 0; i < dk; i++) {
            float *row = Kt + (size_t)i * C;
            for (int r = 0; r < n; r++) row[r] *= dl[r];
        }
        gemm(S, dvp, Kt, C, X, ldx, dk, dvp, n, (float)eg[n - 1]);
    }
    for (int i = 0; i < dk; i++)
        memcpy(state + (size_t)i * dv, S + (size_t)i * dvp, sizeof(float) * dv);
}
