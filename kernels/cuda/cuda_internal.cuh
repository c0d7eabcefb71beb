/* cuda_internal.cuh - what the CUDA backend's files share: the backend's private state,
 * the device helpers every kernel family uses, and the op entry points (one family per
 * .cu file). Not for use outside kernels/cuda and its device tests.
 *
 * Every op entry follows style.md §18: check, compute the grid, launch on the backend's
 * stream, check the launch. None allocates, synchronises or reads device data on the
 * host, so a whole forward can be captured as a CUDA graph (cuda_graph.cu). Ops whose
 * inputs live in host memory (embed ids, gather rows, the batch arrays) copy them through
 * a pinned staging ring (cuda_backend.cu), which graph replays refill on the host. */
#ifndef STRATA_CUDA_INTERNAL_CUH
#define STRATA_CUDA_INTERNAL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "kernels/backend.h"
#include "engine/base/err.h"
}

/* Exported from libstrata_cuda.so; everything else stays hidden (-fvisibility=hidden). */
#define CUDA_EXPORT extern "C" __attribute__((visibility("default")))

enum {
    CUDA_BLOCK = 256,               /* default threads per block */
    CUDA_STAGE_BYTES = 8 << 20,     /* pinned staging ring for host-side op inputs */
    CUDA_BOUNCE_BYTES = 64 << 20,   /* pinned bounce buffer for downloads */
    CUDA_BLAS_WS_BYTES = 32 << 20,  /* cuBLAS workspace (graph capture needs one) */
    CUDA_ACT16_ELEMS = 16 << 20,    /* bf16-rounded activations for cuBLAS */
    CUDA_ATT_PART_FLOATS = 4 << 20, /* flash-decoding split partials */
    CUDA_GRAPH_MAX = 64,            /* captured graphs kept (batch-size buckets x 2 halves) */
    CUDA_FLIGHT_MAX = 2,            /* graphs launched and not yet synced */
    CUDA_MAPS_MAX = 8,              /* host weights mapped for the device (weight_map) */
    CUDA_PROF_MAX = 8192,           /* ops a profiled forward times */
    CUDA_PENDING_MAX = 64,          /* downloads deferred to graph_end */
    CUDA_SAMPLE_ROWS = 256,         /* logit rows one sample launch takes */
    CUDA_SAMPLE_PARTS = 64,         /* blocks per row in the sampler's vocabulary passes */
};

typedef enum { CUDA_MODE_EAGER = 0, CUDA_MODE_CAPTURE, CUDA_MODE_REPLAY } cuda_mode;

/* The device mirror of a bk_batch (bt->dev points at one of these, owned by the backend). */
typedef struct cuda_bdev {
    const int32_t *slot, *start, *len, *pos0; /* [n_seqs] device */
    const int32_t *tok_pos, *tok_seq;         /* [n_tokens] device */
    const int32_t *blk; /* [n_seqs · blk_w] device block table rows; NULL when blk_w is 0 */
    int n_tokens, n_seqs, blk_w;
} cuda_bdev;

/* Where a kv cache keeps the step's positions, for the kernels (by value): a ring per
 * slot (block 0) or pool blocks through the step's block table (block > 0). */
typedef struct cuda_kv_map {
    const int32_t *slot; /* [n_seqs] device */
    const int32_t *blk;  /* [n_seqs · blk_w] device (block > 0) */
    int cap, block, blk_w;
} cuda_kv_map;

/* A host range page-locked and mapped by weight_map: its device address, what was
 * registered (whole pages) and where. */
typedef struct cuda_map_rec {
    const void *dev;
    void *base;
} cuda_map_rec;

typedef struct cuda_alloc_rec {
    void *p;
    size_t bytes;
} cuda_alloc_rec;

typedef struct cuda_graph_entry {
    uint64_t key;
    int half;     /* the half of the staging ring and bounce buffer its copies use */
    uint64_t sig; /* hash of the op sequence captured */
    int n_ops;
    cudaGraphExec_t exec;
} cuda_graph_entry;

typedef struct cuda_pending {
    void *dst;  /* host destination (the caller's pointer of this replay) */
    size_t off; /* offset in the bounce buffer */
    size_t bytes;
} cuda_pending;

/* A graph launched by graph_end without waiting: its downloads complete at graph_sync. */
typedef struct cuda_flight {
    cudaEvent_t done; /* recorded after the launch */
    int half;
    int n_pending;
    cuda_pending pending[CUDA_PENDING_MAX];
} cuda_flight;

