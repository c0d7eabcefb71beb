/* cuda_sample.cu - the whole sampler on the device (kernels/backend.h, sample): a grammar's
 * allow mask, logit bias, penalties from the slot's token counts, greedy or temperature / top-k / top-p / min-p and
 * a Philox draw, logprobs of the processed distribution, so a decode step downloads a few
 * bytes per sequence instead of its logits row.
 *
 * Two kernels per call, always the same two so a graph's op sequence never depends on the
 * requests:
 *   smp_scan   [parts, m]: mask, bias, penalties (in place), each part's max m, its arg-max, and
 *              its Σ exp(l - m) and Σ exp((l - m) / T) in double (when the row wants them);
 *   smp_pick   [m]: the row's max M, its log-normaliser and mass (the parts' sums scaled
 *              by exp(m - M): the host's sums over exp(l - M), to double rounding); the K
 *              best candidates by a radix select on the row, sorted (value down, id up);
 *              truncation and the draw.
 * The candidate prefix sums are doubles summed in another order than the host's, so a token
 * can differ from the host's only where the draw lands within ~1e-16 of a boundary. A row
 * asking for more than BK_SAMPLE_CANDIDATES candidates (a top_k above it, or a top_p whose
 * mass the best BK_SAMPLE_CANDIDATES do not hold) returns token -1 with its processed logits
 * left in place: the host sampler finishes it (engine/dsample.c). */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

extern "C" {
#include "engine/base/philox.h"
}

enum {
    SMP_PART_THREADS = 256,
    SMP_PART_ELEMS = 4096, /* a part's share of the row, before the cap on parts */
    SMP_THREADS = 1024,
    SMP_CAND = BK_SAMPLE_CANDIDATES,
};

/* (v, i) beats (w, j) when larger, or equal with a lower id; NaN never wins. */
__device__ __forceinline__ void smp_better(float &v, int &i, float w, int j) {
    if (w > v || (w == v && j < i) || (v != v && w == w)) {
        v = w;
        i = j;
    }
}

/* Block-wide arg-max of (v, i) over blockDim.x threads (a multiple of 32); every thread gets it. */
__device__ void smp_block_best(float &v, int &i, float *sv, int *si) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        int j = __shfl_xor_sync(0xffffffffu, i, o);
        smp_better(v, i, w, j);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (lane == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? sv[lane] : -INFINITY;
        i = lane < nw ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float w = __shfl_xor_sync(0xffffffffu, v, o);
            int j = __shfl_xor_sync(0xffffffffu, i, o);
            smp_better(v, i, w, j);
        }
        if (lane == 0) sv[0] = v, si[0] = i;
    }
    __syncthreads();
    v = sv[0];
    i = si[0];
    __syncthreads();
}

/* Block-wide sum of a double; every thread gets it. sd holds blockDim.x / 32 doubles. */
__device__ double smp_block_sum(double v, double *sd) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (lane == 0) sd[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? sd[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) sd[0] = v;
    }
    __syncthreads();
    v = sd[0];
    __syncthreads();
    return v;
}

/* What each pass needs of a request. */
__device__ __forceinline__ int smp_wants_lse(const bk_sample_req &q) {
    return q.logprobs || q.top_logprobs > 0;
}
/* The whole vocabulary's mass at temperature: the top_p denominator without a top_k. */
__device__ __forceinline__ int smp_wants_all(const bk_sample_req &q) {
    return q.temperature > 0.0f && q.top_p < 1.0f && !(q.top_k > 0);
}

__device__ __forceinline__ void smp_part_range(int p, int parts, int n, int &lo, int &hi) {
    int per = (n + parts - 1) / parts;
    lo = p * per;
    hi = lo + per < n ? lo + per : n;
}

