/* cuda_elementwise.cu - the CUDA backend's elementwise and row-copy ops: add, the gated
 * activations (silu, gelu_tanh, sigmoid), relu², scale, softcap, split_halves,
 * gather_rows, embed (and embed_fed) and the DeltaNet gates.
 *
 * Each is a grid-stride loop, memory-bound and coalesced; the math is the CPU reference's
 * formula (kernels/cpu/cpu_ops.c) with accurate expf / tanhf, so results agree to a few
 * ulp. Host-memory inputs (embed ids, gather rows) go through the staging ring. */
#include "kernels/cuda/cuda_quant.cuh"

enum { EW_CAP = 65535 }; /* grid-stride: at most this many blocks */

/* ---- kernels ---- */

__global__ void ew_add(float *__restrict__ out, const float *a, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + x[i];
}

/* kind 0: silu(gate)·up; 1: gelu_tanh(gate)·up. out may alias gate (same index). */
__global__ void ew_glu(float *out, const float *gate, const float *up, size_t n, int kind) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = gate[i], a;
        if (kind == 0) {
            a = cuda_silu(g);
        } else { /* 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) */
            const float k = 0.7978845608028654f;
            a = 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g)));
        }
        out[i] = a * up[i];
    }
}

__global__ void ew_sigmoid_mul(float *x, const float *gate, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= cuda_sigmoid(gate[i]);
}

__global__ void ew_relu2(float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = fmaxf(x[i], 0.0f);
        x[i] = v * v;
    }
}

/* s: a 1-element weight of dtype sdt, or NULL. */
__global__ void ew_scale(float *x, float alpha, const void *s, int sdt, size_t n) {
    float f = s ? alpha * cuda_wget(s, sdt, 0) : alpha;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= f;
}

__global__ void ew_softcap(float *x, float cap, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

__global__ void ew_split(float *__restrict__ a, float *__restrict__ g, const float *__restrict__ in,
                         size_t rows, int half) {
    size_t n = rows * (size_t)half;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)half, j = i % (size_t)half;
        a[i] = in[r * 2 * half + j];
        g[i] = in[r * 2 * half + half + j];
    }
}

/* out[i,:] = x[rows[i],:] when out and x do not overlap. */
__global__ void ew_gather(float *__restrict__ out, const float *__restrict__ x, const int32_t *rows,
                          int n, int width) {
    size_t total = (size_t)n * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)width, j = i % (size_t)width;
        out[i] = x[(size_t)rows[r] * width + j];
    }
}

/* Overlapping gather: one block, rows in order, each row a memmove through registers in
 * chunks of blockDim floats taken in the direction that never overwrites unread source. */
__global__ void ew_gather_serial(float *out, const float *x, const int32_t *rows, int n,
                                 int width) {
    for (int r = 0; r < n; r++) {
        float *d = out + (size_t)r * width;
        const float *s = x + (size_t)rows[r] * width;
        if (d == s) continue;
        int fwd = d < s;
        for (int c0 = 0; c0 < width; c0 += blockDim.x) {
            int base = fwd ? c0 : width - c0 - (int)blockDim.x;
            int j = base + (int)threadIdx.x;
            float v = j >= 0 && j < width ? s[j] : 0.0f;
            __syncthreads();
            if (j >= 0 && j < width) d[j] = v;
            __syncthreads();
        }
    }
}

/* fed NULL: every id is in ids; else a negative id is fed[slot[tok_seq[r]]] (embed_fed). */
__global__ void ew_embed(float *__restrict__ out, const void *__restrict__ table, int dt,
                         const int32_t *ids, const int32_t *fed, const int32_t *slot,
                         const int32_t *tok_seq, int m, int n) {
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)n, j = i % (size_t)n;
        int32_t id = ids[r];
        if (id < 0 && fed) id = fed[slot[tok_seq[r]]];
        size_t e = (size_t)id * n + j; /* a quantized table's rows are whole blocks */
        out[i] = cuda_is_block(dt) ? cuda_qget(table, dt, e) : cuda_wget(table, dt, e);
    }
}