typedef struct cuda_impl {
    backend_ops ops; /* the vtable b->ops points at */
    int device, n_sm;
    char name[256]; /* device name */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;        /* [CUDA_BLAS_WS_BYTES] */
    __nv_bfloat16 *act16; /* [CUDA_ACT16_ELEMS] */
    float *att_part;      /* [CUDA_ATT_PART_FLOATS] */
    /* the sampler's per-part partials [CUDA_SAMPLE_ROWS, CUDA_SAMPLE_PARTS] and results */
    float *smp_max;
    int *smp_arg;
    double *smp_z, *smp_all;
    bk_sample_res *smp_res; /* [CUDA_SAMPLE_ROWS] */
    /* staging ring: host inputs copied H2D at op time (or refilled before a graph replay).
     * An eager forward uses all of it; a graph one half, the other half than the graph
     * in flight, so the host refills one while the device reads the other. */
    unsigned char *stage_h; /* pinned [CUDA_STAGE_BYTES] */
    unsigned char *stage_d; /* device mirror [CUDA_STAGE_BYTES] */
    size_t stage_off, stage_end;
    cudaEvent_t stage_ev; /* after the last staging copy */
    int stage_ev_live;
    unsigned char *bounce; /* pinned [CUDA_BOUNCE_BYTES] download bounce, halved as the ring */
    size_t bounce_off, bounce_end;
    cuda_bdev bdev;
    dtype cdt; /* compute_dtype: BF16 lets the prefill forms use bf16 tensor cores */
    /* allocations made through ops->alloc and weight_prepare */
    cuda_alloc_rec *allocs;
    size_t n_allocs, cap_allocs;
    size_t cur_bytes, peak_bytes, scratch_bytes;
    cuda_map_rec maps[CUDA_MAPS_MAX];
    int n_maps;
    /* profiling (cuda_profile.cu): an event at every op's start, the op's kind */
    struct cuda_prof *prof; /* NULL: off */
    /* graphs */
    cuda_mode mode;
    uint64_t key, sig;
    int n_ops;
    int graph_bad;       /* something in this capture/replay cannot be replayed */
    char graph_msg[256]; /* why, when a CUDA call failed during the capture */
    int half;            /* of the graph being captured or replayed */
    cuda_graph_entry graphs[CUDA_GRAPH_MAX];
    int n_graphs;
    cuda_pending pending[CUDA_PENDING_MAX]; /* downloads of the graph being captured/replayed */
    int n_pending;
    cuda_flight flights[CUDA_FLIGHT_MAX]; /* launched, oldest at flight_head */
    int flight_head, n_flights;
    /* first CUDA error since create (sticky): ops cannot return one */
    int err_code;
    char err_msg[256];
} cuda_impl;

static inline cuda_impl *cuda_impl_of(backend *b) { return (cuda_impl *)b->impl; }
/* The CUDA current device is per host thread: entry points that may be the first call of
 * a thread (alloc, uploads, batch_prepare at the start of each forward, graphs) select
 * ours. Cheap when it already is. */
static inline void cuda_use(const cuda_impl *c) { cudaSetDevice(c->device); }

/* ---- error recording (cuda_backend.cu) ---- */
/* Records the first failure; later ones are dropped (the first explains the rest). During a
 * capture a failure only spoils the graph (nothing ran), so it is not sticky. */
void cuda_fail(cuda_impl *c, const char *what, cudaError_t e);
/* Checks the last launch; records its error under the op's name. */
static inline void cuda_check_launch(cuda_impl *c, const char *op) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) cuda_fail(c, op, e);
}

/* Launches k on the backend's stream allowed to overlap the kernel ahead of it (see
 * cuda_pdl_wait, which k must call; STRATA_CUDA_PDL=0 at build time launches it plainly, for
 * an A/B build). A failed launch is recorded under what. */
#ifndef STRATA_CUDA_PDL
#define STRATA_CUDA_PDL 1
#endif
template <typename... P, typename... A>
static inline void cuda_launch_pdl(cuda_impl *c, const char *what, void (*k)(P...), dim3 grid,
                                   dim3 block, size_t smem, A... a) {
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cfg.attrs = at;
    cfg.numAttrs = STRATA_CUDA_PDL ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, a...);
    cudaError_t last = cudaGetLastError(); /* clears what a failed launch left there too */
    if (e == cudaSuccess) e = last;
    if (e != cudaSuccess) cuda_fail(c, what, e);
}

