/* cuda_backend.cu - the CUDA backend: create/destroy, device memory, weight upload, the
 * batch mirror, the staging ring for host-side op inputs, and the vtable.
 *
 * Memory plan (design.md, Caches): weights are uploaded once in their checkpoint dtype by
 * weight_prepare; the model allocates its kv caches, recurrent states and activations
 * through alloc at open, sized for max_seqs x ctx_size, and nothing is allocated after
 * that: every scratch an op needs (GEMM activations, attention partials, staging) is made
 * here at create with a fixed size, and ops that could outgrow it work in chunks.
 * alloc returns NULL when the device is full (the model names the buffer; the caller can
 * add the device's numbers from the memory slot), and every allocation is counted for
 * the peak it reports. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_quant.cuh"

void cuda_fail(cuda_impl *c, const char *what, cudaError_t e) {
    if (c->mode == CUDA_MODE_CAPTURE) {
        if (!c->graph_bad)
            snprintf(c->graph_msg, sizeof c->graph_msg, "%s: %s", what, cudaGetErrorString(e));
        c->graph_bad = 1;
        return;
    }
    if (c->err_code) return;
    c->err_code = STRATA_EDEVICE;
    snprintf(c->err_msg, sizeof c->err_msg, "cuda %s: %s", what, cudaGetErrorString(e));
}

/* ---- allocation records: sizes for the peak and for weight_release ---- */

static int cuda_track(cuda_impl *c, void *p, size_t bytes) {
    if (c->n_allocs == c->cap_allocs) {
        size_t nc = c->cap_allocs ? 2 * c->cap_allocs : 256;
        cuda_alloc_rec *n = (cuda_alloc_rec *)realloc(c->allocs, nc * sizeof *n);
        if (!n) return -1;
        c->allocs = n;
        c->cap_allocs = nc;
    }
    c->allocs[c->n_allocs++] = cuda_alloc_rec{p, bytes};
    c->cur_bytes += bytes;
    if (c->cur_bytes > c->peak_bytes) c->peak_bytes = c->cur_bytes;
    return 0;
}

/* Forgets p; returns 0 when p was not allocated here (a view into a weight, say). */
static int cuda_untrack(cuda_impl *c, void *p) {
    for (size_t i = c->n_allocs; i-- > 0;) {
        if (c->allocs[i].p != p) continue;
        c->cur_bytes -= c->allocs[i].bytes;
        c->allocs[i] = c->allocs[--c->n_allocs];
        return 1;
    }
    return 0;
}

/* cudaMalloc + record; NULL when the device is full (nothing sticky is recorded: running
 * out of memory at load is an answer for the caller, not a broken device). */
static void *cuda_dev_alloc(cuda_impl *c, size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (cuda_track(c, p, bytes)) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

/* ---- staging ring ---- */

/* Copies the n parts, back to back, into the ring; returns the device address. */
static const void *cuda_stage_parts(cuda_impl *c, int n, const void *const *src,
                                    const size_t *part) {
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += part[i];
    size_t need = (bytes + 255) & ~(size_t)255;
    if (need > CUDA_STAGE_BYTES) { /* callers bound their sizes; this is a bug */
        cuda_fail(c, "staging", cudaErrorInvalidValue);
        c->graph_bad = 1;
        return c->stage_d;
    }
    if (c->mode == CUDA_MODE_EAGER && c->n_flights) { /* a graph may read any part of it */
        cuda_flights_drain(c);
        c->stage_off = 0;
    }
    if (c->stage_off + need > c->stage_end) {
        if (c->mode != CUDA_MODE_EAGER) { /* offsets of a graph must not wrap */
            c->graph_bad = 1;
            return c->stage_d;
        }
        cudaStreamSynchronize(c->stream);
        c->stage_off = 0;
    }
    size_t off = c->stage_off, at = off;
    c->stage_off += need;
    for (int i = 0; i < n; i++) {
        if (part[i]) memcpy(c->stage_h + at, src[i], part[i]);
        at += part[i];
    }
    if (c->mode != CUDA_MODE_REPLAY && bytes) {
        cudaError_t e = cudaMemcpyAsync(c->stage_d + off, c->stage_h + off, bytes,
                                        cudaMemcpyHostToDevice, c->stream);
        if (e != cudaSuccess) cuda_fail(c, "staging copy", e);
        if (c->mode == CUDA_MODE_EAGER) {
            cudaEventRecord(c->stage_ev, c->stream);
            c->stage_ev_live = 1;
        }
    }
    return c->stage_d + off;
}

const void *cuda_stage(cuda_impl *c, const void *src, size_t bytes) {
    return cuda_stage_parts(c, 1, &src, &bytes);
}

/* Rewinds the ring at the start of an eager forward once its host side is free again.
 * Under a graph, graph_begin has rewound it: offsets taken since then are in the graph. */
static void cuda_stage_rewind(cuda_impl *c) {
    if (c->mode != CUDA_MODE_EAGER) return;
    cuda_flights_drain(c);
    c->stage_end = CUDA_STAGE_BYTES;
    if (c->stage_ev_live) {
        cudaEventSynchronize(c->stage_ev);
        c->stage_ev_live = 0;
    }
    c->stage_off = 0;
}

/* ---- memory ops ---- */

static void *cuda_alloc(backend *b, size_t bytes) {
    cuda_impl *c = cuda_impl_of(b);
    if (c->mode != CUDA_MODE_EAGER) {
        c->graph_bad = 1;
        return NULL;
    }
    cuda_use(c);
    void *p = cuda_dev_alloc(c, bytes);
    if (!p) return NULL;
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, c->stream);
    if (e != cudaSuccess) cuda_fail(c, "alloc memset", e);
    return p;
}