__global__ void ew_gates(float *__restrict__ g, float *__restrict__ beta, const float *a,
                         const float *bb, const void *A_log, int adt, const void *dt_bias, int bdt,
                         int m, int Hv) {
    size_t n = (size_t)m * Hv;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int h = (int)(i % (size_t)Hv);
        g[i] = -expf(cuda_wget(A_log, adt, h)) * cuda_softplus(a[i] + cuda_wget(dt_bias, bdt, h));
        beta[i] = cuda_sigmoid(bb[i]);
    }
}

/* ---- launchers ---- */

#define EW_GRID(n) cuda_blocks((n), CUDA_BLOCK, EW_CAP), CUDA_BLOCK, 0, c->stream

void cuda_add(backend *b, float *out, const float *a, const float *x, size_t n) {
    cuda_impl *c = cuda_impl_of(b);
    if (!n || !cuda_enter(c, CUDA_OP_ADD, (const void *)out, (const void *)a, (const void *)x, n))
        return;
    ew_add<<<EW_GRID(n)>>>(out, a, x, n);
    cuda_check_launch(c, "add");
}

static void cuda_glu(backend *b, float *out, const float *gate, const float *up, int m, int n,
                     int kind) {
    cuda_impl *c = cuda_impl_of(b);
    size_t t = (size_t)m * n;
    if (!t || !cuda_enter(c, kind ? CUDA_OP_GELU_MUL : CUDA_OP_SILU_MUL, (const void *)out,
                          (const void *)gate, (const void *)up, t))
        return;
    ew_glu<<<EW_GRID(t)>>>(out, gate, up, t, kind);
    cuda_check_launch(c, kind ? "gelu_tanh_mul" : "silu_mul");
}

void cuda_silu_mul(backend *b, float *out, const float *gate, const float *up, int m, int n) {
    cuda_glu(b, out, gate, up, m, n, 0);
}

void cuda_gelu_tanh_mul(backend *b, float *out, const float *gate, const float *up, int m, int n) {
    cuda_glu(b, out, gate, up, m, n, 1);
}

void cuda_sigmoid_mul(backend *b, float *x, const float *gate, size_t n) {
    cuda_impl *c = cuda_impl_of(b);
    if (!n || !cuda_enter(c, CUDA_OP_SIGMOID_MUL, (const void *)x, (const void *)gate, n)) return;
    ew_sigmoid_mul<<<EW_GRID(n)>>>(x, gate, n);
    cuda_check_launch(c, "sigmoid_mul");
}

void cuda_relu2(backend *b, float *x, size_t n) {
    cuda_impl *c = cuda_impl_of(b);
    if (!n || !cuda_enter(c, CUDA_OP_RELU2, (const void *)x, n)) return;
    ew_relu2<<<EW_GRID(n)>>>(x, n);
    cuda_check_launch(c, "relu2");
}

void cuda_scale(backend *b, float *x, float alpha, const bk_weight *s, size_t n) {
    cuda_impl *c = cuda_impl_of(b);
    const void *sp = s ? s->data : NULL;
    if (!n || !cuda_enter(c, CUDA_OP_SCALE, (const void *)x, alpha, sp, n)) return;
    ew_scale<<<EW_GRID(n)>>>(x, alpha, sp, s ? (int)s->dt : 0, n);
    cuda_check_launch(c, "scale");
}

void cuda_softcap(backend *b, float *x, float cap, size_t n) {
    cuda_impl *c = cuda_impl_of(b);
    if (!n || !cuda_enter(c, CUDA_OP_SOFTCAP, (const void *)x, cap, n)) return;
    ew_softcap<<<EW_GRID(n)>>>(x, cap, n);
    cuda_check_launch(c, "softcap");
}

