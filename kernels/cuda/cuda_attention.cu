/* cuda_attention.cu - the kv-cache write, causal GQA attention over the cache, and the
 * attention prologue fused (attn_prep: one block per token and head normalises, rotates
 * and stores it, where the unfused ops take up to six kernels).
 *
 * Attention is flash-decoding (perf-anchors §6.4): a block owns one token, one kv head and
 * GB of the query heads sharing it (each K/V row is read once for all of them), and one
 * of n_split ranges of the positions the token sees. Its 4 warps take keys in turn; per key
 * a warp holds the row spread over its lanes (DL floats each), forms every head's score
 * with a warp reduction, and updates that head's online softmax (max, sum, output). The
 * warps' triples are merged in shared memory; with one split that is the answer, else
 * each split writes its triple and att_merge combines them. The split count depends only
 * on the step's shape (tokens, heads, window, and the cache's reach: a ring's cap, or a
 * paged cache's blk_w · block, fixed per graph key), never on positions, and each block
 * finds its range from the token's position on the device, so a captured decode graph
 * stays right as the context grows. Every kernel finds a position's cache row as
 * bk_kv_row does (cuda_kv_row, cuda_internal.cuh): in its slot's ring, or in the pool
 * block the step's block table (staged with the batch, refilled by a replay) names for
 * it. A bf16 model's runs of FA_MIN tokens or more take the tensor-core prefill kernel
 * (cuda_attention_flash.cu); shorter ones and f32 caches this one. Softmax in f32 with
 * expf; scores are q·k · scale, then the softcap. A BF16 cache (k and v rounded to nearest
 * even by the store) is widened to f32 as it is loaded, so both caches run the same
 * arithmetic; its rows are half the bytes. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

enum { ATT_WARPS = 4, ATT_THREADS = 32 * ATT_WARPS, ATT_MAX_SPLIT = 64 };

/* Tokens of sequences at least long_from long are cuda_fa's (cuda_attention_flash.cu). */
typedef struct att_skip {
    const int32_t *len;
    int long_from;
} att_skip;

/* Element i of a cache half of dtype dt (F32 or BF16), as f32; dt is uniform per launch. */
__device__ __forceinline__ float att_ld(const void *__restrict__ c, int dt, size_t i) {
    if (dt == DTYPE_BF16) return __uint_as_float((uint32_t)((const uint16_t *)c)[i] << 16);
    return ((const float *)c)[i];
}

__device__ __forceinline__ void att_st(void *__restrict__ c, int dt, size_t i, float v) {
    if (dt == DTYPE_BF16) ((__nv_bfloat16 *)c)[i] = __float2bfloat16_rn(v);
    else ((float *)c)[i] = v;
}

__global__ void att_kv_store(void *__restrict__ kc, void *__restrict__ vc, int dt,
                             const float *__restrict__ k, const float *__restrict__ v,
                             const int32_t *tok_pos, const int32_t *tok_seq, cuda_kv_map map, int m,
                             int kvw) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= kvw) return;
    for (int t = blockIdx.y; t < m; t += gridDim.y) {
        size_t row = cuda_kv_row(map, tok_seq[t], tok_pos[t]);
        att_st(kc, dt, row * kvw + j, k[(size_t)t * kvw + j]);
        att_st(vc, dt, row * kvw + j, v[(size_t)t * kvw + j]);
    }
}

/* ---- attn_prep: split, norms, RoPE and the kv store of a step in one kernel ---- */

enum { AP_THREADS = 128 };

/* row[0..D) · r · gain, r = 1 / sqrt(mean(row²) + eps), as rmsnorm (cuda_norm.cu). */
__device__ void ap_norm(float *row, int D, const void *w, int wdt, int mode, float eps,
                        float *red) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < D; i += AP_THREADS) ss += row[i] * row[i];
    ss = cuda_warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float t = 0.0f;
    for (int w2 = 0; w2 < AP_THREADS / 32; w2++) t += red[w2];
    const float r = 1.0f / sqrtf(t / (float)D + eps);
    for (int i = threadIdx.x; i < D; i += AP_THREADS) {
        float g = mode == BK_NORM_PLAIN      ? cuda_wget(w, wdt, i)
                  : mode == BK_NORM_ONE_PLUS ? 1.0f + cuda_wget(w, wdt, i)
                                             : 1.0f;
        row[i] = row[i] * r * g;
    }
    __syncthreads();
}

