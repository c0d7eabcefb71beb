/* cpu_qmatmul.c - out[m, n] = x[m, k] · Wᵀ for a quantized W (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K): the
 * scalar reference kernels, which define the summation order (cpu_qmatmul.h), and the
 * threaded driver.
 *
 * W stays as stored (mmapped GGUF data, or converted at load) and is streamed in place.
 * x is quantized once per call into the backend's scratch and the dot products run on
 * int8, as llama.cpp does: decode is bound by the weight stream, so reading 1.06 (Q8_0) or
 * 0.56 (Q4_K) bytes per weight instead of bf16's 2 is the point of these formats, and
 * integer products (32 per vpmaddubsw) are what keep a core's arithmetic ahead of that
 * stream. A batch of 8 rows costs about 8 times the arithmetic, so on AVX2 it is bound by
 * it rather than by the stream (llama.cpp's kernels are too).
 * The work split is cpu_matmul.c's: tasks own ranges of W rows, and split m as well when W
 * has few rows. Within a task, prefill walks chunks of W rows that fit L2, each against
 * blocks of 8 x rows (the kernels' widest tile). */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

/* ---- the reference: x quantization and the dot products, in the order of cpu_qmatmul.h */

/* Round to nearest even for |f| < 2^22 (cvtps2dq's rounding under the default MXCSR). */
static int cpu_qmatmul_rne(float f) {
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

void cpu_quantize_x_ref(int8_t *restrict q, float *restrict d, const float *restrict x, int k,
                        int blk) {
    for (int b = 0; b < k / blk; b++) {
        const float *xb = x + (size_t)b * blk;
        float amax = 0.0f;
        for (int e = 0; e < blk; e++) amax = fabsf(xb[e]) > amax ? fabsf(xb[e]) : amax;
        if (!(amax >= 1e-30f)) {
            d[b] = 0.0f;
            memset(q + (size_t)b * blk, 0, (size_t)blk);
            continue;
        }
        float db = amax / 127.0f, id = 1.0f / db;
        d[b] = db;
        for (int e = 0; e < blk; e++) q[(size_t)b * blk + e] = (int8_t)cpu_qmatmul_rne(xb[e] * id);
    }
}

/* Q8_0, Q4_0 and Q5_0: the weights of block b as int8 (Q4_0's nibbles minus 8, Q5_0's five
 * bits minus 16), and its scale. */
static void cpu_q32_weights(int8_t out[32], const void *w, dtype dt, int b) {
    if (dt == DTYPE_Q8_0) {
        memcpy(out, ((const quant_block_q8_0 *)w)[b].qs, 32);
        return;
    }
    if (dt == DTYPE_Q5_0) {
        for (int e = 0; e < 32; e++)
            out[e] = (int8_t)(quant_q5_0_q((const quant_block_q5_0 *)w + b, e) - 16);
        return;
    }
    const quant_block_q4_0 *q = (const quant_block_q4_0 *)w + b;
    for (int e = 0; e < 16; e++) {
        out[e] = (int8_t)((q->qs[e] & 15) - 8);
        out[e + 16] = (int8_t)((q->qs[e] >> 4) - 8);
    }
}

static uint16_t cpu_q32_scale(const void *w, dtype dt, int b) {
    switch (dt) {
    case DTYPE_Q8_0: return ((const quant_block_q8_0 *)w)[b].d;
    case DTYPE_Q5_0: return ((const quant_block_q5_0 *)w)[b].d;
    default: return ((const quant_block_q4_0 *)w)[b].d;
    }
}

static float cpu_q32_dot(const void *w, dtype dt, const int8_t *xq, const float *xd, int nb) {
    float acc[2][8] = {{0}}, v[8];
    for (int b = 0; b < nb; b++) {
        int8_t wq[32];
        cpu_q32_weights(wq, w, dt, b);
        float s = dtype_f16_to_f32(cpu_q32_scale(w, dt, b)) * xd[b];
        for (int t = 0; t < 8; t++) {
            int p = 0;
            for (int e = 4 * t; e < 4 * t + 4; e++) p += wq[e] * xq[32 * b + e];
            acc[b & 1][t] = fmaf(s, (float)p, acc[b & 1][t]);
        }
    }
    for (int t = 0; t < 8; t++) v[t] = acc[0][t] + acc[1][t];
    return cpu_qmatmul_hsum8(v);
}

static float cpu_q4_k_dot(const quant_block_q4_k *w, const int8_t *xq, const float *xd,
                          const int16_t *xs, int nb) {
    float acc[8] = {0};
    for (int b = 0; b < nb; b++, xq += 256, xs += 16) {
        uint8_t sc[8], m[8];
        quant_q4_k_scales(w[b].scales, sc, m);
        float a = xd[b] * dtype_f16_to_f32(w[b].d), c = xd[b] * dtype_f16_to_f32(w[b].dmin);
        for (int t = 0; t < 8; t++) {
            int32_t it = 0, mt = m[t] * (xs[2 * t] + xs[2 * t + 1]);
            for (int j = 0; j < 8; j++) {
                const uint8_t *qs = w[b].qs + 32 * (j >> 1);
                int dot = 0;
                for (int e = 4 * t; e < 4 * t + 4; e++)
                    dot += ((qs[e] >> (4 * (j & 1))) & 15) * xq[32 * j + e];
                it += sc[j] * dot;
            }
            acc[t] = fmaf(a, (float)it, acc[t]);
            acc[t] = fmaf(-c, (float)mt, acc[t]);
        }
    }
    return cpu_qmatmul_hsum8(acc);
}

static float cpu_q6_k_dot(const quant_block_q6_k *w, const int8_t *xq, const float *xd,
                          const int16_t *xs, int nb) {
    float acc[8] = {0};
    for (int b = 0; b < nb; b++, xq += 256, xs += 16) {
        float a = xd[b] * dtype_f16_to_f32(w[b].d);
        for (int t = 0; t < 8; t++) {
            int32_t it = 0;
            for (int g = 0; g < 8; g++) {
                int e0 = 32 * g + 4 * t, dot = 0;
                for (int e = e0; e < e0 + 4; e++) dot += quant_q6_k_q(&w[b], e) * xq[e];
                it += w[b].scales[e0 / 16] * dot;
            }
            it -= 32 * (w[b].scales[2 * t] * xs[2 * t] + w[b].scales[2 * t + 1] * xs[2 * t + 1]);
            acc[t] = fmaf(a, (float)it, acc[t]);
        }
    }
    return cpu_qmatmul_hsum8(acc);
}

void cpu_qmatmul_ref(float *restrict out, int ldo, const cpu_qrows *x, const void *restrict w,
                     dtype dt, int k, int m, int n0, int n1) {
    size_t rb = dtype_row_bytes(dt, k);
    for (int j = n0; j < n1; j++) {
        const void *wj = (const char *)w + (size_t)j * rb;
        for (int i = 0; i < m; i++) {
            const int8_t *q = cpu_qrows_q(x, i);
            const float *d = cpu_qrows_d(x, i);
            float r = 0.0f;
            switch (dt) {
            case DTYPE_Q8_0:
            case DTYPE_Q4_0:
            case DTYPE_Q5_0: r = cpu_q32_dot(wj, dt, q, d, k / 32); break;
            case DTYPE_Q4_K: r = cpu_q4_k_dot(wj, q, d, cpu_qrows_s(x, i), k / 256); break;
            case DTYPE_Q6_K: r = cpu_q6_k_dot(wj, q, d, cpu_qrows_s(x, i), k / 256); break;
            default: break;
            }
            out[(size_t)i * ldo + j] = r;
        }
    }
}

/* ---- the driver ---- */

static size_t cpu_qmatmul_align(size_t n) { return (n + 63) & ~(size_t)63; }

/* Row layout of quantized x for width k and x blocks of xblk (cpu_qrows), with the lane
 * sums when lanes. */
static cpu_qrows cpu_qmatmul_layout(uint8_t *base, int k, int xblk, int lanes) {
    cpu_qrows r = {.base = base};
    r.doff = cpu_qmatmul_align((size_t)k);
    r.soff = r.doff + cpu_qmatmul_align(sizeof(float) * (size_t)(k / xblk));
    r.stride = r.soff + (xblk == 256 ? cpu_qmatmul_align(sizeof(int16_t) * (size_t)(k / 16)) : 0);
    if (lanes) {
        r.coff = r.stride;
        r.stride += cpu_qmatmul_align(sizeof(int32_t) * (size_t)(k / 4));
    }
    return r;
}

int cpu_qmatmul_max_k(void) {
    /* a row takes at most 1 + 4/32 + 2/16 + 4/4 bytes per element plus alignment: 2.25 is
     * safe (1.8 M elements, far past any model's width) */
    return (int)(CPU_XB_BYTES / 9 * 4) & ~255;
}

void cpu_qrows_lane_sums(int32_t *c, const int8_t *q, int k, int off) {
    for (int t = 0; t < k / 4; t++)
        c[t] = -off * (q[4 * t] + q[4 * t + 1] + q[4 * t + 2] + q[4 * t + 3]);
}

typedef struct {
    float *out;
    const float *x; /* f32 rows, for the quantize pass */
    uint8_t *qx;    /* writable view of rows.base */
    cpu_qrows rows;
    const void *w;
    dtype dt;
    int m, n, k, xblk;
    int q_split;                   /* tasks of the quantize pass */
    int n_split, m_split, m_block; /* matmul tasks = n_split · m_split */
    int n_chunk;                   /* W rows per L2 chunk at prefill (m >= 8) */
    const cpu_kernels *kt;
} cpu_qmatmul_job;

/* Quantizes rows [lo, hi) of x, with the 16-value sums the K kernels take and the lane sums
 * where the layout has them. */
static void cpu_qmatmul_quantize_rows(const cpu_qmatmul_job *j, int lo, int hi) {
    for (int i = lo; i < hi; i++) {
        uint8_t *row = j->qx + (size_t)i * j->rows.stride;
        int8_t *q = (int8_t *)row;
        j->kt->quantize_x(q, (float *)(row + j->rows.doff), j->x + (size_t)i * j->k, j->k, j->xblk);
        if (j->rows.coff)
            cpu_qrows_lane_sums((int32_t *)(row + j->rows.coff), q, j->k, cpu_q32_offset(j->dt));
        if (j->xblk != 256) continue;
        int16_t *s = (int16_t *)(row + j->rows.soff);
        for (int g = 0; g < j->k / 16; g++) {
            int t = 0;
            for (int e = 0; e < 16; e++) t += q[16 * g + e];
            s[g] = (int16_t)t;
        }
        if (j->dt == DTYPE_Q4_K && j->kt->q4k_swap_x) cpu_qrows_q4k_swap(q, j->k);
    }
}

void cpu_qrows_q4k_swap(int8_t *q, int k) {
    int8_t t[32];
    for (int g = 0; g + 128 <= k; g += 128) {
        memcpy(t, q + g + 32, 32);
        memcpy(q + g + 32, q + g + 64, 32);
        memcpy(q + g + 64, t, 32);
    }
}

static void cpu_qmatmul_quantize_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_qmatmul_job *j = ctx;
    int lo, hi;
    cpu_split_range(j->m, j->q_split, task, 1, &lo, &hi);
    cpu_qmatmul_quantize_rows(j, lo, hi);
}

