/* gguf_model.h - a llama.cpp GGUF file as a strata model: the config.json and
 * generation_config.json its metadata stands for (gguf_config.c), and a weight source that
 * binds strata's Hugging Face tensor names to the file's tensors in place (gguf_wsrc.c),
 * through the per-architecture name and transform tables of gguf_names.c (docs/gguf.md).
 * Thread: the loading thread; nothing here is used after the model is open. */
#ifndef STRATA_GGUF_MODEL_H
#define STRATA_GGUF_MODEL_H

#include <jansson.h>

#include "models/load/gguf.h"
#include "models/load/wsrc.h"

/* ---- config (gguf_config.c) ----
 * The config.json (model_type from general.architecture: qwen35 -> qwen3_5, gemma4,
 * nemotron_h) and generation_config.json (eos ids from tokenizer.ggml.eos_token_id and
 * eot_token_id) the architecture files read, synthesized from g's metadata. A missing key or
 * one of the wrong type is an error naming the file and the key; an architecture strata does
 * not run is STRATA_EUNSUPPORTED. Caller frees both with json_decref. */
int gguf_model_config(const gguf *g, json_t **config, json_t **gen_config, strata_err *err);
/* "file.gguf" by name, or any regular file that starts with the GGUF magic. */
int gguf_model_is_gguf(const char *path);

/* ---- names (gguf_names.c) ---- */

/* What the converter did to a tensor, which the weight source undoes (docs/gguf.md). */
enum {
    GGUF_XF_RESHAPE = 1,  /* same bytes in other dims (squeezed conv, [mH, 1] vectors) */
    GGUF_XF_PLUS1 = 2,    /* a zero-centred norm stored as 1 + w: subtract 1 in f32 */
    GGUF_XF_NEG_EXP = 4,  /* A_log stored as A = -exp(A_log): log(-A) in f32 */
    GGUF_XF_VROWS = 8,    /* qwen35 Hk != Hv: V heads tiled, rows (see gguf_names_vperm) */
    GGUF_XF_VCOLS = 16,   /* ... columns of out_proj, in groups of head_v_dim */
    GGUF_XF_QK_PERM = 32, /* llama's rope permutation of q / k rows within each head */
};
/* Which part of a tensor GGUF_XF_VROWS moves: the V rows of qkv (after 2·Hk·dk), all rows in
 * heads of dv (z, conv's V channels after 2·Hk·dk) or of one row (a, b, A_log, dt_bias). */
enum { GGUF_V_QKV = 1, GGUF_V_Z, GGUF_V_HEAD1, GGUF_V_CONV };

typedef struct gguf_name {
    char gg[128]; /* the GGUF tensor name */
    int xf;       /* GGUF_XF_* */
    int vpart;    /* GGUF_V_* with GGUF_XF_VROWS */
    int qk;       /* GGUF_XF_QK_PERM: 'q' or 'k' */
} gguf_name;

/* The GGUF name and transforms of the tensor strata binds as hf (any of the checkpoints'
 * prefixes: model.language_model., model., backbone.) for arch (general.architecture).
 * 0, or STRATA_ENOTFOUND when the name has no GGUF counterpart (no message: the caller
 * names the file). */
int gguf_names_find(const char *arch, const char *hf, gguf_name *out);

/* ---- the weight source (gguf_wsrc.c) ---- */

typedef struct gguf_wsrc gguf_wsrc;
/* Binds through g (borrowed, open until gguf_wsrc_destroy) and hands every weight to w
 * (borrowed: its --quantization, --dtype, backend preparation and owned buffers). Reads the
 * head counts the V-head and q / k permutations need from g's metadata. Caller frees with
 * gguf_wsrc_destroy after the model is closed. */
int gguf_wsrc_create(gguf_wsrc **out, const gguf *g, wsrc *w, strata_err *err);
void gguf_wsrc_destroy(gguf_wsrc *s);
model_wsrc *gguf_wsrc_iface(gguf_wsrc *s);
/* Whether a qwen35 file's V heads stay in the converter's tiled order (*tiled 1) rather than
 * being put back in transformers' (0): when Hk != Hv and some ssm_out's V-head columns are
 * not whole blocks of its type (Q4_K / Q6_K at head_v_dim 128), or when the environment has
 * STRATA_GGUF_V_TILED=1 (tests: the tiled path on a file that could be un-tiled; 0 or unset:
 * off, other values: STRATA_EINVALID). 0 for other architectures. The config says it as
 * strata_linear_v_tiled (gguf_config.c), the weight source follows it. */
int gguf_wsrc_v_tiled(const gguf *g, int *tiled, strata_err *err);

/* ---- writing one: `strata quantize` (gguf_quant.c) ---- */

typedef struct gguf_quant_opts {
    /* in: a safetensors checkpoint directory (config.json, *.safetensors), or a GGUF file
     * (its matrices converted, the rest copied). type: Q8_0 or Q4_K, matrices by
     * wsrc_quant_target's rule; F32, F16, BF16, every matrix in that type. Vectors and norms
     * are F32 either way. */
    const char *in;
    const char *out; /* the .gguf to write (built as out.tmp, renamed when complete) */
    dtype type;
    int threads;          /* quantizing threads (<= 0: the cores) */
    int allow_requantize; /* a GGUF input's quantized matrices may take another block type */
    /* Progress and notes (tensors skipped, no tokenizer written): one line each, progress
     * lines with progress = 1 (a terminal may overwrite them). NULL: silent. */
    void (*note)(void *ctx, int progress, const char *line);
    void *note_ctx;
} gguf_quant_opts;

/* Writes o->in as a GGUF file llama.cpp reads: its architecture's keys and tensor names, the
 * converter's transforms applied (the inverse of the weight source above), the tokenizer and
 * chat template when the checkpoint has them; a GGUF input keeps its keys, names and
 * transforms and only its matrices change type. Errors name the file and key or tensor; on any
 * error no file is left at o->out. Thread: the caller's, plus o->threads workers. */
int gguf_quantize(const gguf_quant_opts *o, strata_err *err);

#endif
