/* cpu_matmul.c - out[m, n] = x[m, k] · Wᵀ on the CPU: the reference and the threaded driver.
 *
 * The weight stays in its checkpoint dtype and is read in place (it is mmapped checkpoint
 * data). F32 and F16 weights meet f32 x in f32 FMAs. For BF16 weights x is first rounded
 * to bf16 (once per call, into the backend's scratch) and the kernels multiply bf16 by
 * bf16: exact products, f32 sums. That is the precision a bf16 model runs at in its
 * reference (transformers rounds every activation to bf16; we round only the matmul
 * inputs and keep the residual stream, norms and states in f32), and it is what lets the
 * AVX-512 kernels use vdpbf16ps: twice the multiply-adds per instruction, so a batch of
 * decode rows stays bound by the weight stream instead of by FMAs, and half the x bytes
 * for a wide-k row to keep in L1. Every kernel, for every dtype, sums each output the same
 * way whatever the batch (see cpu_internal.h), so batching never changes a sequence's
 * logits.
 *
 * Work split: tasks own a range of output features (W rows), so each weight byte is read
 * by one thread once per m-block. Decode (m small) is a pure weight stream; prefill walks
 * x in blocks sized to stay in L2 so each weight tile is reused from L1 by every row of
 * the block. When W has few rows (the DeltaNet a/b projections), tasks also split m. */
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

void cpu_matmul_ref(float *out, const float *x, const bk_weight *w, int m) {
    int n = (int)w->shape[0], k = (int)w->shape[1];
    int round_x = w->dt == DTYPE_BF16 && cpu_matmul_bf16_ldx(k) > 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++) {
                float xv = x[(size_t)i * k + l];
                if (round_x) xv = dtype_bf16_to_f32(cpu_pack_bf16_one(xv));
                s += xv * cpu_weight_at(w, (size_t)j * k + l);
            }
            out[(size_t)i * n + j] = s;
        }
}

/* Rows a multiple of 4 KiB apart fall into the same L1 sets, so the four x rows and six W
 * rows of a prefill tile evicted each other from Zen 4's 8-way L1: k = 2,048, 6,144, 8,192
 * and 12,288 ran the tile at 158-176 GFLOP/s a thread against 215-229 with x's rows one
 * line further apart (W's stride is the checkpoint's). */
int cpu_matmul_bf16_ldx(int k) {
    int ldx = (k + 31) & ~31;
    if ((ldx * 2) % 4096 == 0) ldx += 32;
    return (size_t)ldx * sizeof(uint16_t) <= CPU_XB_BYTES ? ldx : 0;
}

typedef struct {
    float *out;
    const float *x;
    const uint16_t *xb; /* BF16 weights: x packed, rows ldx apart */
    int ldx;
    cpu_matmul_bf16_fn fn_bf16;
    int l1d;
    const void *w;
    dtype dt;
    int m, n, k;
    int n_split, m_split; /* tasks = n_split · m_split */
    int m_block;          /* rows of x per pass over a weight range */
    cpu_matmul_fn fn;
} cpu_matmul_job;

static void cpu_matmul_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_matmul_job *j = ctx;
    int n0, n1, m0, m1;
    /* 16-row alignment keeps every task's W range whole cache lines for common k. */
    cpu_split_range(j->n, j->n_split, task % j->n_split, 16, &n0, &n1);
    cpu_split_range(j->m, j->m_split, task / j->n_split, 4, &m0, &m1);
    if (n0 >= n1) return;
    for (int i = m0; i < m1; i += j->m_block) {
        int mb = m1 - i < j->m_block ? m1 - i : j->m_block;
        if (j->xb) {
            j->fn_bf16(j->out + (size_t)i * j->n, j->n, j->xb + (size_t)i * j->ldx, j->ldx, j->w,
                       j->k, mb, n0, n1, j->l1d);
            continue;
        }
        j->fn(j->out + (size_t)i * j->n, j->n, j->x + (size_t)i * j->k, j->w, j->dt, j->k, mb, n0,
              n1, j->l1d);
    }
}