static void cuda_free_op(backend *b, void *p) {
    cuda_impl *c = cuda_impl_of(b);
    if (!p) return;
    if (c->mode != CUDA_MODE_EAGER) { /* never inside a graph: freed at a safe point only */
        c->graph_bad = 1;
        return;
    }
    cuda_use(c);
    cudaStreamSynchronize(c->stream); /* pending ops may still read p */
    if (cuda_untrack(c, p)) cudaFree(p);
}

static void cuda_upload(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_impl *c = cuda_impl_of(b);
    if (!bytes) return;
    cuda_use(c);
    int launch = cuda_enter(c, CUDA_OP_UPLOAD, (const void *)dst, bytes);
    if (c->mode != CUDA_MODE_EAGER) { /* a graph copies from pinned memory it can refill */
        const void *d = cuda_stage(c, src, bytes);
        if (launch) {
            cudaError_t e = cudaMemcpyAsync(dst, d, bytes, cudaMemcpyDeviceToDevice, c->stream);
            if (e != cudaSuccess) cuda_fail(c, "upload", e);
        }
        return;
    }
    /* Pageable source: the call returns once src has been staged, so src may change. */
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess) cuda_fail(c, "upload", e);
}

static void cuda_download(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_impl *c = cuda_impl_of(b);
    if (!bytes) return;
    cuda_use(c);
    int launch = cuda_enter(c, CUDA_OP_DOWNLOAD, src, bytes);
    if (c->mode != CUDA_MODE_EAGER) { /* into the bounce buffer; graph_end copies out */
        size_t off = c->bounce_off;
        if (off + bytes > c->bounce_end || c->n_pending == CUDA_PENDING_MAX) {
            c->graph_bad = 1;
            return;
        }
        c->bounce_off += (bytes + 255) & ~(size_t)255;
        c->pending[c->n_pending++] = cuda_pending{dst, off, bytes};
        if (launch) {
            cudaError_t e =
                cudaMemcpyAsync(c->bounce + off, src, bytes, cudaMemcpyDeviceToHost, c->stream);
            if (e != cudaSuccess) cuda_fail(c, "download", e);
        }
        return;
    }
    /* Pinned bounce: a pageable D2H copy runs at a fraction of the link speed. A graph in
     * flight may still copy into it, and its downloads are owed first. */
    cuda_flights_drain(c);
    cudaError_t e;
    if (bytes <= CUDA_BOUNCE_BYTES) {
        e = cudaMemcpyAsync(c->bounce, src, bytes, cudaMemcpyDeviceToHost, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e == cudaSuccess) memcpy(dst, c->bounce, bytes);
    } else {
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    }
    if (e != cudaSuccess) {
        cuda_fail(c, "download", e);
        memset(dst, 0, bytes); /* never hand back stale host memory as results */
    }
}

