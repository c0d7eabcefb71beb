/* cuda_attention_flash.cu - prefill attention on bf16 tensor cores (perf-anchors §6.4,
 * flash attention 2): the attention op for sequences of at least FA_MIN tokens over a bf16
 * cache, head dims that are multiples of 16 up to 512. Decode steps and short runs keep
 * the flash-decoding kernel (cuda_attention.cu), which splits keys instead of queries; so
 * does a model computing in f32 (backend.h compute_dtype), as this one rounds q and the
 * probabilities to bf16.
 *
 * A block owns BQ query rows of one sequence and one query head (GQA: it reads kv head
 * h / (H / KV)); its warps own 16 rows each. Key tiles of BK positions stream through
 * shared memory, straight from the bf16 cache rows (ring or paged, cuda_kv_row); each warp
 * forms its rows' scores S = Q·Kᵀ with wmma, scales (and softcaps) them, masks what the
 * causal and sliding windows hide, and updates its rows' online softmax in f32 (max, sum);
 * P = exp(S - max) goes to bf16 and O += P·V runs on the tensor cores again, O kept in f32
 * in shared memory because a fragment's rows cannot be rescaled in place. No n x n score
 * matrix exists: a block holds one BQ x BK tile of it at a time. Only the key tile loads
 * need the block's barrier; everything after works on a warp's own rows. Head dims up to
 * 256 take 64 x 64 tiles (4 warps); above (Gemma 4's global layers, 512), Q, K, V and O of
 * 64 x 64 tiles would need 330 KB of shared memory, so 32 x 32 tiles (2 warps, 173 KB). */
#include "kernels/cuda/cuda_wmma.cuh"

enum {
    FA_DWIDE = 256, /* head dims above take the narrow tiles */
    FA_DMAX = 512,
    FA_MIN = 16 /* shorter runs take the flash-decoding kernel */
};
/* BQ query rows a block (16 a warp), BK keys a tile; the f32 score and bf16 probability
 * rows are padded to LDS and LDP. */
template <int BQ, int BK> struct fa_tile {
    enum { WARPS = BQ / 16, THREADS = 32 * WARPS, LDS = BK + 4, LDP = BK + 8 };
};

typedef cw_bf16 bf16;

typedef struct fa_args {
    float *out;
    const float *q;
    const bf16 *kc, *vc;
    cuda_kv_map map;
    const int32_t *start, *len, *tok_pos;
    int H, KV, D, tiles; /* tiles: query tiles a sequence gets at most (grid.x / n_seqs) */
    float scale, softcap;
    int window;
} fa_args;

template <int BQ, int BK> static size_t fa_smem(int D) {
    typedef fa_tile<BQ, BK> T;
    return sizeof(bf16) * (BQ + 2 * BK) * (size_t)(D + 8) + sizeof(float) * BQ * (size_t)(D + 4) +
           sizeof(float) * BQ * T::LDS + sizeof(bf16) * BQ * T::LDP + sizeof(float) * 3 * BQ;
}