/* ---- graph bookkeeping: every op calls this first (cuda_graph.cu) ----
 * Folds the op and its device-side arguments into the running signature while a graph is
 * captured or replayed. Returns 1 when the op must launch (eager or capture), 0 when a
 * replay skips it (the captured graph already holds the launch). */
static inline uint64_t cuda_u64(const void *p) { return (uint64_t)(uintptr_t)p; }
static inline uint64_t cuda_u64(int v) { return (uint64_t)(int64_t)v; }
static inline uint64_t cuda_u64(size_t v) { return (uint64_t)v; }
static inline uint64_t cuda_u64(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}
void cuda_prof_mark(cuda_impl *c, int op); /* cuda_profile.cu */
template <typename... A> static inline int cuda_enter(cuda_impl *c, int op, A... a) {
    if (c->mode == CUDA_MODE_EAGER) {
        if (c->prof) cuda_prof_mark(c, op);
        return 1;
    }
    uint64_t v[] = {(uint64_t)op, cuda_u64(a)...};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) c->sig = (c->sig ^ v[i]) * 0x100000001b3ULL;
    c->n_ops++;
    return c->mode == CUDA_MODE_CAPTURE;
}
/* The ops, for the graph signature and the profile's names (cuda_profile.cu). */
/* clang-format off */
#define CUDA_OP_LIST(X)                                                                       \
    X(UPLOAD) X(DOWNLOAD) X(ZERO) X(BATCH) X(EMBED) X(RMSNORM) X(RMSNORM_GATED) X(RESIDUAL)    \
    X(L2NORM) X(ADD) X(SILU_MUL) X(SIGMOID_MUL) X(SPLIT) X(GATHER) X(MATMUL) X(MATMUL_N)       \
    X(MATMUL_GLU) X(MATMUL_GNORM) X(ROPE) X(KV_STORE) X(ATTENTION) X(ATTN_PREP) X(CONV1D)      \
    X(GATES) X(DELTA)                                                                         \
    X(GDN) X(GELU_MUL) X(RELU2) X(SCALE) X(SOFTCAP) X(NORM_GROUPED) X(SSD) X(SAMPLE)           \
    X(EMBED_FED) X(COPY)
/* clang-format on */
enum {
    CUDA_OP_NONE = 0,
#define CUDA_OP_ENUM(n) CUDA_OP_##n,
    CUDA_OP_LIST(CUDA_OP_ENUM)
#undef CUDA_OP_ENUM
        CUDA_OP_COUNT
};

/* The map of kv for the step prepared in d; 0, or -1 when kv and d cannot go together
 * (a ring without rows, a paged cache in a step without a block table). */
static inline int cuda_kv_map_of(const bk_kv *kv, const cuda_bdev *d, cuda_kv_map *m) {
    *m = cuda_kv_map{d->slot, d->blk, kv->cap, kv->block, d->blk_w};
    if (kv->block > 0) return d->blk_w > 0 && d->blk ? 0 : -1;
    return kv->cap > 0 ? 0 : -1;
}
/* One sequence's rows: its ring's first row, or its block table row. */
typedef struct cuda_kv_seq {
    const int32_t *blk; /* [blk_w] (block > 0) */
    size_t row0;        /* slot · cap (block 0) */
    int cap, block;
} cuda_kv_seq;
__device__ __forceinline__ cuda_kv_seq cuda_kv_seq_of(const cuda_kv_map &m, int seq) {
    if (m.block > 0) return cuda_kv_seq{m.blk + (size_t)seq * (size_t)m.blk_w, 0, 0, m.block};
    return cuda_kv_seq{NULL, (size_t)m.slot[seq] * (size_t)m.cap, m.cap, 0};
}
/* The row holding position pos of that sequence. */
__device__ __forceinline__ size_t cuda_kv_seq_row(const cuda_kv_seq &s, int pos) {
    if (s.block > 0)
        return (size_t)s.blk[pos / s.block] * (size_t)s.block + (size_t)(pos % s.block);
    return s.row0 + (size_t)(pos % s.cap);
}
/* The row of the cache holding position pos of the step's sequence seq: bk_kv_row
 * (kernels/backend.h) on the device. */