__global__ void __launch_bounds__(SMP_PART_THREADS)
    smp_scan(float *__restrict__ pmax, int *__restrict__ parg, double *__restrict__ pz,
             double *__restrict__ pall, float *__restrict__ logits,
             const bk_sample_req *__restrict__ req, int n) {
    __shared__ float sv[SMP_PART_THREADS / 32];
    __shared__ int si[SMP_PART_THREADS / 32];
    __shared__ double sd[SMP_PART_THREADS / 32];
    const int row = blockIdx.y, p = blockIdx.x, parts = gridDim.x;
    const bk_sample_req q = req[row];
    float *l = logits + (size_t)row * n;
    int lo, hi;
    smp_part_range(p, parts, n, lo, hi);
    /* in list order, as the host adds them: a repeated id adds twice */
    if (q.n_bias && threadIdx.x == 0)
        for (int j = 0; j < q.n_bias; j++) {
            int id = q.bias_ids[j];
            if (id >= lo && id < hi) l[id] += q.bias_vals[j];
        }
    __syncthreads();
    float v = -INFINITY;
    int arg = 0x7fffffff;
    for (int i = lo + (int)threadIdx.x; i < hi; i += SMP_PART_THREADS) {
        float x = l[i];
        if (q.allow && !((q.allow[i >> 5] >> (i & 31)) & 1u)) {
            /* a token the grammar refuses: -inf, as the host masks before its sampler */
            x = -INFINITY;
            l[i] = x;
        } else if (q.counts) {
            uint32_t c = q.counts[i];
            if (c) { /* bit 0: seen in the prompt or the output; bits 1..: times generated */
                if (q.repetition_penalty != 1.0f)
                    x = x > 0 ? x / q.repetition_penalty : x * q.repetition_penalty;
                if (c >> 1) x -= q.presence_penalty + q.frequency_penalty * (float)(c >> 1);
                l[i] = x;
            }
        }
        smp_better(v, arg, x, i);
    }
    smp_block_best(v, arg, sv, si);
    const int lse = smp_wants_lse(q), all = smp_wants_all(q);
    double z = 0, a = 0;
    if ((lse || all) && v > -INFINITY) { /* the part's own max: its values were just read */
        const double inv_t = q.temperature > 0.0f ? 1.0 / q.temperature : 0.0;
        for (int i = lo + (int)threadIdx.x; i < hi; i += SMP_PART_THREADS) {
            double d = (double)l[i] - (double)v;
            if (lse) z += exp(d);
            if (all) a += exp(d * inv_t);
        }
    }
    z = smp_block_sum(z, sd);
    a = smp_block_sum(a, sd);
    if (threadIdx.x == 0) {
        pmax[(size_t)row * parts + p] = v;
        parg[(size_t)row * parts + p] = arg;
        pz[(size_t)row * parts + p] = z;
        pall[(size_t)row * parts + p] = a;
    }
}

/* A float's place in an order where larger floats have larger keys; -0 counts as +0 (the
 * host compares values) and NaN as the smallest. */
__device__ __forceinline__ uint32_t smp_key(float v) {
    if (v != v) return 0;
    if (v == 0.0f) v = 0.0f;
    uint32_t u = __float_as_uint(v);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* Exclusive prefix sum of one int per thread over the block (1024 threads); *total gets the
 * sum. sw holds 32 ints. */
__device__ int smp_block_scan(int v, int *sw, int *total) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) sw[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = sw[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        sw[lane] = w; /* inclusive over warps */
    }
    __syncthreads();
    int before = (warp ? sw[warp - 1] : 0) + x - v;
    *total = sw[31];
    __syncthreads();
    return before;
}

/* The K best (value, id) of row l[n] into cv/ci[0..K), sorted value down, id up; K <= SMP_CAND.
 * A radix select finds the K-th key 8 bits at a time; the ties at it are taken lowest id first,
 * as the host's sort orders them. */
__device__ void smp_select(float *cv, int *ci, const float *l, int n, int K, int *hist, int *sw) {
    const int t = threadIdx.x;
    uint32_t prefix = 0, mask = 0;
    __shared__ int s_need;
    __shared__ uint32_t s_digit;
    if (t == 0) s_need = K;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = t; d < 256; d += SMP_THREADS) hist[d] = 0;
        __syncthreads();
        for (int i = t; i < n; i += SMP_THREADS) {
            uint32_t k = smp_key(l[i]);
            if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1);
        }
        __syncthreads();
        if (t == 0) {
            int need = s_need, d = 255;
            for (; d > 0 && hist[d] < need; d--) need -= hist[d];
            s_need = need; /* of the keys with this digit, the best `need` are in */
            s_digit = (uint32_t)d;
        }
        __syncthreads();
        prefix |= s_digit << shift;
        mask |= 255u << shift;
    }
    const uint32_t kth = prefix;
    const int ties = s_need; /* keys equal to kth that are in */
    /* Each thread owns a contiguous run of ids, so block scans of its counts give every
     * candidate a slot in id order. */
    const int per = (n + SMP_THREADS - 1) / SMP_THREADS, lo = t * per;
    const int hi = lo + per < n ? lo + per : n;
    int ng = 0, ne = 0;
    for (int i = lo; i < hi; i++) {
        uint32_t k = smp_key(l[i]);
        ng += k > kth;
        ne += k == kth;
    }
    int tot_g, tot_e;
    int g0 = smp_block_scan(ng, sw, &tot_g);
    int e0 = smp_block_scan(ne, sw, &tot_e);
    for (int i = lo; i < hi && (ng || ne); i++) {
        float v = l[i];
        uint32_t k = smp_key(v);
        if (k > kth) {
            cv[g0] = v, ci[g0++] = i;
            ng--;
        } else if (k == kth) {
            if (e0 < ties) cv[tot_g + e0] = v, ci[tot_g + e0] = i;
            e0++;
            ne--;
        }
    }
    /* Bitonic sort of the padded power of two: value down, then id up. */
    int P = 1;
    while (P < K) P <<= 1;
    for (int i = K + t; i < P; i += SMP_THREADS) cv[i] = -INFINITY, ci[i] = 0x7fffffff;
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = t; i < P; i += SMP_THREADS) {
                int j = i ^ stride;
                if (j > i) {
                    uint32_t ki = smp_key(cv[i]), kj = smp_key(cv[j]);
                    int first_j = kj > ki || (kj == ki && ci[j] < ci[i]); /* j belongs before i */
                    int up = (i & size) == 0;
                    if (first_j == up) {
                        float tv = cv[i];
                        cv[i] = cv[j], cv[j] = tv;
                        int ti = ci[i];
                        ci[i] = ci[j], ci[j] = ti;
                    }
                }
            }
            __syncthreads();
        }
}

