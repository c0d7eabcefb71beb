/* wsrc.h - where an architecture's weights come from: the model_wsrc interface it
 * binds through, and its two sources, a safetensors checkpoint or dummy weights of
 * the real shapes filled from a seeded generator (the model cannot tell which). */
#ifndef STRATA_WSRC_H
#define STRATA_WSRC_H

#include "kernels/backend.h"
#include "models/load/safetensors.h"

/* Where weights come from. bind() finds name, checks it against the expected shape
 * (ndim dims) and fills *w ready for the backend. optional is a set of ARCH_BIND_*
 * flags (0 = required, prepared for the backend). */
enum {
    ARCH_BIND_OPTIONAL = 1, /* a missing tensor is not an error (returns 1, w->data NULL) */
    ARCH_BIND_HOST = 2,     /* leave it in host memory, no weight_prepare: the model reads
                               it on the host (Gemma 4's per-layer-embedding table) */
    ARCH_BIND_KEEP = 4,     /* never quantized (--quantization): a 2-D weight that no matmul
                               or embed reads (none of today's models has one) */
};
typedef struct model_wsrc model_wsrc;
struct model_wsrc {
    int (*bind)(model_wsrc *src, const char *name, int ndim, const int64_t *shape, int optional,
                bk_weight *w, strata_err *err);
    void *impl;
};

typedef struct wsrc wsrc;

/* st is borrowed (NULL for dummy weights). want: dtype to convert to (DTYPE_COUNT keeps
 * the checkpoint's; dummy weights default to BF16). Caller frees with wsrc_destroy,
 * after the model that bound the weights is closed. */
int wsrc_create(wsrc **out, const st_model *st, const char *what, dtype want, uint64_t seed,
                backend *b, strata_err *err);
void wsrc_destroy(wsrc *w);
model_wsrc *wsrc_iface(wsrc *w);
/* Bytes this source allocated (dummy or converted weights). */
size_t wsrc_owned_bytes(const wsrc *w);
/* Quantize on load (--quantization), set before any bind: every weight wsrc_quant_target
 * gives a block type is converted to it (threaded), the rest keep their dtype. as_f32 (the
 * tests' reference) stores those weights quantized and dequantized again as F32, so the f32
 * path runs exactly the quantized model's weight values. Returns STRATA_EINVALID for a q
 * that is not Q8_0 or Q4_K, STRATA_EUNSUPPORTED where b has no kernels for it. */
int wsrc_quantize(wsrc *w, dtype q, int as_f32, strata_err *err);
/* Set before any bind: matrices the checkpoint holds as they are used (read in place from
 * its file mapping, 4 KiB pages that can lie anywhere in memory) are copied into 2 MiB
 * huge-page memory instead, as the CPU backend streams them at decode; off (--mmap), they
 * stay in the mapping. */
void wsrc_copy_mapped(wsrc *w, int on);
/* The one rule of which weights --quantization q converts, and to what (DTYPE_COUNT: kept):
 * 2-D weights bound without ARCH_BIND_HOST / ARCH_BIND_KEEP (in the three models exactly
 * the matmul and embedding matrices; norms, conv, A_log, biases are 1-D or 3-D) whose row
 * length k is a whole number of q's blocks. Q4_K rows that are not a multiple of 256 but of
 * 32 take Q5_0, the 32-block type llama.cpp's quantizer falls back to for them. */
dtype wsrc_quant_target(dtype q, int ndim, const int64_t *shape, int flags);
/* For another weight source (models/load/gguf_wsrc.c): takes a weight it found in host
 * memory (wt: data borrowed from a mapping or from wsrc_alloc, the shape strata binds), applies
 * --quantization and --dtype as to a checkpoint tensor (a block-typed weight is kept as it is),
 * prepares it for the backend unless flags has ARCH_BIND_HOST, and releases it at destroy.
 * Errors name file and name. */
int wsrc_take(wsrc *w, const char *file, const char *name, bk_weight *wt, int flags, bk_weight *out,
              strata_err *err);
/* bytes of host memory owned by w until wsrc_destroy (2 MiB aligned when large); NULL when
 * there is none. */
void *wsrc_alloc(wsrc *w, size_t bytes);
/* One line on stderr: what was quantized (tensors, bytes before and after). Nothing when
 * no --quantization was asked for. */
void wsrc_report(const wsrc *w);

#endif