__device__ __forceinline__ size_t cuda_kv_row(const cuda_kv_map &m, int seq, int pos) {
    return cuda_kv_seq_row(cuda_kv_seq_of(m, seq), pos);
}
/* The most positions a token of the step may see in the cache: a ring's rows, or the
 * block table's reach (fixed per graph key, so split counts chosen from it are too). */
static inline int cuda_kv_reach(const cuda_kv_map &m) {
    return m.block > 0 ? m.blk_w * m.block : m.cap;
}

/* ---- staging (cuda_backend.cu) ----
 * Copies bytes of host memory into the staging ring and returns where the device sees
 * them; the copy is ordered on the stream. A replay only refills the host side. */
const void *cuda_stage(cuda_impl *c, const void *src, size_t bytes);

/* The weights of one GEMV launch (matmul_n: up to BK_MATMUL_MAX projections of one x):
 * rows [end[j-1], end[j]) of the launch are weight j's, written to out[j]. */
struct cuda_segs {
    const void *w[BK_MATMUL_MAX];
    float *out[BK_MATMUL_MAX];
    int end[BK_MATMUL_MAX];
    int n_seg;
};

/* The weight that launch row grow falls in, its output, and the row within it (row >= n:
 * past the last). The segment table is read at fixed indices: indexed at run time, the
 * kernel parameters would be copied to a stack frame in every thread. */
struct cuda_seg_row {
    const void *w;
    float *out;
    int row, n;
};
__device__ __forceinline__ cuda_seg_row cuda_seg_find(const cuda_segs &sg, int grow) {
    cuda_seg_row r = {sg.w[0], sg.out[0], grow, sg.end[0]};
#pragma unroll
    for (int j = 1; j < BK_MATMUL_MAX; j++)
        if (j < sg.n_seg && grow >= sg.end[j - 1])
            r = {sg.w[j], sg.out[j], grow - sg.end[j - 1], sg.end[j] - sg.end[j - 1]};
    return r;
}

/* ---- device helpers ---- */
/* Element i of a weight of dtype dt as f32 (BF16 / F16 / F32). */
__device__ __forceinline__ float cuda_wget(const void *p, int dt, size_t i) {
    if (dt == DTYPE_BF16) return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
    if (dt == DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}
/* ---- programmatic dependent launch (sm_90) ----
 * A kernel launched by cuda_launch_pdl may be scheduled before the kernel ahead of it in
 * the stream has finished, so its first weight loads are in flight while that one ends.
 * Before cuda_pdl_wait it may read only memory no kernel writes (weights, its parameters)
 * and write nothing; after it, everything the kernels ahead wrote is visible. A kernel calls
 * cuda_pdl_trigger first thing, so that the dependent launch can start once every block of
 * it has started, not exited; the dependent still waits for its completion in cuda_pdl_wait.
 * Compiled for sm_90 only: elsewhere (the host runtime runs a stream's grids one after
 * another) both are nothing. */
__device__ __forceinline__ void cuda_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void cuda_pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

__device__ __forceinline__ float cuda_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The end of a GEMV row of W against M rows of x (mr of them real): each warp's lane sums,
 * added over the warp, then over the wpr warps sharing the row in part order (red: a
 * [warps][M] scratch in shared memory), written by lane 0 of part 0 to out[(r0 + t) · n +
 * row]. A fixed order, so the sum of a row is the same in every launch. Every warp of the
 * block calls it for every step (barriers when wpr > 1). */
template <int M>
__device__ __forceinline__ void cuda_gemv_store(float (*red)[M], float *acc, const cuda_seg_row &r,
                                                int warp, int lane, int part, int wpr, int r0,
                                                int mr) {
#pragma unroll
    for (int t = 0; t < M; t++) acc[t] = cuda_warp_sum(acc[t]);
    if (wpr == 1) {
        if (lane == 0 && r.row < r.n)
#pragma unroll
            for (int t = 0; t < M; t++)
                if (t < mr) r.out[(size_t)(r0 + t) * r.n + r.row] = acc[t];
        return;
    }
    if (lane == 0)
#pragma unroll
        for (int t = 0; t < M; t++) red[warp][t] = acc[t];
    __syncthreads();
    if (part == 0 && lane == 0 && r.row < r.n)
#pragma unroll
        for (int t = 0; t < M; t++) {
            float v = 0.0f;
            for (int q = 0; q < wpr; q++) v += red[warp + q][t];
            if (t < mr) r.out[(size_t)(r0 + t) * r.n + r.row] = v;
        }
    __syncthreads(); /* red is refilled by the next row */
}
__device__ __forceinline__ float cuda_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* The same formulas as the CPU reference (kernels/cpu/cpu_ops.c), with accurate expf. */
__device__ __forceinline__ float cuda_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float cuda_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float cuda_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Blocks for a grid-stride loop over n items. */
static inline unsigned cuda_blocks(size_t n, int threads, int cap) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    if (b < 1) b = 1;
    return (unsigned)(b > (size_t)cap ? (size_t)cap : b);
}