template <int BQ, int BK>
__global__ void __launch_bounds__(fa_tile<BQ, BK>::THREADS) fa_prefill(fa_args a) {
    typedef fa_tile<BQ, BK> T;
    enum { FA_BQ = BQ, FA_BK = BK, FA_THREADS = T::THREADS, FA_LDS = T::LDS, FA_LDP = T::LDP };
    extern __shared__ __align__(128) uint4 fa_raw[];
    const int s = blockIdx.x / a.tiles, qt = blockIdx.x % a.tiles, h = blockIdx.y;
    const int n = a.len[s], r0 = qt * FA_BQ;
    if (n < FA_MIN || r0 >= n) return;
    const int D = a.D, ldb = D + 8, ldo = D + 4, kvh = h / (a.H / a.KV);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nr = min(FA_BQ, n - r0);
    unsigned char *p = (unsigned char *)fa_raw;
    bf16 *qb = (bf16 *)p, *kb = qb + FA_BQ * ldb, *vb = kb + FA_BK * ldb;
    float *of = (float *)(vb + FA_BK * ldb), *sf = of + FA_BQ * ldo;
    bf16 *pb = (bf16 *)(sf + FA_BQ * FA_LDS);
    float *mx = (float *)(pb + FA_BQ * FA_LDP), *sum = mx + FA_BQ;
    int *pos = (int *)(sum + FA_BQ);
    const int t0 = a.start[s] + r0;
    for (int e = threadIdx.x; e < FA_BQ * D; e += FA_THREADS) {
        const int r = e / D, d = e % D;
        qb[r * ldb + d] =
            __float2bfloat16(r < nr ? a.q[((size_t)(t0 + r) * a.H + h) * D + d] : 0.0f);
        of[r * ldo + d] = 0.0f;
    }
    if (threadIdx.x < FA_BQ) {
        const int r = threadIdx.x;
        mx[r] = -INFINITY;
        sum[r] = 0.0f;
        pos[r] = r < nr ? a.tok_pos[t0 + r] : -1; /* a pad row sees no key */
    }
    /* keys of the tile's first row's window up to its last row's position */
    const int p_first = a.tok_pos[t0], p_last = a.tok_pos[t0 + nr - 1];
    const int lo = a.window > 0 && p_first - a.window + 1 > 0 ? p_first - a.window + 1 : 0;
    const cuda_kv_seq rows = cuda_kv_seq_of(a.map, s);
    const size_t stride = (size_t)a.KV * D;
    for (int k0 = lo; k0 <= p_last; k0 += FA_BK) {
        __syncthreads(); /* every warp is done with the previous tile (and the init) */
        for (int e = threadIdx.x; e < FA_BK * (D / 8); e += FA_THREADS) {
            const int j = e / (D / 8), d8 = (e % (D / 8)) * 8, kp = k0 + j;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (kp <= p_last) {
                const size_t off = cuda_kv_seq_row(rows, kp) * stride + (size_t)kvh * D + d8;
                kv = *(const uint4 *)(a.kc + off);
                vv = *(const uint4 *)(a.vc + off);
            }
            *(uint4 *)(kb + j * ldb + d8) = kv;
            *(uint4 *)(vb + j * ldb + d8) = vv;
        }
        __syncthreads();
        const int w0 = warp * 16;
        for (int ct = 0; ct < FA_BK / 16; ct++) { /* S = Q·Kᵀ for the warp's 16 rows */
            cw_acc acc;
            cw_load(acc, NULL, 0);
            cw_mma<cw_row, cw_col>(acc, qb + w0 * ldb, ldb, 16, kb + ct * 16 * ldb, ldb, 16,
                                   D / 16);
            cw_store(sf + w0 * FA_LDS + ct * 16, acc, FA_LDS);
        }
        __syncwarp();
        for (int r = w0; r < w0 + 16; r++) { /* online softmax, a row at a time */
            const int pr = pos[r];
            float sc[FA_BK / 32], rm = -INFINITY;
#pragma unroll
            for (int u = 0; u < FA_BK / 32; u++) {
                const int j = lane + 32 * u, kp = k0 + j;
                float v = sf[r * FA_LDS + j] * a.scale;
                if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
                const bool seen = kp <= pr && (a.window <= 0 || kp > pr - a.window);
                sc[u] = seen ? v : -INFINITY;
                rm = fmaxf(rm, sc[u]);
            }
            rm = cuda_warp_max(rm);
            const float mold = mx[r], mnew = fmaxf(mold, rm);
            float ps = 0.0f;
#pragma unroll
            for (int u = 0; u < FA_BK / 32; u++) {
                const float e = mnew == -INFINITY ? 0.0f : expf(sc[u] - mnew);
                ps += e;
                pb[r * FA_LDP + lane + 32 * u] = __float2bfloat16(e);
            }
            ps = cuda_warp_sum(ps);
            const float alpha = mnew == -INFINITY ? 1.0f : expf(mold - mnew);
            for (int d = lane; d < D; d += 32) of[r * ldo + d] *= alpha;
            __syncwarp(); /* every lane has read mx[r] and sum[r] */
            if (lane == 0) {
                mx[r] = mnew;
                sum[r] = sum[r] * alpha + ps;
            }
        }
        __syncwarp();
        for (int dt = 0; dt < D / 16; dt++) { /* O += P·V */
            cw_acc acc;
            float *o = of + w0 * ldo + dt * 16;
            cw_load(acc, o, ldo);
            cw_mma<cw_row, cw_row>(acc, pb + w0 * FA_LDP, FA_LDP, 16, vb + dt * 16, ldb, 16 * ldb,
                                   FA_BK / 16);
            cw_store(o, acc, ldo);
        }
    }
    __syncwarp();
    for (int r = warp * 16; r < warp * 16 + 16 && r < nr; r++) {
        const float inv = 1.0f / sum[r];
        for (int d = lane; d < D; d += 32)
            a.out[((size_t)(t0 + r) * a.H + h) * D + d] = of[r * ldo + d] * inv;
    }
}

int cuda_fa_min(const cuda_impl *c, const bk_kv *kv, const bk_batch *bt, int D) {
    if (c->cdt != DTYPE_BF16 || kv->dt != DTYPE_BF16 || D % 16 || D > FA_DMAX) return INT_MAX;
    for (int s = 0; s < bt->n_seqs; s++)
        if (bt->len[s] >= FA_MIN) return FA_MIN;
    return INT_MAX;
}

template <int BQ, int BK>
static void fa_launch(cuda_impl *c, const fa_args &a, int n_seqs, int longest) {
    fa_args t = a;
    t.tiles = (longest + BQ - 1) / BQ;
    const size_t smem = fa_smem<BQ, BK>(a.D);
    if (cw_smem_optin(c, fa_prefill<BQ, BK>, smem, "attention (flash)")) return;
    dim3 grid((unsigned)(n_seqs * t.tiles), (unsigned)a.H);
    fa_prefill<BQ, BK><<<grid, fa_tile<BQ, BK>::THREADS, smem, c->stream>>>(t);
    cuda_check_launch(c, "attention (flash)");
}

void cuda_fa(cuda_impl *c, float *out, const float *q, const bk_kv *kv, const bk_batch *bt,
             const cuda_kv_map &map, int H, int KV, int D, float scale, int window, float softcap) {
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    int longest = 0;
    for (int s = 0; s < bt->n_seqs; s++) longest = bt->len[s] > longest ? bt->len[s] : longest;
    fa_args a = {out,
                 q,
                 (const bf16 *)kv->k,
                 (const bf16 *)kv->v,
                 map,
                 d->start,
                 d->len,
                 d->tok_pos,
                 H,
                 KV,
                 D,
                 0,
                 scale,
                 softcap,
                 window};
    if (D <= FA_DWIDE) fa_launch<64, 64>(c, a, bt->n_seqs, longest);
    else fa_launch<32, 32>(c, a, bt->n_seqs, longest);
}