static void cpu_qmatmul_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_qmatmul_job *j = ctx;
    int n0, n1, m0, m1;
    cpu_split_range(j->n, j->n_split, task % j->n_split, 16, &n0, &n1);
    cpu_split_range(j->m, j->m_split, task / j->n_split, 4, &m0, &m1);
    if (n0 >= n1) return;
    if (j->m < 8) { /* decode: one pass over W, streamed */
        cpu_qrows r = j->rows;
        r.base += (size_t)m0 * r.stride;
        j->kt->qmatmul(j->out + (size_t)m0 * j->n, j->n, &r, j->w, j->dt, j->k, m1 - m0, n0, n1);
        return;
    }
    /* prefill: a chunk of W rows stays in L2 while blocks of 8 x rows sweep it, so each W
     * row is loaded from L2 once per 8 x rows, which stay in L1 (or L2 at large k) */
    for (int c0 = n0; c0 < n1; c0 += j->n_chunk) {
        int c1 = n1 - c0 < j->n_chunk ? n1 : c0 + j->n_chunk;
        for (int i = m0; i < m1; i += j->m_block) {
            int mb = m1 - i < j->m_block ? m1 - i : j->m_block;
            cpu_qrows r = j->rows;
            r.base += (size_t)i * r.stride;
            j->kt->qmatmul(j->out + (size_t)i * j->n, j->n, &r, j->w, j->dt, j->k, mb, c0, c1);
        }
    }
}