/* Runs job j (x rows [0, j->m)) over the pool. */
static void cpu_matmul_run(backend *b, cpu_matmul_job *j) {
    cpu_impl *c = cpu_impl_of(b);
    int m = j->m;
    /* A block of x rows of at most ~384 KiB stays in L2 while a weight tile sweeps it,
     * but never under 32 rows: W streams from memory once per block, and at the widest k
     * (12,288-12,544: 12 rows of bf16 in 384 KiB) eleven passes over W for 128 rows made
     * the GEMM wait on memory. 32 rows from L3 instead: Nemotron's down projection
     * 3136x12544 at m = 128 / 1,024, 106 -> 142 GFLOP/s on one Zen 4 thread, 264 -> 283 on
     * two; 3136x7680 and 1536x12288 +2-11%; shapes whose blocks were 32 rows or more are
     * unchanged. A decode batch (m < 8) is one pass over W either way. */
    int row_bytes = j->xb ? j->ldx * 2 : j->k * 4;
    int mb = (int)((384 * 1024) / row_bytes);
    mb = mb < 32 ? 32 : mb > 256 ? 256 : mb;
    /* Blocks of equal size: 128 rows at k = 3,136 as 44 + 44 + 40, not 60 + 60 + 8, whose
     * last 8 rows took the decode-batch tiles for a whole pass over W. */
    int nb = (m + mb - 1) / mb;
    mb = ((m + nb - 1) / nb + 3) & ~3;
    j->m_block = mb;
    cpu_matmul_tasks(b, j->n, m, j->k, &j->n_split, &j->m_split);
    cpu_pool_run(c->pool, cpu_matmul_task, j, j->n_split * j->m_split);
}

void cpu_matmul_n(backend *b, float *const *out, const float *x, const bk_weight *const *w, int n_w,
                  int m) {
    for (int j = 0; j < n_w; j++) cpu_matmul(b, out[j], x, w[j], m);
}

void cpu_matmul(backend *b, float *out, const float *x, const bk_weight *w, int m) {
    if (dtype_block_elems(w->dt) > 1) { /* Q8_0, Q4_K, ...: x quantized, integer dots */
        cpu_qmatmul(b, out, x, w, m);
        return;
    }
    cpu_impl *c = cpu_impl_of(b);
    cpu_matmul_job j = {.out = out,
                        .x = x,
                        .w = w->data,
                        .dt = w->dt,
                        .m = m,
                        .n = (int)w->shape[0],
                        .k = (int)w->shape[1],
                        .fn = c->k->matmul,
                        .l1d = c->l1d};
    if (m <= 0 || j.n <= 0) return;
    int ldx = w->dt == DTYPE_BF16 ? cpu_matmul_bf16_ldx(j.k) : 0;
    if (!ldx) { /* F32 / F16 weights (or a k no model has, past the scratch) */
        cpu_matmul_run(b, &j);
        return;
    }
    j.xb = c->xb;
    j.ldx = ldx;
    j.fn_bf16 = c->k->matmul_bf16;
    int rows = (int)(CPU_XB_BYTES / ((size_t)ldx * sizeof(uint16_t)));
    for (int i0 = 0; i0 < m; i0 += rows) {
        int mb = m - i0 < rows ? m - i0 : rows;
        for (int i = 0; i < mb; i++) {
            uint16_t *row = c->xb + (size_t)i * ldx;
            c->k->pack_bf16(row, x + (size_t)(i0 + i) * j.k, j.k);
            memset(row + j.k, 0, (size_t)(ldx - j.k) * sizeof(uint16_t));
        }
        j.out = out + (size_t)i0 * j.n;
        j.m = mb;
        cpu_matmul_run(b, &j);
    }
}
