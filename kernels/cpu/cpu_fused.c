/* cpu_fused.c - the fused ops of kernels/backend.h on the CPU: each is the sequence of CPU
 * ops it stands for, called in turn, so it equals that sequence bit for bit by
 * construction and is the reference the CUDA backend's single kernels are held to. */
#include "kernels/cpu/cpu_act.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_mamba.h"

void cpu_fused_matmul_glu(backend *b, float *out, float *g, float *u, const bk_weight *w, int m,
                          int act) {
    int k = (int)w->shape[1];
    size_t n = (size_t)m * (size_t)k;
    float *a = g;
    switch (act) {
    case BK_ACT_SILU: cpu_ops_silu_mul(b, g, g, u, m, k); break;
    case BK_ACT_GELU_TANH: cpu_act_gelu_tanh_mul(b, g, g, u, m, k); break;
    case BK_ACT_SIGMOID:
        cpu_ops_sigmoid_mul(b, u, g, n);
        a = u;
        break;
    case BK_ACT_RELU2: cpu_mamba_relu2(b, g, n); break;
    default: return; /* no such activation: the models pass BK_ACT_* */
    }
    cpu_matmul(b, out, a, w, m);
}

void cpu_fused_matmul_gnorm(backend *b, float *out, float *x, const float *z, const bk_weight *nw,
                            int group, float eps, int mode, const bk_weight *w, int m) {
    int k = (int)w->shape[1];
    if (group <= 0 || k % group) return; /* the models pass whole groups */
    if (mode == BK_GNORM_HEAD) cpu_ops_rmsnorm_gated(b, x, x, z, nw, m * (k / group), group, eps);
    else if (mode == BK_GNORM_GROUPED)
        cpu_mamba_rmsnorm_gated_grouped(b, x, x, z, nw, m, k, group, eps);
    else return;
    cpu_matmul(b, out, x, w, m);
}

void cpu_fused_gdn(backend *b, float *out, float *q, float *k, int ld_qk, const float *v, int ld_v,
                   const float *a, const float *bb, const bk_weight *A_log,
                   const bk_weight *dt_bias, float *g, float *beta, float *state,
                   const bk_batch *bt, int Hk, int Hv, int dk, int dv, float q_scale, int vmap) {
    int m = bt->n_tokens;
    cpu_ops_l2norm(b, q, m * Hk, dk, ld_qk, Hk, 1e-6f, q_scale);
    cpu_ops_l2norm(b, k, m * Hk, dk, ld_qk, Hk, 1e-6f, 1.0f);
    cpu_ops_gdn_gates(b, g, beta, a, bb, A_log, dt_bias, m, Hv);
    cpu_gated_delta(b, out, q, k, ld_qk, v, ld_v, g, beta, state, bt, Hk, Hv, dk, dv, vmap);
}

void cpu_fused_attn_prep(backend *b, float *q, float *gate, const float *qg, float *k, float *v,
                         const bk_kv *kv, const bk_batch *bt, const bk_qkv_prep *p) {
    int m = bt->n_tokens, H = p->H, KV = p->KV, D = p->D;
    if (gate) cpu_ops_split_halves(b, q, gate, qg, m * H, D);
    if (p->q_norm) cpu_ops_rmsnorm(b, q, q, p->q_norm, m * H, D, D, p->eps, p->norm_mode);
    if (kv && p->k_norm) cpu_ops_rmsnorm(b, k, k, p->k_norm, m * KV, D, D, p->eps, p->norm_mode);
    if (kv && p->v_norm) cpu_ops_rmsnorm(b, v, v, NULL, m * KV, D, D, p->eps, BK_NORM_NONE);
    if (p->rot) cpu_ops_rope(b, q, bt, p->inv_freq, H, D, p->rot, H * D);
    if (kv && p->rot) cpu_ops_rope(b, k, bt, p->inv_freq, KV, D, p->rot, KV * D);
    if (kv) cpu_attention_kv_store(b, kv, k, v, bt);
}
