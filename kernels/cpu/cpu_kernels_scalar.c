/* cpu_kernels_scalar.c - the portable kernel table: plain C, any CPU.
 *
 * These are the fallbacks the ISA tables are tested against, and what a machine without
 * AVX2 runs. */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"

static void cpu_scalar_matmul(float *restrict out, int ldo, const float *restrict x,
                              const void *restrict w, dtype dt, int k, int m, int n0, int n1,
                              int l1d) {
    (void)l1d;
    bk_weight wt = {.data = w, .dt = dt};
    for (int j = n0; j < n1; j++)
        for (int i = 0; i < m; i++) {
            const float *xr = x + (size_t)i * k;
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += xr[l] * cpu_weight_at(&wt, (size_t)j * k + l);
            out[(size_t)i * ldo + j] = s;
        }
}

/* The plain sum of exact bf16 products in k order (batch-invariant by construction). */
static void cpu_scalar_matmul_bf16(float *restrict out, int ldo, const uint16_t *restrict xb,
                                   int ldx, const uint16_t *restrict w, int k, int m, int n0,
                                   int n1, int l1d) {
    (void)l1d;
    for (int j = n0; j < n1; j++)
        for (int i = 0; i < m; i++) {
            const uint16_t *xr = xb + (size_t)i * ldx, *wr = w + (size_t)j * k;
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += dtype_bf16_to_f32(xr[l]) * dtype_bf16_to_f32(wr[l]);
            out[(size_t)i * ldo + j] = s;
        }
}

static void cpu_scalar_pack_bf16(uint16_t *restrict out, const float *restrict x, int n) {
    for (int i = 0; i < n; i++) out[i] = cpu_pack_bf16_one(x[i]);
}

static float cpu_scalar_sum(const float *restrict x, size_t n) {
    /* Four partial sums: a single chain is latency-bound, far below memory speed. */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i];
        s1 += x[i + 1];
        s2 += x[i + 2];
        s3 += x[i + 3];
    }
    for (; i < n; i++) s0 += x[i];
    return (s0 + s1) + (s2 + s3);
}

static void cpu_scalar_delta_step(float *restrict s, float *restrict out, const float *restrict q,
                                  const float *restrict k, const float *restrict v, float decay,
                                  float beta, int dk, int dv) {
    for (int j = 0; j < dv; j++) {
        /* Columns of S are independent: decay, read, update and output column j. */
        float kv = 0.0f;
        for (int i = 0; i < dk; i++) {
            s[(size_t)i * dv + j] *= decay;
            kv += s[(size_t)i * dv + j] * k[i];
        }
        float d = beta * (v[j] - kv), o = 0.0f;
        for (int i = 0; i < dk; i++) {
            s[(size_t)i * dv + j] += k[i] * d;
            o += s[(size_t)i * dv + j] * q[i];
        }
        out[j] = o;
    }
}

static float cpu_scalar_dot(const float *restrict a, const float *restrict b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void cpu_scalar_axpby(float *restrict y, const float *restrict x, float a, float c, int n) {
    for (int i = 0; i < n; i++) y[i] = y[i] * c + a * x[i];
}

static void cpu_scalar_silu_mul(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float s = g[i] / (1.0f + expf(-g[i]));
        out[i] = u ? s * u[i] : s;
    }
}

static void cpu_scalar_sigmoid_mul(float *x, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] *= 1.0f / (1.0f + expf(-g[i]));
}

static float cpu_scalar_exp_sum(float *y, const float *x, float shift, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += y[i] = expf(x[i] - shift);
    return s;
}

const cpu_kernels cpu_kernels_scalar = {
    .name = "scalar",
    .matmul = cpu_scalar_matmul,
    .matmul_bf16 = cpu_scalar_matmul_bf16,
    .pack_bf16 = cpu_scalar_pack_bf16,
    .sum = cpu_scalar_sum,
    .delta_step = cpu_scalar_delta_step,
    .dot = cpu_scalar_dot,
    .axpby = cpu_scalar_axpby,
    .silu_mul = cpu_scalar_silu_mul,
    .sigmoid_mul = cpu_scalar_sigmoid_mul,
    .exp_sum = cpu_scalar_exp_sum,
    .quantize_x = cpu_quantize_x_ref,
    .qmatmul = cpu_qmatmul_ref,
};