static void cuda_zero(backend *b, void *dst, size_t bytes) {
    cuda_impl *c = cuda_impl_of(b);
    if (!bytes || !cuda_enter(c, CUDA_OP_ZERO, (const void *)dst, bytes)) return;
    cudaError_t e = cudaMemsetAsync(dst, 0, bytes, c->stream);
    if (e != cudaSuccess) cuda_fail(c, "zero", e);
}

/* Device to device on the stream, after every op queued before it (graphs in flight
 * included) and before every later one; nothing staged, so it needs no part of the ring.
 * Under a graph it is captured (and skipped by replays) like zero. */
static void cuda_copy(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_impl *c = cuda_impl_of(b);
    if (!bytes) return;
    cuda_use(c);
    if (!cuda_enter(c, CUDA_OP_COPY, (const void *)dst, src, bytes)) return;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
    if (e != cudaSuccess) cuda_fail(c, "copy", e);
}

/* A block-typed weight (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K) is uploaded as its blocks are: a matrix of
 * whole blocks per row, read by the matmuls and embed only (cuda_supports). Its allocation
 * is padded to 16 bytes so the quantized GEMV's 16-byte loads of a row's last tile stay
 * inside it (cuda_qmatmul.cu). */
static int cuda_weight_prepare(backend *b, bk_weight *w, strata_err *err) {
    cuda_impl *c = cuda_impl_of(b);
    int blk = dtype_block_elems(w->dt);
    if (blk > 1 && !cuda_is_block(w->dt))
        return strata_err_set(err, STRATA_EUNSUPPORTED, "cuda backend: no kernels for %s weights",
                              dtype_name(w->dt));
    if (blk > 1 && (w->ndim != 2 || w->shape[1] % blk || w->shape[1] > INT_MAX / 2))
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "cuda backend: a %s weight must be a matrix whose rows are whole "
                              "blocks of %d",
                              dtype_name(w->dt), blk);
    if (blk <= 1 && w->dt != DTYPE_F32 && w->dt != DTYPE_BF16 && w->dt != DTYPE_F16)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "cuda backend: weight dtype %s",
                              dtype_name(w->dt));
    if (c->mode != CUDA_MODE_EAGER)
        return strata_err_set(err, STRATA_ESTATE, "cuda backend: weight upload during a graph");
    size_t n = 1;
    for (int i = 0; i < w->ndim; i++) n *= (size_t)w->shape[i];
    size_t bytes =
        blk > 1 ? (size_t)w->shape[0] * dtype_row_bytes(w->dt, w->shape[1]) : n * dtype_size(w->dt);
    size_t pad = blk > 1 ? (16 - bytes % 16) % 16 : 0;
    cuda_use(c);
    void *p = cuda_dev_alloc(c, bytes + pad);
    if (!p) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return strata_err_set(err, STRATA_ENOMEM,
                              "cuda: no device memory for a weight of %zu MiB (%zu MiB free of %zu "
                              "MiB; %zu MiB held by strata)",
                              bytes >> 20, fr >> 20, tot >> 20, c->cur_bytes >> 20);
    }
    /* On the backend's stream, so every later op is ordered after the copy (a plain
     * cudaMemcpy runs on the legacy stream, which our non-blocking stream does not wait
     * for). From pageable memory the call returns once the source has been staged, so a
     * mmapped checkpoint may be unmapped right after. */
    cudaError_t e = cudaMemcpyAsync(p, w->data, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess && pad) e = cudaMemsetAsync((char *)p + bytes, 0, pad, c->stream);
    if (e != cudaSuccess) {
        cuda_untrack(c, p);
        cudaFree(p);
        return strata_err_set(err, STRATA_EDEVICE, "cuda: weight upload: %s",
                              cudaGetErrorString(e));
    }
    w->data = p;
    return 0;
}

static void cuda_weight_release(backend *b, bk_weight *w) {
    cuda_impl *c = cuda_impl_of(b);
    void *p = (void *)w->data;
    if (!p) return;
    cuda_use(c);
    cudaStreamSynchronize(c->stream);
    if (cuda_untrack(c, p)) cudaFree(p);
    w->data = NULL;
}