/* The rotated row (RoPE on its first rot dims at position pos, as rope_rotate) to dst:
 * f32 (dt < 0) or a cache row of dt. */
__device__ void ap_rope_out(void *dst, int dt, const float *row, int D, int rot, int pos,
                            const float *inv_freq) {
    const int half = rot / 2;
    for (int j = threadIdx.x; j < D; j += AP_THREADS) {
        float o = row[j];
        if (j < rot) {
            const int p = j < half ? j : j - half;
            float s, c;
            sincosf((float)pos * inv_freq[p], &s, &c);
            o = j < half ? row[j] * c - row[j + half] * s : row[j] * c + row[j - half] * s;
        }
        if (dt < 0) ((float *)dst)[j] = o;
        else att_st(dst, dt, j, o);
    }
}

struct ap_args {
    float *q, *gate;
    const float *qg, *k, *v;
    void *kc, *vc;
    cuda_kv_map map;
    int kdt, width;
    const void *qw, *kw;
    int qwdt, kwdt, mode, v_norm, rot;
    float eps;
    const float *inv_freq;
    int H, KV, D;
};

/* Block (token t, head y): y < H a query head, else the k and v of kv head y - H. */
__global__ void __launch_bounds__(AP_THREADS)
    ap_heads(ap_args a, const int32_t *tok_pos, const int32_t *tok_seq) {
    cuda_pdl_trigger();               /* the GEMV after it may launch (cuda_launch_pdl) */
    extern __shared__ float ap_row[]; /* [D] */
    __shared__ float red[AP_THREADS / 32];
    const int t = blockIdx.x, y = blockIdx.y, D = a.D, pos = tok_pos[t];
    if (y < a.H) {
        const size_t at = ((size_t)t * a.H + y) * D;
        const float *src = a.gate ? a.qg + 2 * at : a.q + at;
        for (int i = threadIdx.x; i < D; i += AP_THREADS) {
            ap_row[i] = src[i];
            if (a.gate) a.gate[at + i] = src[D + i];
        }
        __syncthreads();
        if (a.qw) ap_norm(ap_row, D, a.qw, a.qwdt, a.mode, a.eps, red);
        ap_rope_out(a.q + at, -1, ap_row, D, a.rot, pos, a.inv_freq);
        return;
    }
    const int kh = y - a.H;
    const size_t at = ((size_t)t * a.KV + kh) * D;
    const size_t crow = cuda_kv_row(a.map, tok_seq[t], pos) * a.width + (size_t)kh * D;
    for (int i = threadIdx.x; i < D; i += AP_THREADS) ap_row[i] = a.k[at + i];
    __syncthreads();
    if (a.kw) ap_norm(ap_row, D, a.kw, a.kwdt, a.mode, a.eps, red);
    ap_rope_out(a.kdt == DTYPE_BF16 ? (void *)((__nv_bfloat16 *)a.kc + crow)
                                    : (void *)((float *)a.kc + crow),
                a.kdt, ap_row, D, a.rot, pos, a.inv_freq);
    __syncthreads(); /* the row is read before it is reused for v */
    for (int i = threadIdx.x; i < D; i += AP_THREADS) ap_row[i] = a.v[at + i];
    __syncthreads();
    if (a.v_norm) ap_norm(ap_row, D, NULL, 0, BK_NORM_NONE, a.eps, red);
    for (int i = threadIdx.x; i < D; i += AP_THREADS) att_st(a.vc, a.kdt, crow + i, ap_row[i]);
}

