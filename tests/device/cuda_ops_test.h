/* cuda_ops_test.h - what the parts of the CUDA op test share (test_cuda_ops.c,
 * cuda_ops_mixers.c, cuda_ops_ref.c, cuda_ops_sample.c, cuda_ops_quant.c): the two backends,
 * host/device buffer helpers, the one-line report, weights with host and device copies,
 * batches, the tolerances, and plain references for ops the CPU backend may not have yet.
 * Test-only. */
#ifndef STRATA_CUDA_OPS_TEST_H
#define STRATA_CUDA_OPS_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* Tolerances, relative to max(1, max |reference|):
 * - elementwise / norms / rope / gates: the same f32 formula on both sides, differing
 *   only in reduction order and few-ulp expf / tanhf / sincosf: 1e-5.
 * - matmul: f32 accumulation of k products in another order (~sqrt(k)·2^-24 of the
 *   magnitude); both sides round x to bf16 for BF16 weights, so the products agree:
 *   2e-5 for f32 weights, 5e-5 for 16-bit weights.
 * - attention: online vs three-pass softmax in f32: 2e-5.
 * - recurrences (delta rule, SSD) over up to ~40 tokens with the state carried: the
 *   reassociated sums compound a little per token: 1e-4. */
#define TOL_EW 1e-5
#define TOL_MM32 2e-5
#define TOL_MM16 5e-5
#define TOL_ATT 2e-5
#define TOL_REC 1e-4
/* bf16 tensor-core products: operands rounded to 8 significant bits (2^-8 = 3.9e-3 each);
 * measured worst 6.0e-3 (chunked SSD), 2.2e-3 (chunked delta rule); a wrong term is O(1) */
#define TOL_GDC 2e-2
/* the same for the prefill attention: measured worst 1.6e-3; one key too many or too few in
 * a window of 24 moves a row by ~4e-2 */
#define TOL_FA 5e-3

extern backend *cpu, *gpu; /* the reference and the backend under test */
extern strata_err err;

float rnd(void); /* uniform [-1, 1), fixed seed */
float *hvec(size_t n);
float *hrand(size_t n, float amp);
float *hdup(const float *h, size_t n);
float *gput(const float *h, size_t n); /* device copy of h */
float *gget(const float *d, size_t n); /* host copy of d (caller frees) */
void gfree(void *d);
/* Prints "op shape max rel err tol PASS|FAIL"; returns 1 on pass. */
int report(const char *op, const char *shape, const float *got, const float *ref, size_t n,
           double tol);
const char *dtn(dtype dt);
/* The backend under test lacks op (only in --self runs, where it is the CPU backend). */
#define SKIP_WITHOUT(op)                                                                           \
    if (!gpu->ops->op) {                                                                           \
        printf("%-24s SKIP: the backend under test has no %s\n", #op, #op);                        \
        return;                                                                                    \
    }

/* A weight with a host copy (used in place by the CPU backend) and a device copy. */
typedef struct {
    bk_weight h, d;
    void *buf;
} tw;
tw wmake(dtype dt, int64_t s0, int64_t s1, float amp); /* s1 = 0: 1-D */
void wfree(tw *w);

typedef struct {
    bk_batch hb, db; /* the CPU's and the device's view of the same arrays */
    int32_t slot[8], start[8], len[8], pos0[8];
    int32_t tok_pos[4096], tok_seq[4096];
    int32_t blk[1024]; /* the block table rows of a paged step */
} tbatch;
void tb_make(tbatch *t, int n_seqs, const int *len, const int *pos0, const int *slot);
/* After tb_make: the step's block table, blk_w entries a sequence (copied). */
void tb_blocks(tbatch *t, int blk_w, const int32_t *blk);
/* The device mirror is the backend's last prepared batch: call right before the ops. */
void tb_dev(tbatch *t);

/* cuda_ops_mixers.c */
void test_attention(void);
void test_attn_prep(void);
void test_conv1d(void);
void test_gated_delta(void);
void test_gdn(void);
void test_gdn_chunked(void);
void test_ssd(void);
void test_ssd_chunked(void);
void test_speed_prefill(void); /* --prefill-speed */
void test_graph(void);
void test_graph_chain(void);
void test_graph_paged(void);
void test_speed(void);
/* cuda_ops_sample.c */
void test_sample(void);
/* cuda_ops_quant.c: the ops on Q8_0 / Q4_0 / Q4_K / Q6_K weights, and their GEMVs' speed */
void test_quant_ops(void);
void test_speed_quant(void);

/* cuda_ops_ref.c: kernels/backend.h written out, for CPU ops not there yet */
float ref_weight_at(const bk_weight *w, size_t i);
void ref_matmul_bf16(float *out, const float *x, const bk_weight *w, int m);
void ref_gelu_mul(float *out, const float *gate, const float *up, size_t n);
void ref_relu2(float *x, size_t n);
void ref_scale(float *x, float alpha, const bk_weight *s, size_t n);
void ref_softcap(float *x, float cap, size_t n);
void ref_grouped(float *out, const float *x, const float *z, const bk_weight *w, int m, int width,
                 int group, float eps);
void ref_ssd(float *y, const float *x, int ld_x, const float *B, const float *C, int ld_bc,
             const float *dt, int ld_dt, const bk_weight *A_log, const bk_weight *dt_bias,
             const bk_weight *D, float *state, const bk_batch *bt, int H, int P, int N, int G,
             float dt_min);

#endif