/* Pins the whole pages under host's data, read-only (a checkpoint's mmapped, read-only
 * pages may be pinned only so), and takes the device's address of them. */
static int cuda_weight_map(backend *b, const bk_weight *host, bk_weight *dev, strata_err *err) {
    cuda_impl *c = cuda_impl_of(b);
    if (c->mode != CUDA_MODE_EAGER)
        return strata_err_set(err, STRATA_ESTATE, "cuda backend: weight_map during a graph");
    if (c->n_maps == CUDA_MAPS_MAX)
        return strata_err_set(err, STRATA_ERANGE, "cuda: more than %d mapped weights",
                              CUDA_MAPS_MAX);
    if (!dtype_size(host->dt)) /* a block type: no kernel here reads one */
        return strata_err_set(err, STRATA_EUNSUPPORTED, "cuda backend: mapped weight dtype %s",
                              dtype_name(host->dt));
    size_t n = 1;
    for (int i = 0; i < host->ndim; i++) n *= (size_t)host->shape[i];
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), at = (uintptr_t)host->data;
    uintptr_t base = at & ~(page - 1),
              end = (at + n * dtype_size(host->dt) + page - 1) & ~(page - 1);
    cuda_use(c);
    cudaError_t e = cudaHostRegister((void *)base, end - base,
                                     cudaHostRegisterMapped | cudaHostRegisterReadOnly);
    void *d = NULL;
    if (e == cudaSuccess) {
        e = cudaHostGetDevicePointer(&d, (void *)base, 0);
        if (e != cudaSuccess) cudaHostUnregister((void *)base);
    }
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the caller reads the weight on the host instead */
        return strata_err_set(err, STRATA_EDEVICE, "cuda: cannot map %zu MiB of host memory: %s",
                              (size_t)(end - base) >> 20, cudaGetErrorString(e));
    }
    *dev = *host;
    dev->data = (const char *)d + (at - base);
    c->maps[c->n_maps++] = cuda_map_rec{dev->data, (void *)base};
    return 0;
}

static void cuda_weight_unmap(backend *b, bk_weight *dev) {
    cuda_impl *c = cuda_impl_of(b);
    for (int i = 0; i < c->n_maps; i++) {
        if (c->maps[i].dev != dev->data) continue;
        cuda_use(c);
        cudaStreamSynchronize(c->stream); /* queued ops may still read it */
        cudaHostUnregister(c->maps[i].base);
        c->maps[i] = c->maps[--c->n_maps];
        dev->data = NULL;
        return;
    }
}

static int cuda_batch_prepare(backend *b, bk_batch *bt, strata_err *err) {
    cuda_impl *c = cuda_impl_of(b);
    if (c->err_code) return strata_err_set(err, c->err_code, "%s", c->err_msg);
    cuda_use(c);
    cuda_prof_forward(c);
    /* blk_w is in the signature: it sizes the staged copy a replay refills. */
    cuda_enter(c, CUDA_OP_BATCH, bt->n_tokens, bt->n_seqs, bt->blk_w);
    cuda_stage_rewind(c);
    int ns = bt->n_seqs, nt = bt->n_tokens, bw = bt->blk_w;
    if (bw < 0 || (bw > 0 && !bt->blk))
        return strata_err_set(err, STRATA_EINVALID, "cuda: a block table of width %d without rows",
                              bw);
    /* One staged block: slot, start, len, pos0 [ns], tok_pos, tok_seq [nt], then the block
     * table [ns · blk_w]; a graph's share of the ring (half) must hold it too. */
    size_t sb = sizeof(int32_t) * (size_t)ns, tb = sizeof(int32_t) * (size_t)nt;
    size_t bb = sizeof(int32_t) * (size_t)ns * (size_t)bw;
    if (4 * sb + 2 * tb + bb > CUDA_STAGE_BYTES / 4)
        return strata_err_set(err, STRATA_ERANGE,
                              "cuda: a step of %d tokens and %d sequences with %d block table "
                              "entries each is too large (%zu KiB of batch arrays, at most %d KiB)",
                              nt, ns, bw, (4 * sb + 2 * tb + bb) >> 10, CUDA_STAGE_BYTES / 4 >> 10);
    const void *src[7] = {bt->slot,    bt->start,   bt->len, bt->pos0,
                          bt->tok_pos, bt->tok_seq, bt->blk};
    size_t part[7] = {sb, sb, sb, sb, tb, tb, bb};
    const int32_t *d = (const int32_t *)cuda_stage_parts(c, 7, src, part);
    c->bdev =
        cuda_bdev{d, d + ns, d + 2 * ns, d + 3 * ns, d + 4 * ns, d + 4 * ns + nt, NULL, nt, ns, bw};
    if (bw) c->bdev.blk = d + 4 * ns + 2 * nt;
    bt->dev = &c->bdev;
    return 0;
}

