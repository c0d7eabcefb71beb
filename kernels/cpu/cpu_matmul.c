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

/* The weights of one job: matmul's one, or matmul_n's several of one dtype and width, whose
 * rows the tasks split as one range [0, end[n_seg - 1]) (one pool run, x packed once). */
typedef struct {
    int n_seg;
    const void *w[BK_MATMUL_MAX];
    float *out[BK_MATMUL_MAX]; /* [m, rows of the segment] each, of the whole call */
    int end[BK_MATMUL_MAX];    /* cumulative rows */
} cpu_matmul_segs;

typedef struct {
    cpu_matmul_segs sg;
    int i0;             /* first x row of this run within the call (the scratch's rows) */
    const float *x;     /* F32 x rows of this run */
    const uint16_t *xb; /* BF16 weights: x packed, rows ldx apart */
    int ldx;
    cpu_matmul_bf16_fn fn_bf16;
    int l1d;
    dtype dt;
    int m, n, k;          /* n: the rows of all segments together */
    int n_split, m_split; /* tasks = n_split · m_split */
    int m_block;          /* rows of x per pass over a weight range */
    cpu_matmul_fn fn;
} cpu_matmul_job;

/* x rows [i, i + mb) of the run against rows [n0, n1) of segment s (its own numbering),
 * whose first row is row lo of the job. */
static void cpu_matmul_piece(const cpu_matmul_job *j, int s, int lo, int i, int mb, int n0,
                             int n1) {
    int rows = j->sg.end[s] - lo;
    float *out = j->sg.out[s] + (size_t)(j->i0 + i) * rows;
    if (j->xb) {
        j->fn_bf16(out, rows, j->xb + (size_t)i * j->ldx, j->ldx, j->sg.w[s], j->k, mb, n0, n1,
                   j->l1d);
        return;
    }
    j->fn(out, rows, j->x + (size_t)i * j->k, j->sg.w[s], j->dt, j->k, mb, n0, n1, j->l1d);
}

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
        for (int s = 0, lo = 0; s < j->sg.n_seg; lo = j->sg.end[s++]) {
            int a = n0 > lo ? n0 : lo, z = n1 < j->sg.end[s] ? n1 : j->sg.end[s];
            if (a < z) cpu_matmul_piece(j, s, lo, i, mb, a - lo, z - lo);
        }
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

/* Runs the segments' matmul over x rows [0, m): x packed to bf16 for BF16 weights, in runs
 * of as many rows as the scratch holds. */
static void cpu_matmul_segs_run(backend *b, const cpu_matmul_segs *sg, const float *x, dtype dt,
                                int k, int m) {
    cpu_impl *c = cpu_impl_of(b);
    cpu_matmul_job j = {.sg = *sg,
                        .x = x,
                        .dt = dt,
                        .m = m,
                        .n = sg->end[sg->n_seg - 1],
                        .k = k,
                        .fn = c->k->matmul,
                        .l1d = c->l1d};
    if (m <= 0 || j.n <= 0) return;
    int ldx = dt == DTYPE_BF16 ? cpu_matmul_bf16_ldx(k) : 0;
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
            c->k->pack_bf16(row, x + (size_t)(i0 + i) * k, k);
            memset(row + k, 0, (size_t)(ldx - k) * sizeof(uint16_t));
        }
        j.i0 = i0;
        j.m = mb;
        cpu_matmul_run(b, &j);
    }
}

/* One job over every weight's rows where they share a dtype (not a block type) and a
 * width: one pool run and one packing of x instead of one each (a decode step's barriers:
 * Qwen3.5's qkv|z|a|b, Nemotron-H's z|xBC|dt, q|k|v). Each output is the same kernel's
 * over the same x, so the bits are matmul's. */
void cpu_matmul_n(backend *b, float *const *out, const float *x, const bk_weight *const *w, int n_w,
                  int m) {
    int one = n_w >= 1 && n_w <= BK_MATMUL_MAX && dtype_block_elems(w[0]->dt) == 1;
    for (int j = 1; one && j < n_w; j++)
        one = w[j]->dt == w[0]->dt && w[j]->shape[1] == w[0]->shape[1];
    if (!one) {
        for (int j = 0; j < n_w; j++) cpu_matmul(b, out[j], x, w[j], m);
        return;
    }
    cpu_matmul_segs sg = {.n_seg = n_w};
    for (int j = 0, end = 0; j < n_w; j++) {
        end += (int)w[j]->shape[0];
        sg.w[j] = w[j]->data;
        sg.out[j] = out[j];
        sg.end[j] = end;
    }
    cpu_matmul_segs_run(b, &sg, x, w[0]->dt, (int)w[0]->shape[1], m);
}

void cpu_matmul(backend *b, float *out, const float *x, const bk_weight *w, int m) {
    if (dtype_block_elems(w->dt) > 1) { /* Q8_0, Q4_K, ...: x quantized, integer dots */
        cpu_qmatmul(b, out, x, w, m);
        return;
    }
    cpu_matmul_segs sg = {.n_seg = 1, .w = {w->data}, .out = {out}, .end = {(int)w->shape[0]}};
    cpu_matmul_segs_run(b, &sg, x, w->dt, (int)w->shape[1], m);
}
