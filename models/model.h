/* model.h - a loaded model: weights, per-slot caches, and one forward per step.
 *
 * The engine sees every architecture through this door; models/<arch>.c implement
 * it through models/arch.h. A model owns its weights (mmapped checkpoint or
 * dummy buffers), the kv caches and recurrent states of max_seqs slots, and the
 * activation scratch for step_tokens tokens per step, all allocated at open.
 * Thread: one engine step thread calls everything after model_open. */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include <stdint.h>

#include "kernels/backend.h"
#include "engine/base/err.h"

typedef struct model model;

typedef struct model_opts {
    const char *path;   /* checkpoint directory, or a preset name with load_dummy */
    int load_dummy;     /* random weights of the real shapes (--load-format dummy) */
    dtype weight_dtype; /* dtype of dummy weights / conversion target; DTYPE_COUNT = as stored */
    int max_seqs;       /* cache slots */
    int ctx_size;       /* max positions per sequence (0 = the model's max_position_embeddings) */
    int step_tokens;    /* max tokens in one forward (prefill chunk + decodes) */
    uint64_t seed;      /* dummy weight seed */
    int ple_on_device;  /* Gemma 4: PLE table with the other weights, not host-side */
    int kv_cache;       /* MODEL_KV_*: the kv cache dtype */
    int kv_block;       /* positions per paged kv block (0: 16); a power of two */
    /* bytes of the paged kv pool (0: auto, model_kv_auto_bytes) */
    int64_t kv_memory;
    /* on a backend with memory of its own, the share of it weights, activations and the
     * auto-sized kv pool may fill (0: 0.9) */
    double gpu_util;
    /* backend memory the caller allocates after the model (the prefix cache's snapshots),
     * left out of an auto-sized kv pool */
    int64_t reserve_bytes;
    /* --quantization: DTYPE_Q8_0 or DTYPE_Q4_K quantizes the matmul and embedding matrices
     * at load (wsrc_quant_target); any plain dtype, the zero value included, quantizes
     * nothing */
    dtype quant;
    /* tests: with quant, store those matrices quantized then dequantized as F32, so the f32
     * path runs the quantized weight values (the reference of the quantized kernels) */
    int quant_as_f32;
    /* --mmap: the CPU backend reads checkpoint matrices in place from the file mapping; by
     * default it copies them into huge-page memory at load (wsrc_copy_mapped) */
    int weights_mmap;
} model_opts;

enum { MODEL_KV_AUTO = 0, MODEL_KV_F32, MODEL_KV_BF16 };
/* "auto", "bf16" (or "bfloat16"), "f32" (or "float32") as MODEL_KV_*; -1 for anything else. */
int model_kv_cache_parse(const char *s);
/* "none" (or NULL) as F32 (no quantization), "q8_0" as DTYPE_Q8_0, "q4_k" as DTYPE_Q4_K
 * (either case); -1 for anything else. */
int model_quant_parse(const char *s, dtype *out);

typedef struct model_info {
    const char *arch; /* "qwen3_5", ... */
    int vocab;        /* logits per row */
    int ctx_size;     /* positions one sequence may reach: the context, or the pool if smaller */
    int max_seqs;
    int step_tokens;
    int n_eos; /* stop token ids from config / generation_config */
    int32_t eos[8];
    int64_t weight_bytes;       /* bytes of weights read by one decode step */
    int64_t state_bytes;        /* recurrent state bytes read+written per decode token */
    int64_t kv_bytes_per_token; /* kv cache bytes per cached position, all layers */
    /* the forward reads every token id on the host (Gemma 4's PLE table in host memory):
     * ids fed on the device (model_out.fed) are refused */
    int host_ids;
    /* the paged kv pool (kv_pool.h): positions per block, blocks, bytes of one block over
     * every paged layer; 0 blocks: the model has no paged layer */
    int kv_block, kv_blocks;
    int64_t kv_block_bytes;
    /* bytes of one slot's recurrent state (model_state_save); 0: none */
    int64_t slot_state_bytes;
} model_info;

/* Opens a model (see model_opts). Caller frees with model_close. */
int model_open(model **out, const model_opts *opts, backend *b, strata_err *err);
/* The backend the model runs on (borrowed from model_open). */
backend *model_backend(const model *m);
void model_close(model *m);
const model_info *model_get_info(const model *m);

/* Clears the caches of a slot so a new sequence can start in it (its kv blocks released). */
void model_reset_slot(model *m, int slot);
/* Releases the kv blocks of a finished slot so other sequences may take them. */
void model_release_slot(model *m, int slot);

/* ---- the paged kv pool (models/kv_pool.h), for the engine's admission and prefix cache ----
 * Blocks are taken as a slot's sequence reaches new positions, in model_forward; a caller
 * that wants a step never to fail for want of blocks asks model_kv_need first. */
/* Blocks free now; blocks slot still needs to reach position end - 1. */
int model_kv_free(const model *m);
int model_kv_need(const model *m, int slot, int end);
/* Blocks held by anyone, by some slot (a prefix cache's alone are free to evict), and the
 * most ever held at once. */
int model_kv_used(const model *m);
int model_kv_held(const model *m);
int model_kv_peak(const model *m);
/* Slot's blocks in position order (*ids borrowed until the next forward); returns how many. */
int model_kv_table(const model *m, int slot, const int32_t **ids);
/* Starts the empty table of slot with n blocks held by the caller (a prefix cache). */
void model_kv_attach(model *m, int slot, const int32_t *ids, int n);
/* A hold on a block, and its release (the prefix cache keeps finished blocks). */
void model_kv_ref(model *m, int32_t id);
void model_kv_unref(model *m, int32_t id);
/* Holders of a block now (slots and caches). */
int model_kv_refs(const model *m, int32_t id);
/* The block table width a step reaching position end - 1 uses (a graph key must include
 * it); 0 without a pool. */
int model_kv_step_width(const model *m, int end);

/* ---- a slot's recurrent state: DeltaNet / Mamba2 states and conv windows, Gemma's
 * sliding-window rings: everything a slot holds outside the paged pool ----
 * dst / src: info.slot_state_bytes of backend memory. Ordered on the backend's stream. */
void model_state_save(model *m, int slot, void *dst);
void model_state_load(model *m, int slot, const void *src);

/* Runs one step: the tokens of bt (host ids, bt->n_tokens <= step_tokens, positions
 * continuing each slot's sequence) go through the network and update the slots'
 * caches. For the n_out token indices in out_rows, the f32 logits are written to
 * logits ([n_out, vocab], host memory). */
int model_forward(model *m, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows, int n_out,
                  float *logits, strata_err *err);

/* Where the logit rows of model_forward_to go. The first n_sample of the out rows are
 * sampled on the backend (backend_ops.sample, by req[0..n_sample)) into host res; the
 * others are downloaded to logits + i * vocab for out row i, as model_forward does. The
 * forward sets sampled_rows to the sampled rows' processed logits in backend memory (row
 * r at sampled_rows + r * vocab; NULL when more than the head's chunk of rows were
 * sampled), valid until the next forward: where a row was left to the host. */
typedef struct model_out {
    float *logits;
    int n_sample;
    const bk_sample_req *req;
    bk_sample_res *res;
    const float *sampled_rows;
    /* NULL, or backend memory [slots] of token ids the sampler wrote (bk_sample_req.feed):
     * then a negative token id means "the slot's fed id" (backend_ops.embed_fed), so a
     * step can follow the one that samples its input before the host has read it */
    const int32_t *fed;
} model_out;
int model_forward_to(model *m, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                     int n_out, model_out *out, strata_err *err);

#endif