/* ---- create / destroy ---- */

static void cuda_destroy(backend *b) {
    if (!b) return;
    cuda_impl *c = cuda_impl_of(b);
    if (c) {
        cuda_use(c);
        if (c->stream) cudaStreamSynchronize(c->stream);
        cuda_graph_clear(b);
        cuda_profile(b, 0);
        for (int i = 0; i < c->n_maps; i++) cudaHostUnregister(c->maps[i].base);
        for (size_t i = 0; i < c->n_allocs; i++) cudaFree(c->allocs[i].p);
        free(c->allocs);
        if (c->blas) cublasDestroy(c->blas);
        cudaFree(c->blas_ws);
        cudaFree(c->act16);
        cudaFree(c->att_part);
        cudaFree(c->smp_max);
        cudaFree(c->smp_arg);
        cudaFree(c->smp_z);
        cudaFree(c->smp_all);
        cudaFree(c->smp_res);
        cudaFree(c->stage_d);
        cudaFreeHost(c->stage_h);
        cudaFreeHost(c->bounce);
        if (c->stage_ev) cudaEventDestroy(c->stage_ev);
        for (int i = 0; i < CUDA_FLIGHT_MAX; i++)
            if (c->flights[i].done) cudaEventDestroy(c->flights[i].done);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
    }
    free(b);
}

static void cuda_memory(const backend *b, backend_mem *m);
static const char *cuda_last_error(const backend *b);

static void cuda_compute_dtype(backend *b, dtype dt) { cuda_impl_of(b)->cdt = dt; }

/* Block-typed weights are read by the matmuls (cuda_qmatmul.cu) and the embeds only;
 * everything else is what backend_supports answers for a backend without this slot: every
 * mandatory op with BF16, F16 or F32 weights and every optional slot this backend fills
 * (all but host_tasks). (backend.c is not linked into this library, so the answer is
 * written out; the op test holds it to backend_supports on a table without this slot.) */
static int cuda_supports(const backend *b, int op, dtype dt) {
    (void)b;
    if (op < 0 || op >= BK_OP_COUNT) return 0;
    if (dtype_block_elems(dt) > 1) /* the formats cuda_qmatmul.cu decodes, no others */
        return cuda_is_block(dt) &&
               (op == BK_OP_MATMUL || op == BK_OP_MATMUL_N || op == BK_OP_MATMUL_GLU ||
                op == BK_OP_MATMUL_GNORM || op == BK_OP_EMBED || op == BK_OP_EMBED_FED);
    if (op >= BK_OP_FIRST_OPTIONAL) return op != BK_OP_HOST_TASKS;
    return dt == DTYPE_COUNT || dt == DTYPE_BF16 || dt == DTYPE_F16 || dt == DTYPE_F32;
}