/* ---- op entries, one family per file ---- */
/* cuda_deltanet_chunk.cu: the fused gdn's chunked form. cuda_gdc_min gives the shortest run
 * it takes in this step (INT_MAX: none, the model is not bf16 or the head shape is not its);
 * cuda_gdc runs it for the sequences at least that long, the recurrent kernel the others. */
int cuda_gdc_min(const cuda_impl *c, const bk_batch *bt, int dk, int dv);
void cuda_gdc(cuda_impl *c, float *out, const float *q, const float *k, int ld_qk, const float *v,
              int ld_v, const float *a, const float *bb, const bk_weight *A_log,
              const bk_weight *dt_bias, float *state, const bk_batch *bt, int Hk, int Hv, int dk,
              int dv, float q_scale, int vmap);
/* The ssd op's arguments as its kernels take them (cuda_ssd.cu, cuda_ssd_chunk.cu). */
typedef struct ssd_args {
    float *y;
    const float *x, *B, *C, *dt;
    int ld_x, ld_bc, ld_dt;
    const void *A_log, *dt_bias, *D;
    int adt, bdt, ddt;
    float *state;
    const int32_t *start, *len, *slot;
    int H, P, N, G;
    float dt_min;
    int long_from; /* sequences of this many tokens or more are cuda_ssc's */
} ssd_args;
/* cuda_ssd_chunk.cu: the ssd op's chunked form, chosen as cuda_gdc's above; it takes the
 * sequences of a at least cuda_ssc_min long. */
int cuda_ssc_min(const cuda_impl *c, const bk_batch *bt, int P, int N);
void cuda_ssc(cuda_impl *c, const ssd_args *a, int n_seqs);
/* cuda_attention_flash.cu: the attention op's tensor-core prefill over a bf16 cache,
 * chosen as cuda_gdc's above. */
int cuda_fa_min(const cuda_impl *c, const bk_kv *kv, const bk_batch *bt, int D);
void cuda_fa(cuda_impl *c, float *out, const float *q, const bk_kv *kv, const bk_batch *bt,
             const cuda_kv_map &map, int H, int KV, int D, float scale, int window, float softcap);
/* cuda_elementwise.cu */
/* Opts the GEMV kernels in to their shared memory (cuda_matmul.cu); at create. */
cudaError_t cuda_matmul_setup(cuda_impl *c);
void cuda_embed(backend *b, float *out, const bk_weight *table, const int32_t *ids, int m);
void cuda_embed_fed(backend *b, float *out, const bk_weight *table, const int32_t *ids,
                    const int32_t *fed, const bk_batch *bt, int m);
void cuda_add(backend *b, float *out, const float *a, const float *x, size_t n);
void cuda_silu_mul(backend *b, float *out, const float *gate, const float *up, int m, int n);
void cuda_gelu_tanh_mul(backend *b, float *out, const float *gate, const float *up, int m, int n);
void cuda_sigmoid_mul(backend *b, float *x, const float *gate, size_t n);
void cuda_relu2(backend *b, float *x, size_t n);
void cuda_scale(backend *b, float *x, float alpha, const bk_weight *s, size_t n);
void cuda_softcap(backend *b, float *x, float cap, size_t n);
void cuda_split_halves(backend *b, float *a, float *g, const float *in, int rows, int half);
void cuda_gather_rows(backend *b, float *out, const float *x, const int32_t *rows, int n,
                      int width);
void cuda_gdn_gates(backend *b, float *g, float *beta, const float *a, const float *bb,
                    const bk_weight *A_log, const bk_weight *dt_bias, int m, int Hv);
/* cuda_norm.cu */
void cuda_rmsnorm(backend *b, float *out, const float *x, const bk_weight *w, int m, int n, int ld,
                  float eps, int mode);
void cuda_rmsnorm_gated(backend *b, float *out, const float *x, const float *z, const bk_weight *w,
                        int m, int n, float eps);
