/* cuda_ops_ref.c - plain references of the Gemma 4 / Nemotron-H ops of kernels/backend.h,
 * for comparing the CUDA ops while the CPU backend does not have them (the test prefers
 * the CPU backend's op whenever its vtable entry is set). Written to read like backend.h. */
#include <math.h>

#include "engine/base/dtype.h"
#include "tests/device/cuda_ops_test.h"

float ref_weight_at(const bk_weight *w, size_t i) {
    if (w->dt == DTYPE_BF16) return dtype_bf16_to_f32(((const uint16_t *)w->data)[i]);
    if (w->dt == DTYPE_F16) return dtype_f16_to_f32(((const uint16_t *)w->data)[i]);
    return ((const float *)w->data)[i];
}

static float ref_silu(float x) { return x / (1.0f + expf(-x)); }
static float ref_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void ref_gelu_mul(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = gate[i];
        out[i] =
            0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * up[i];
    }
}

void ref_relu2(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] * x[i] : 0.0f;
}

void ref_scale(float *x, float alpha, const bk_weight *s, size_t n) {
    float f = alpha * (s ? ref_weight_at(s, 0) : 1.0f);
    for (size_t i = 0; i < n; i++) x[i] *= f;
}

void ref_softcap(float *x, float cap, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void ref_grouped(float *out, const float *x, const float *z, const bk_weight *w, int m, int width,
                 int group, float eps) {
    for (int i = 0; i < m; i++)
        for (int g0 = 0; g0 < width; g0 += group) {
            size_t b = (size_t)i * width + g0;
            double ss = 0;
            for (int j = 0; j < group; j++) {
                float v = x[b + j] * ref_silu(z[b + j]);
                ss += (double)v * v;
            }
            float r = 1.0f / sqrtf((float)(ss / group) + eps);
            for (int j = 0; j < group; j++)
                out[b + j] = x[b + j] * ref_silu(z[b + j]) * r * ref_weight_at(w, (size_t)g0 + j);
        }
}

void ref_ssd(float *y, const float *x, int ld_x, const float *B, const float *C, int ld_bc,
             const float *dt, int ld_dt, const bk_weight *A_log, const bk_weight *dt_bias,
             const bk_weight *D, float *state, const bk_batch *bt, int H, int P, int N, int G,
             float dt_min) {
    for (int s = 0; s < bt->n_seqs; s++)
        for (int t = bt->start[s]; t < bt->start[s] + bt->len[s]; t++)
            for (int h = 0; h < H; h++) {
                int g = h / (H / G);
                float dl = ref_softplus(dt[(size_t)t * ld_dt + h] + ref_weight_at(dt_bias, h));
                if (dt_min > 0 && dl < dt_min) dl = dt_min;
                float a = expf(dl * -expf(ref_weight_at(A_log, h)));
                float *S = state + ((size_t)bt->slot[s] * H + h) * P * N;
                const float *xr = x + (size_t)t * ld_x + (size_t)h * P;
                const float *Br = B + (size_t)t * ld_bc + (size_t)g * N;
                const float *Cr = C + (size_t)t * ld_bc + (size_t)g * N;
                for (int p = 0; p < P; p++) {
                    float acc = 0;
                    for (int n = 0; n < N; n++) {
                        S[p * N + n] = a * S[p * N + n] + dl * xr[p] * Br[n];
                        acc += S[p * N + n] * Cr[n];
                    }
                    y[((size_t)t * H + h) * P + p] = acc + ref_weight_at(D, h) * xr[p];
                }
            }
}

/* out[m, n] = x · Wᵀ for a BF16 W in double, x rounded as backend.h says (nearest even,
 * subnormals to a signed zero): the reference where k is past the CPU backend's bf16
 * scratch (k > 2,097,152; no model comes near), where that backend leaves x unrounded. */
void ref_matmul_bf16(float *out, const float *x, const bk_weight *w, int m) {
    int n = (int)w->shape[0], k = (int)w->shape[1];
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int l = 0; l < k; l++) {
                float v = x[(size_t)r * k + l];
                float xr = fpclassify(v) == FP_SUBNORMAL || v == 0.0f
                               ? copysignf(0.0f, v)
                               : dtype_bf16_to_f32(dtype_f32_to_bf16(v));
                acc += (double)xr * ref_weight_at(w, (size_t)j * k + l);
            }
            out[(size_t)r * n + j] = (float)acc;
        }
}