/* Quantizes x rows [0, j->m) into the scratch and runs the matmul over the pool. */
static void cpu_qmatmul_run(backend *b, cpu_qmatmul_job *j) {
    cpu_impl *c = cpu_impl_of(b);
    int m = j->m;
    j->q_split = cpu_backend_task_count(b, m, (int64_t)j->k * 8);
    cpu_pool_run(c->pool, cpu_qmatmul_quantize_task, j, j->q_split);
    /* prefill blocks: 8 x rows (the widest tile; in L1 up to k ~ 3000, in L2 past it) and
     * W rows of ~192 KiB for L2 */
    j->m_block = 8;
    int nc = (int)((192 * 1024) / dtype_row_bytes(j->dt, j->k));
    j->n_chunk = nc < 4 ? 4 : nc;
    cpu_matmul_tasks(b, j->n, m, j->k, &j->n_split, &j->m_split);
    cpu_pool_run(c->pool, cpu_qmatmul_task, j, j->n_split * j->m_split);
}

void cpu_qmatmul(backend *b, float *out, const float *x, const bk_weight *w, int m) {
    cpu_impl *c = cpu_impl_of(b);
    int n = (int)w->shape[0], k = (int)w->shape[1], wblk = dtype_block_elems(w->dt);
    if (m <= 0 || n <= 0) return;
    cpu_qmatmul_job j = {.x = x,
                         .qx = (uint8_t *)c->xb,
                         .w = w->data,
                         .dt = w->dt,
                         .n = n,
                         .k = k,
                         .xblk = wblk == 256 ? 256 : 32,
                         .kt = c->k};
    int lanes = c->k->lane_sums && m < 8 && (w->dt == DTYPE_Q4_0 || w->dt == DTYPE_Q5_0);
    j.rows = cpu_qmatmul_layout(j.qx, k, j.xblk, lanes);
    int rows = (int)(CPU_XB_BYTES / j.rows.stride);
    /* weight_prepare refuses a k that is not whole blocks or past cpu_qmatmul_max_k */
    assert(wblk > 1 && k % wblk == 0 && rows > 0);
    if (wblk <= 1 || k % wblk || rows <= 0) {
        memset(out, 0, (size_t)m * (size_t)n * sizeof(float));
        return;
    }
    for (int i0 = 0; i0 < m; i0 += rows) {
        j.m = m - i0 < rows ? m - i0 : rows;
        j.x = x + (size_t)i0 * k;
        j.out = out + (size_t)i0 * n;
        cpu_qmatmul_run(b, &j);
    }
}