static void cuda_fill_ops(backend_ops *o) {
    memset(o, 0, sizeof *o);
    o->name = "cuda";
    o->destroy = cuda_destroy;
    o->alloc = cuda_alloc;
    o->free = cuda_free_op;
    o->upload = cuda_upload;
    o->download = cuda_download;
    o->zero = cuda_zero;
    o->copy = cuda_copy;
    o->weight_prepare = cuda_weight_prepare;
    o->weight_release = cuda_weight_release;
    o->batch_prepare = cuda_batch_prepare;
    o->weight_map = cuda_weight_map;
    o->weight_unmap = cuda_weight_unmap;
    o->embed = cuda_embed;
    o->rmsnorm = cuda_rmsnorm;
    o->rmsnorm_gated = cuda_rmsnorm_gated;
    o->residual = cuda_residual;
    o->l2norm = cuda_l2norm;
    o->add = cuda_add;
    o->silu_mul = cuda_silu_mul;
    o->sigmoid_mul = cuda_sigmoid_mul;
    o->split_halves = cuda_split_halves;
    o->gather_rows = cuda_gather_rows;
    o->matmul = cuda_matmul;
    o->matmul_n = cuda_matmul_n;
    o->matmul_glu = cuda_matmul_glu;
    o->matmul_gnorm = cuda_matmul_gnorm;
    o->rope = cuda_rope;
    o->kv_store = cuda_kv_store;
    o->attention = cuda_attention;
    o->attn_prep = cuda_attn_prep;
    o->conv1d = cuda_conv1d;
    o->gdn_gates = cuda_gdn_gates;
    o->gated_delta = cuda_gated_delta;
    o->gdn = cuda_gdn;
    o->gelu_tanh_mul = cuda_gelu_tanh_mul;
    o->relu2 = cuda_relu2;
    o->scale = cuda_scale;
    o->softcap = cuda_softcap;
    o->rmsnorm_gated_grouped = cuda_rmsnorm_gated_grouped;
    o->ssd = cuda_ssd;
    o->read_bandwidth = cuda_read_bandwidth;
    o->memory = cuda_memory;
    o->last_error = cuda_last_error;
    o->graph_begin = cuda_graph_begin;
    o->graph_end = cuda_graph_end;
    o->graph_sync = cuda_graph_sync;
    o->profile = cuda_profile;
    o->profile_read = cuda_profile_read;
    o->graph_clear = cuda_graph_clear;
    o->sample = cuda_sample;
    o->embed_fed = cuda_embed_fed;
    o->compute_dtype = cuda_compute_dtype;
    o->supports = cuda_supports;
}

#define CUDA_TRY(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            cudaGetLastError();                                                                    \
            rc = strata_err_set(err,                                                               \
                                e_ == cudaErrorMemoryAllocation ? STRATA_ENOMEM : STRATA_EDEVICE,  \
                                "cuda: %s: %s", what, cudaGetErrorString(e_));                     \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