/* DL: floats of a head row per lane (D <= 32·DL); GB: query heads per block. */
template <int DL, int GB>
__global__ void __launch_bounds__(ATT_THREADS)
    att_split(float *__restrict__ out, float *__restrict__ part, const float *__restrict__ q,
              const void *__restrict__ kc, const void *__restrict__ vc, int dt,
              const int32_t *tok_pos, const int32_t *tok_seq, cuda_kv_map map, int H, int KV, int D,
              float scale, int window, float softcap, int n_hc, int n_split, att_skip skip) {
    cuda_pdl_trigger();               /* the GEMV after it may launch (cuda_launch_pdl) */
    extern __shared__ float att_sm[]; /* [ATT_WARPS][GB][D + 2]: max, sum, output */
    const int i = blockIdx.x, kvh = blockIdx.y / n_hc, hc = blockIdx.y % n_hc, z = blockIdx.z;
    const int G = H / KV, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int p = tok_pos[i], seq = tok_seq[i];
    if (skip.len[seq] >= skip.long_from) return;
    const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const int per = (p - lo + 1 + n_split - 1) / n_split;
    const int t0 = lo + z * per, t1 = min(p + 1, t0 + per);
    const size_t stride = (size_t)KV * D;
    const cuda_kv_seq rows = cuda_kv_seq_of(map, seq);

    float qr[GB][DL], acc[GB][DL], mx[GB], l[GB];
#pragma unroll
    for (int g = 0; g < GB; g++) {
        int hg = hc * GB + g;
        const float *qh = q + ((size_t)i * H + (size_t)kvh * G + hg) * D;
#pragma unroll
        for (int jj = 0; jj < DL; jj++) {
            int d = lane + 32 * jj;
            qr[g][jj] = hg < G && d < D ? qh[d] : 0.0f;
            acc[g][jj] = 0.0f;
        }
        mx[g] = -INFINITY;
        l[g] = 0.0f;
    }
    for (int t = t0 + warp; t < t1; t += ATT_WARPS) {
        const size_t r = cuda_kv_seq_row(rows, t) * stride + (size_t)kvh * D;
        float kv[DL], vv[DL];
#pragma unroll
        for (int jj = 0; jj < DL; jj++) { /* V loads issued with K's: more bytes in flight */
            int d = lane + 32 * jj;
            kv[jj] = d < D ? att_ld(kc, dt, r + d) : 0.0f;
            vv[jj] = d < D ? att_ld(vc, dt, r + d) : 0.0f;
        }
#pragma unroll
        for (int g = 0; g < GB; g++) {
            float s = 0.0f;
#pragma unroll
            for (int jj = 0; jj < DL; jj++) s += qr[g][jj] * kv[jj];
            s = cuda_warp_sum(s) * scale;
            if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
            float mn = fmaxf(mx[g], s);
            float co = expf(mx[g] - mn); /* 0 while mx is -inf */
            float pk = expf(s - mn);
            l[g] = l[g] * co + pk;
#pragma unroll
            for (int jj = 0; jj < DL; jj++) acc[g][jj] = acc[g][jj] * co + pk * vv[jj];
            mx[g] = mn;
        }
    }
    const int rw = D + 2;
#pragma unroll
    for (int g = 0; g < GB; g++) {
        float *r = att_sm + (size_t)(warp * GB + g) * rw;
        if (lane == 0) {
            r[0] = mx[g];
            r[1] = l[g];
        }
#pragma unroll
        for (int jj = 0; jj < DL; jj++) {
            int d = lane + 32 * jj;
            if (d < D) r[2 + d] = acc[g][jj];
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < GB * D; e += ATT_THREADS) {
        int g = e / D, d = e % D, hg = hc * GB + g;
        if (hg >= G) continue;
        float M = -INFINITY, L = 0.0f, O = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, att_sm[(size_t)(w * GB + g) * rw]);
        if (M != -INFINITY) {
            for (int w = 0; w < ATT_WARPS; w++) {
                const float *r = att_sm + (size_t)(w * GB + g) * rw;
                float f = expf(r[0] - M);
                L += r[1] * f;
                O += r[2 + d] * f;
            }
        }
        size_t oh = (size_t)i * H + (size_t)kvh * G + hg;
        if (n_split == 1) {
            out[oh * D + d] = O / L; /* the token's own position is always in range */
        } else {
            float *pp = part + (oh * n_split + z) * rw;
            if (d == 0) {
                pp[0] = M;
                pp[1] = L;
            }
            pp[2 + d] = O;
        }
    }
}

/* Merges the n_split triples of one (token, head): block = one output row. */
__global__ void att_merge(float *__restrict__ out, const float *__restrict__ part, int D,
                          int n_split, const int32_t *tok_seq, int H, att_skip skip) {
    cuda_pdl_trigger(); /* the GEMV after it may launch (cuda_launch_pdl) */
    const size_t oh = blockIdx.x;
    if (skip.len[tok_seq[oh / H]] >= skip.long_from) return;
    const int rw = D + 2;
    const float *pp = part + oh * n_split * rw;
    float M = -INFINITY;
    for (int z = 0; z < n_split; z++) M = fmaxf(M, pp[(size_t)z * rw]);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float L = 0.0f, O = 0.0f;
        for (int z = 0; z < n_split; z++) {
            const float *r = pp + (size_t)z * rw;
            if (r[1] <= 0.0f) continue; /* an empty range */
            float f = expf(r[0] - M);
            L += r[1] * f;
            O += r[2 + d] * f;
        }
        out[oh * D + d] = O / L;
    }
}