/* Inclusive prefix sum of ps[0..n) in place (doubles, Hillis-Steele); n <= SMP_THREADS. */
__device__ void smp_scan_doubles(double *ps, int n) {
    const int t = threadIdx.x;
    for (int o = 1; o < n; o <<= 1) {
        double add = t < n && t >= o ? ps[t - o] : 0.0;
        __syncthreads();
        if (t < n) ps[t] += add;
        __syncthreads();
    }
}

__global__ void __launch_bounds__(SMP_THREADS)
    smp_pick(bk_sample_res *__restrict__ res, float *__restrict__ logits,
             const float *__restrict__ pmax, const int *__restrict__ parg,
             const double *__restrict__ pz, const double *__restrict__ pall,
             const bk_sample_req *__restrict__ req, int n, int parts) {
    __shared__ float cv[SMP_CAND];
    __shared__ int ci[SMP_CAND];
    __shared__ float prob[SMP_CAND];
    __shared__ double ps[SMP_CAND]; /* prefix sums of prob: the mass up to each candidate */
    __shared__ double pq[SMP_CAND]; /* prefix sums of prob / denom, for the top_p cut */
    __shared__ int hist[256], sw[32];
    __shared__ float sv[SMP_THREADS / 32];
    __shared__ int si[SMP_THREADS / 32];
    __shared__ double sd[SMP_THREADS / 32];
    __shared__ int s_first;
    const int row = blockIdx.x, t = threadIdx.x;
    const bk_sample_req q = req[row];
    const float *l = logits + (size_t)row * n;
    const size_t pr = (size_t)row * parts;
    bk_sample_res *out = &res[row];

    float mx = -INFINITY;
    int arg = 0x7fffffff;
    for (int j = t; j < parts; j += SMP_THREADS) smp_better(mx, arg, pmax[pr + j], parg[pr + j]);
    smp_block_best(mx, arg, sv, si);
    if (arg >= n) arg = 0; /* every logit -inf or NaN: the host's loop keeps id 0 */
    const int lp = smp_wants_lse(q);
    const double inv_t = q.temperature > 0.0f ? 1.0 / q.temperature : 0.0;
    double z = 0, all = 0;
    for (int j = t; j < parts; j += SMP_THREADS) {
        if (!(pmax[pr + j] > -INFINITY)) continue; /* a part of -inf only adds nothing */
        double d = (double)pmax[pr + j] - (double)mx;
        if (lp) z += pz[pr + j] * exp(d);
        if (smp_wants_all(q)) all += pall[pr + j] * exp(d * inv_t);
    }
    z = smp_block_sum(z, sd);
    all = smp_block_sum(all, sd);
    const float lse = lp ? mx + (float)log(z) : 0.0f;

    const int sampling = q.temperature > 0.0f;
    int K = 0;
    if (sampling) K = q.top_k > 0 && q.top_k < n ? q.top_k : (n < SMP_CAND ? n : SMP_CAND);
    const int n_top = q.top_logprobs < n ? q.top_logprobs : n;
    if (n_top > K) K = n_top;
    if (K > SMP_CAND) { /* the host sorts this one */
        if (t == 0) out->token = -1, out->n_top = 0, out->logprob = 0.0f;
        return;
    }
    if (K) smp_select(cv, ci, l, n, K, hist, sw);

    int chosen = arg;
    if (sampling) {
        const int k = q.top_k > 0 && q.top_k < n ? q.top_k : (n < SMP_CAND ? n : SMP_CAND);
        const double top = cv[0];
        for (int i = t; i < k; i += SMP_THREADS) {
            prob[i] = (float)exp(((double)cv[i] - top) * inv_t);
            ps[i] = prob[i];
        }
        __syncthreads();
        smp_scan_doubles(ps, k);
        const double tot = ps[k - 1];
        if (q.top_p < 1.0f && !(q.top_k > 0) && tot < q.top_p * all && k < n) {
            if (t == 0) out->token = -1, out->n_top = 0, out->logprob = 0.0f;
            return; /* the best SMP_CAND do not hold top_p of the mass */
        }
        const double denom = q.top_k > 0 ? tot : all;
        int keep = k;
        if (q.top_p < 1.0f) { /* the smallest prefix whose mass reaches top_p */
            if (t == 0) s_first = k;
            __syncthreads();
            for (int i = t; i < k; i += SMP_THREADS) pq[i] = prob[i] / denom;
            __syncthreads();
            smp_scan_doubles(pq, k);
            for (int i = t; i < k; i += SMP_THREADS)
                if (pq[i] >= q.top_p && (i == 0 || pq[i - 1] < q.top_p)) atomicMin(&s_first, i);
            __syncthreads();
            keep = s_first < k ? s_first + 1 : k;
            __syncthreads();
        }
        if (q.min_p > 0.0f) { /* probabilities fall along the sorted list: a prefix */
            const float floor_p = q.min_p * prob[0];
            if (t == 0) s_first = keep;
            __syncthreads();
            for (int i = 1 + t; i < keep; i += SMP_THREADS)
                if (prob[i] < floor_p) atomicMin(&s_first, i);
            __syncthreads();
            keep = s_first;
            __syncthreads();
        }
        /* ps[0..keep) is the scan of the kept prefix too: each sum reads only the ones before */
        const double r = philox_uniform(q.seed, q.draw) * ps[keep - 1];
        if (t == 0) s_first = keep - 1;
        __syncthreads();
        for (int i = t; i < keep; i += SMP_THREADS)
            if (r < ps[i] && (i == 0 || !(r < ps[i - 1]))) atomicMin(&s_first, i);
        __syncthreads();
        chosen = ci[s_first];
    }
    for (int i = t; i < n_top; i += SMP_THREADS) {
        out->top_id[i] = ci[i];
        out->top_lp[i] = cv[i] - lse;
    }
    if (t == 0) {
        out->token = chosen;
        out->logprob = lp ? l[chosen] - lse : 0.0f;
        out->n_top = q.top_logprobs;
        if (n_top < q.top_logprobs) out->n_top = n_top;
        if (q.counts) /* seen, and generated once more: the next step's penalties */
            q.counts[chosen] = (q.counts[chosen] | 1u) + 2u;
        if (q.feed) *q.feed = chosen; /* the next step's input, without the host */
    }
}