void cuda_rmsnorm_gated_grouped(backend *b, float *out, const float *x, const float *z,
                                const bk_weight *w, int m, int width, int group, float eps);
void cuda_residual(backend *b, float *x, float *xn, const float *delta, const bk_weight *dnorm,
                   int dmode, const bk_weight *s, const bk_weight *nw, int nmode, int m, int n,
                   float eps);
void cuda_l2norm(backend *b, float *x, int m, int n, int ld, int gpr, float eps, float scale);
/* cuda_rope.cu */
void cuda_rope(backend *b, float *x, const bk_batch *bt, const float *inv_freq, int heads, int hd,
               int rot, int ld);
/* cuda_qmatmul.cu: out[j] = x · w[j]ᵀ (j < n_w) for weights of one block dtype and k, any m;
 * called by the matmul ops after they entered the op */
void cuda_qmatmul(cuda_impl *c, float *const *out, const float *x, const bk_weight *const *w,
                  int n_w, int m);
/* cuda_qgemv.cu: the same for Q8_0 and Q4_K at the shapes it takes, given cuda_qmatmul's
 * checked segment table (one dtype dt, rows of k, 16-byte aligned); -1 (nothing launched)
 * for the others */
int cuda_qgemv(cuda_impl *c, const cuda_segs &sg, int dt, const float *x, int m, int k);
cudaError_t cuda_qgemv_setup(void);
/* cuda_matmul.cu */
void cuda_matmul(backend *b, float *out, const float *x, const bk_weight *w, int m);
void cuda_matmul_n(backend *b, float *const *out, const float *x, const bk_weight *const *w,
                   int n_w, int m);
void cuda_matmul_glu(backend *b, float *out, float *g, float *u, const bk_weight *w, int m,
                     int act);
void cuda_matmul_gnorm(backend *b, float *out, float *x, const float *z, const bk_weight *nw,
                       int group, float eps, int mode, const bk_weight *w, int m);
/* cuda_attention.cu */
void cuda_kv_store(backend *b, const bk_kv *kv, const float *k, const float *v, const bk_batch *bt);
void cuda_attention(backend *b, float *out, const float *q, const bk_kv *kv, const bk_batch *bt,
                    int H, int KV, int D, float scale, int window, float softcap);
void cuda_attn_prep(backend *b, float *q, float *gate, const float *qg, float *k, float *v,
                    const bk_kv *kv, const bk_batch *bt, const bk_qkv_prep *p);
/* cuda_conv.cu */
void cuda_conv1d(backend *b, float *out, const float *x, int ld_x, const bk_weight *w,
                 const bk_weight *bias, float *state, const bk_batch *bt, int C, int K, int act);
/* cuda_deltanet.cu */
void cuda_gated_delta(backend *b, float *out, const float *q, const float *k, int ld_qk,
                      const float *v, int ld_v, const float *g, const float *beta, float *state,
                      const bk_batch *bt, int Hk, int Hv, int dk, int dv, int vmap);
void cuda_gdn(backend *b, float *out, float *q, float *k, int ld_qk, const float *v, int ld_v,
              const float *a, const float *bb, const bk_weight *A_log, const bk_weight *dt_bias,
              float *g, float *beta, float *state, const bk_batch *bt, int Hk, int Hv, int dk,
              int dv, float q_scale, int vmap);
/* cuda_ssd.cu */
void cuda_ssd(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
              int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
              const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt, int H,
              int P, int N, int G, float dt_min);
/* cuda_profile.cu: the profile slots of the ops table, and the forward's start */
void cuda_profile(backend *b, int on);
int cuda_profile_read(backend *b, bk_op_time *out, int max);
void cuda_prof_forward(cuda_impl *c);
/* cuda_membw.cu */
double cuda_read_bandwidth(backend *b, size_t bytes);
/* cuda_graph.cu: the graph slots of the ops table (kernels/backend.h), and the completion
 * of every graph in flight that an eager op needing the staging ring or the bounce buffer
 * calls first (0, or the sticky error's code) */
int cuda_flights_drain(cuda_impl *c);
int cuda_graph_begin(backend *b, uint64_t key, strata_err *err);
int cuda_graph_end(backend *b, int wait, strata_err *err);
int cuda_graph_sync(backend *b, strata_err *err);
void cuda_graph_clear(backend *b);
/* cuda_sample.cu */
void cuda_sample(backend *b, bk_sample_res *res, float *logits, const bk_sample_req *req, int m,
                 int n);

#endif