void cuda_split_halves(backend *b, float *a, float *g, const float *in, int rows, int half) {
    cuda_impl *c = cuda_impl_of(b);
    size_t t = (size_t)rows * half;
    if (!t || !cuda_enter(c, CUDA_OP_SPLIT, (const void *)a, (const void *)g, (const void *)in,
                          rows, half))
        return;
    ew_split<<<EW_GRID(t)>>>(a, g, in, (size_t)rows, half);
    cuda_check_launch(c, "split_halves");
}

void cuda_gather_rows(backend *b, float *out, const float *x, const int32_t *rows, int n,
                      int width) {
    cuda_impl *c = cuda_impl_of(b);
    size_t t = (size_t)n * width;
    if (!t) return;
    /* Overlap is decided from addresses and the host-side rows; it is part of the graph
     * signature, so a replay that would need the other kernel is refused. */
    int32_t max_row = 0;
    for (int i = 0; i < n; i++) max_row = rows[i] > max_row ? rows[i] : max_row;
    const float *x_end = x + ((size_t)max_row + 1) * width;
    int overlap = out < x_end && x < out + t;
    int launch =
        cuda_enter(c, CUDA_OP_GATHER, (const void *)out, (const void *)x, n, width, overlap);
    const int32_t *d = (const int32_t *)cuda_stage(c, rows, sizeof(int32_t) * (size_t)n);
    if (!launch) return;
    if (overlap) ew_gather_serial<<<1, CUDA_BLOCK, 0, c->stream>>>(out, x, d, n, width);
    else ew_gather<<<EW_GRID(t)>>>(out, x, d, n, width);
    cuda_check_launch(c, "gather_rows");
}

void cuda_embed(backend *b, float *out, const bk_weight *table, const int32_t *ids, int m) {
    cuda_impl *c = cuda_impl_of(b);
    int n = (int)table->shape[1];
    size_t t = (size_t)m * n;
    if (!t) return;
    int launch = cuda_enter(c, CUDA_OP_EMBED, (const void *)out, table->data, m, n);
    const int32_t *d = (const int32_t *)cuda_stage(c, ids, sizeof(int32_t) * (size_t)m);
    if (!launch) return;
    const int32_t *none = NULL;
    ew_embed<<<EW_GRID(t)>>>(out, table->data, (int)table->dt, d, none, none, none, m, n);
    cuda_check_launch(c, "embed");
}

void cuda_embed_fed(backend *b, float *out, const bk_weight *table, const int32_t *ids,
                    const int32_t *fed, const bk_batch *bt, int m) {
    cuda_impl *c = cuda_impl_of(b);
    int n = (int)table->shape[1];
    size_t t = (size_t)m * n;
    if (!t) return;
    const cuda_bdev *bd = (const cuda_bdev *)bt->dev;
    int launch = cuda_enter(c, CUDA_OP_EMBED_FED, (const void *)out, table->data, (const void *)fed,
                            (const void *)bd->slot, m, n);
    const int32_t *d = (const int32_t *)cuda_stage(c, ids, sizeof(int32_t) * (size_t)m);
    if (!launch) return;
    ew_embed<<<EW_GRID(t)>>>(out, table->data, (int)table->dt, d, fed, bd->slot, bd->tok_seq, m, n);
    cuda_check_launch(c, "embed_fed");
}

void cuda_gdn_gates(backend *b, float *g, float *beta, const float *a, const float *bb,
                    const bk_weight *A_log, const bk_weight *dt_bias, int m, int Hv) {
    cuda_impl *c = cuda_impl_of(b);
    size_t t = (size_t)m * Hv;
    if (!t || !cuda_enter(c, CUDA_OP_GATES, (const void *)g, (const void *)beta, (const void *)a,
                          (const void *)bb, A_log->data, dt_bias->data, m, Hv))
        return;
    ew_gates<<<EW_GRID(t)>>>(g, beta, a, bb, A_log->data, (int)A_log->dt, dt_bias->data,
                             (int)dt_bias->dt, m, Hv);
    cuda_check_launch(c, "gdn_gates");
}