void cuda_sample(backend *b, bk_sample_res *res, float *logits, const bk_sample_req *req, int m,
                 int n) {
    cuda_impl *c = cuda_impl_of(b);
    if (m <= 0 || n <= 0) return;
    int parts = (n + SMP_PART_ELEMS - 1) / SMP_PART_ELEMS;
    if (parts > CUDA_SAMPLE_PARTS) parts = CUDA_SAMPLE_PARTS;
    for (int r0 = 0; r0 < m; r0 += CUDA_SAMPLE_ROWS) {
        int rows = m - r0 < CUDA_SAMPLE_ROWS ? m - r0 : CUDA_SAMPLE_ROWS;
        float *l = logits + (size_t)r0 * n;
        const bk_sample_req *dq =
            (const bk_sample_req *)cuda_stage(c, req + r0, sizeof *req * (size_t)rows);
        if (cuda_enter(c, CUDA_OP_SAMPLE, (const void *)l, (const void *)dq, rows, n)) {
            dim3 grid((unsigned)parts, (unsigned)rows);
            smp_scan<<<grid, SMP_PART_THREADS, 0, c->stream>>>(c->smp_max, c->smp_arg, c->smp_z,
                                                               c->smp_all, l, dq, n);
            smp_pick<<<(unsigned)rows, SMP_THREADS, 0, c->stream>>>(
                c->smp_res, l, c->smp_max, c->smp_arg, c->smp_z, c->smp_all, dq, n, parts);
            cuda_check_launch(c, "sample");
        }
        c->ops.download(b, res + r0, c->smp_res, sizeof *res * (size_t)rows);
    }
}