/* ---- launchers ---- */

void cuda_kv_store(backend *b, const bk_kv *kv, const float *k, const float *v,
                   const bk_batch *bt) {
    cuda_impl *c = cuda_impl_of(b);
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    int m = bt->n_tokens, kvw = kv->width;
    if (m <= 0 || kvw <= 0 ||
        !cuda_enter(c, CUDA_OP_KV_STORE, (const void *)kv->k, (const void *)kv->v, (int)kv->dt,
                    (const void *)k, (const void *)v, m, kvw, kv->cap, kv->block))
        return;
    cuda_kv_map map;
    /* the models make F32 or BF16 caches, and a paged one only in a step with its table */
    if ((kv->dt != DTYPE_F32 && kv->dt != DTYPE_BF16) || cuda_kv_map_of(kv, d, &map)) {
        cuda_fail(c, "kv_store", cudaErrorInvalidValue);
        return;
    }
    dim3 grid((unsigned)((kvw + 255) / 256), (unsigned)(m < 65535 ? m : 65535));
    att_kv_store<<<grid, 256, 0, c->stream>>>(kv->k, kv->v, (int)kv->dt, k, v, d->tok_pos,
                                              d->tok_seq, map, m, kvw);
    cuda_check_launch(c, "kv_store");
}

template <int DL, int GB>
static void att_launch(cuda_impl *c, float *out, const float *q, const bk_kv *kv,
                       const cuda_bdev *d, const cuda_kv_map &map, int m, int H, int KV, int D,
                       float scale, int window, float softcap, att_skip skip) {
    int G = H / KV, n_hc = (G + GB - 1) / GB, reach = cuda_kv_reach(map);
    /* Splits: enough blocks to fill the GPU twice, >= 64 keys each, partials in scratch.
     * The keys bound is the cache's reach (a ring's rows, a block table's positions) or
     * the window: the step's shape, not its positions. */
    int base = m * KV * n_hc, keys = window > 0 && window < reach ? window : reach;
    int ns = 1;
    if (base < 2 * c->n_sm) {
        ns = (2 * c->n_sm + base - 1) / base;
        int by_keys = (keys + 63) / 64;
        ns = ns < by_keys ? ns : by_keys;
        ns = ns < ATT_MAX_SPLIT ? ns : ATT_MAX_SPLIT;
        while (ns > 1 && (size_t)m * H * ns * (D + 2) > CUDA_ATT_PART_FLOATS) ns--;
        if (ns < 1) ns = 1;
    }
    size_t smem = sizeof(float) * ATT_WARPS * GB * (size_t)(D + 2);
    dim3 grid((unsigned)m, (unsigned)(KV * n_hc), (unsigned)ns);
    att_split<DL, GB><<<grid, ATT_THREADS, smem, c->stream>>>(
        out, c->att_part, q, kv->k, kv->v, (int)kv->dt, d->tok_pos, d->tok_seq, map, H, KV, D,
        scale, window, softcap, n_hc, ns, skip);
    cuda_check_launch(c, "attention");
    if (ns > 1) {
        att_merge<<<(unsigned)((size_t)m * H), 128, 0, c->stream>>>(out, c->att_part, D, ns,
                                                                    d->tok_seq, H, skip);
        cuda_check_launch(c, "attention merge");
    }
}