CUDA_EXPORT int strata_cuda_backend_create(int device, backend **out, strata_err *err) {
    backend *b = NULL;
    cuda_impl *c = NULL;
    int rc = 0, n_dev = 0;
    cudaDeviceProp prop;
    cublasStatus_t bs;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        cudaGetLastError();
        return strata_err_set(err, STRATA_EDEVICE, "cuda: no usable GPU: %s (%s)",
                              e == cudaErrorInsufficientDriver
                                  ? "no NVIDIA driver, or one older than this CUDA runtime"
                              : e == cudaErrorNoDevice || e == cudaSuccess
                                  ? "no CUDA device found"
                                  : "the runtime did not start",
                              e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= n_dev)
        return strata_err_set(err, STRATA_EDEVICE, "cuda: device %d does not exist (%d found)",
                              device, n_dev);
    b = (backend *)calloc(1, sizeof *b);
    c = (cuda_impl *)calloc(1, sizeof *c);
    if (!b || !c) {
        rc = strata_err_set(err, STRATA_ENOMEM, "cuda backend: out of memory");
        goto fail;
    }
    b->impl = c;
    c->device = device;
    CUDA_TRY(cudaSetDevice(device), "cudaSetDevice");
    CUDA_TRY(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    if (prop.major < 9) { /* the library holds sm_90 code and compute_90 PTX only */
        rc = strata_err_set(err, STRATA_EDEVICE,
                            "cuda: %s is compute capability %d.%d; this build needs 9.0 or newer",
                            prop.name, prop.major, prop.minor);
        goto fail;
    }
    c->n_sm = prop.multiProcessorCount;
    snprintf(c->name, sizeof c->name, "%s", prop.name);
    CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream");
    CUDA_TRY(cudaEventCreateWithFlags(&c->stage_ev, cudaEventDisableTiming), "event");
    for (int i = 0; i < CUDA_FLIGHT_MAX; i++)
        CUDA_TRY(cudaEventCreateWithFlags(&c->flights[i].done, cudaEventDisableTiming), "event");
    c->stage_end = CUDA_STAGE_BYTES;
    CUDA_TRY(cuda_matmul_setup(c), "GEMV shared memory");
    CUDA_TRY(cuda_qgemv_setup(), "quantized GEMV shared memory");
    CUDA_TRY(cudaMalloc(&c->blas_ws, CUDA_BLAS_WS_BYTES), "cuBLAS workspace");
    CUDA_TRY(cudaMalloc((void **)&c->act16, sizeof(__nv_bfloat16) * CUDA_ACT16_ELEMS),
             "GEMM scratch");
    CUDA_TRY(cudaMalloc((void **)&c->att_part, sizeof(float) * CUDA_ATT_PART_FLOATS),
             "attention scratch");
    CUDA_TRY(cudaMalloc((void **)&c->smp_max, sizeof(float) * CUDA_SAMPLE_ROWS * CUDA_SAMPLE_PARTS),
             "sampler scratch");
    CUDA_TRY(cudaMalloc((void **)&c->smp_arg, sizeof(int) * CUDA_SAMPLE_ROWS * CUDA_SAMPLE_PARTS),
             "sampler scratch");
    CUDA_TRY(cudaMalloc((void **)&c->smp_z, sizeof(double) * CUDA_SAMPLE_ROWS * CUDA_SAMPLE_PARTS),
             "sampler scratch");
    CUDA_TRY(
        cudaMalloc((void **)&c->smp_all, sizeof(double) * CUDA_SAMPLE_ROWS * CUDA_SAMPLE_PARTS),
        "sampler scratch");
    CUDA_TRY(cudaMalloc((void **)&c->smp_res, sizeof(bk_sample_res) * CUDA_SAMPLE_ROWS),
             "sampler results");
    CUDA_TRY(cudaMalloc((void **)&c->stage_d, CUDA_STAGE_BYTES), "staging ring");
    CUDA_TRY(cudaHostAlloc((void **)&c->stage_h, CUDA_STAGE_BYTES, cudaHostAllocDefault),
             "pinned staging");
    CUDA_TRY(cudaHostAlloc((void **)&c->bounce, CUDA_BOUNCE_BYTES, cudaHostAllocDefault),
             "pinned bounce");
    c->scratch_bytes =
        CUDA_BLAS_WS_BYTES + sizeof(__nv_bfloat16) * CUDA_ACT16_ELEMS +
        sizeof(float) * CUDA_ATT_PART_FLOATS + CUDA_STAGE_BYTES +
        (sizeof(float) + sizeof(int) + 2 * sizeof(double)) * CUDA_SAMPLE_ROWS * CUDA_SAMPLE_PARTS +
        sizeof(bk_sample_res) * CUDA_SAMPLE_ROWS;
    bs = cublasCreate(&c->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        rc = strata_err_set(err, STRATA_EDEVICE, "cuda: cuBLAS did not start: %s",
                            cublasGetStatusString(bs));
        goto fail;
    }
    /* A fixed workspace keeps cuBLAS from allocating inside a captured graph. */
    bs = cublasSetStream(c->blas, c->stream);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetWorkspace(c->blas, c->blas_ws, CUDA_BLAS_WS_BYTES);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        rc = strata_err_set(err, STRATA_EDEVICE, "cuda: cuBLAS setup failed: %s",
                            cublasGetStatusString(bs));
        goto fail;
    }
    cuda_fill_ops(&c->ops);
    b->ops = &c->ops;
    b->threads = 1;
    *out = b;
    return 0;
fail:
    cuda_destroy(b);
    if (!b) free(c);
    return rc;
}

/* ---- optional slots ---- */

static void cuda_memory(const backend *b, backend_mem *m) {
    const cuda_impl *c = (const cuda_impl *)b->impl;
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) cudaGetLastError();
    m->used = c->cur_bytes + c->scratch_bytes;
    m->peak = c->peak_bytes + c->scratch_bytes;
    m->free = f;
    m->total = t;
}

static const char *cuda_last_error(const backend *b) {
    const cuda_impl *c = (const cuda_impl *)b->impl;
    return c->err_code ? c->err_msg : NULL;
}