void cuda_attention(backend *b, float *out, const float *q, const bk_kv *kv, const bk_batch *bt,
                    int H, int KV, int D, float scale, int window, float softcap) {
    cuda_impl *c = cuda_impl_of(b);
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    int m = bt->n_tokens;
    if (m <= 0 || H <= 0 || KV <= 0 || D <= 0 ||
        !cuda_enter(c, CUDA_OP_ATTENTION, (const void *)out, (const void *)q, (const void *)kv->k,
                    (const void *)kv->v, (int)kv->dt, m, H, KV, D, kv->cap, kv->block, scale,
                    window, softcap))
        return;
    cuda_kv_map map;
    if (H % KV || D > 1024 || m > 65535 || kv->width != KV * D ||
        (kv->dt != DTYPE_F32 && kv->dt != DTYPE_BF16) || cuda_kv_map_of(kv, d, &map)) {
        cuda_fail(c, "attention", cudaErrorInvalidValue); /* no model has such heads */
        return;
    }
    /* GB: query heads a block takes, as many as share a kv head (G) up to what the row's
     * registers allow (DL·GB <= 32 floats per lane for q, as many for the output): a
     * larger GB than G would only spend shuffles on heads that do not exist. */
    const int G = H / KV;
    /* a bf16 model's long runs take the tensor-core prefill kernel, the rest this one */
    att_skip skip = {d->len, cuda_fa_min(c, kv, bt, D)};
    if (skip.long_from != INT_MAX) {
        cuda_fa(c, out, q, kv, bt, map, H, KV, D, scale, window, softcap);
        int short_runs = 0;
        for (int s = 0; s < bt->n_seqs; s++) short_runs += bt->len[s] < skip.long_from;
        if (!short_runs) return;
    }
#define ATT_ARGS c, out, q, kv, d, map, m, H, KV, D, scale, window, softcap, skip
    if (D <= 128) {
        if (G <= 1) att_launch<4, 1>(ATT_ARGS);
        else if (G <= 2) att_launch<4, 2>(ATT_ARGS);
        else if (G <= 4) att_launch<4, 4>(ATT_ARGS);
        else att_launch<4, 8>(ATT_ARGS);
    } else if (D <= 256) {
        if (G <= 1) att_launch<8, 1>(ATT_ARGS);
        else if (G <= 2) att_launch<8, 2>(ATT_ARGS);
        else att_launch<8, 4>(ATT_ARGS);
    } else if (D <= 512) {
        if (G <= 1) att_launch<16, 1>(ATT_ARGS);
        else att_launch<16, 2>(ATT_ARGS);
    } else {
        att_launch<32, 1>(ATT_ARGS);
    }
#undef ATT_ARGS
}

void cuda_attn_prep(backend *b, float *q, float *gate, const float *qg, float *k, float *v,
                    const bk_kv *kv, const bk_batch *bt, const bk_qkv_prep *p) {
    cuda_impl *c = cuda_impl_of(b);
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    int m = bt->n_tokens, heads = p->H + (kv ? p->KV : 0);
    if (m <= 0 || p->H <= 0 || p->D <= 0 ||
        !cuda_enter(c, CUDA_OP_ATTN_PREP, (const void *)q, (const void *)gate, (const void *)qg,
                    (const void *)k, (const void *)v, kv ? kv->k : NULL, kv ? kv->v : NULL, m, p->H,
                    p->KV, p->D, p->q_norm ? p->q_norm->data : NULL,
                    p->k_norm ? p->k_norm->data : NULL, p->norm_mode, p->v_norm, p->eps,
                    (const void *)p->inv_freq, p->rot, kv ? kv->cap : 0, kv ? kv->block : 0))
        return;
    cuda_kv_map map = {};
    if (m > 65535 || heads > 65535 || p->rot > p->D || p->rot % 2 ||
        (kv && (kv->width != p->KV * p->D || (kv->dt != DTYPE_F32 && kv->dt != DTYPE_BF16) ||
                cuda_kv_map_of(kv, d, &map)))) {
        cuda_fail(c, "attn_prep", cudaErrorInvalidValue); /* no model has such heads */
        return;
    }
    ap_args a = {q,
                 gate,
                 qg,
                 k,
                 v,
                 kv ? kv->k : NULL,
                 kv ? kv->v : NULL,
                 map,
                 kv ? (int)kv->dt : DTYPE_F32,
                 kv ? kv->width : 0,
                 p->q_norm ? p->q_norm->data : NULL,
                 p->k_norm ? p->k_norm->data : NULL,
                 p->q_norm ? (int)p->q_norm->dt : 0,
                 p->k_norm ? (int)p->k_norm->dt : 0,
                 p->norm_mode,
                 p->v_norm,
                 p->rot,
                 p->eps,
                 p->inv_freq,
                 p->H,
                 p->KV,
                 p->D};
    dim3 grid((unsigned)m, (unsigned)heads);
    ap_heads<<<grid, AP_THREADS, sizeof(float) * (size_t)p->D, c->stream>>>(a, d->tok_pos,
                                                                            d->tok_seq);
    cuda_check_launch(c, "attn_prep");
}
