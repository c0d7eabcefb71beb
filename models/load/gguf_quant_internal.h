/* gguf_quant_internal.h - what the files of `strata quantize` share (gguf_quant.c writes the
 * tensors, gguf_quant_meta.c the architecture's keys, gguf_quant_text.c the tokenizer and chat
 * template, gguf_requant.c the plan and keys of a GGUF input): the checkpoint's config as read
 * once, the plan of the output's tensors, and the writer they all add to. */
#ifndef STRATA_GGUF_QUANT_INTERNAL_H
#define STRATA_GGUF_QUANT_INTERNAL_H

#include <jansson.h>

#include "models/load/gguf_model.h"
#include "models/load/gguf_write.h"
#include "models/load/safetensors.h"

typedef struct gq_model {
    const char *dir;     /* the checkpoint directory */
    char cfg_path[4200]; /* its config.json, for messages */
    const char *arch;    /* general.architecture: qwen35, gemma4, nemotron_h */
    json_t *root;        /* config.json (owned) */
    json_t *tc;          /* text_config, or root (borrowed from root) */
    json_t *gen;         /* generation_config.json or NULL (owned) */
    long long vocab;     /* vocab_size */
    int tied;            /* tie_word_embeddings: no output.weight is written */
    const gguf_quant_opts *o;
} gq_model;

/* One tensor of the output: where its rows come from and what they become. */
typedef struct gq_tensor {
    const st_tensor *st;   /* a checkpoint tensor, or */
    const gguf_tensor *gt; /* a GGUF input's (its rows as stored, dequantized); both NULL:
                              generated (rope_freqs) */
    dtype from;            /* gt's type */
    gguf_name gn;          /* gn.gg: the output's name */
    dtype to;              /* the stored type */
    int ndim;              /* GGUF dims, outermost first */
    int64_t shape[GGUF_MAX_DIMS];
    int64_t rows, cols; /* HF's outermost dim and the rest (gt: the rows of its innermost dim) */
    int tiled;          /* VROWS / VCOLS apply (qwen35, Hk != Hv) */
    int64_t r0, hs;     /* VROWS: the V part's first row, rows per head */
} gq_tensor;

typedef struct gq_plan {
    gq_model m;
    st_model *st;
    gguf *g; /* a GGUF input (then st is NULL) */
    gq_tensor *t;
    size_t n;
    int64_t Hk, Hv, dk, dv, D; /* qwen35 linear attention; D: the q / k head dim */
    float rope[1024];          /* gemma4's rope_freqs */
    int n_rope;
} gq_plan;

/* An integer of tc named by "a|b|c" (the first present wins); def when none is and has_def,
 * else an error naming config.json and the key. */
int gq_cfg_int(const gq_model *m, const char *keys, int has_def, long long def, long long *out,
               strata_err *err);
int gq_cfg_real(const gq_model *m, const char *keys, int has_def, double def, double *out,
                strata_err *err);
/* A line for o->note (when set). */
void gq_note(const gq_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* general.* and the "<arch>." keys llama.cpp's loader reads (gguf_quant_meta.c). */
int gq_meta(gguf_write *w, const gq_model *m, strata_err *err);
/* What a matrix named gg (GGUF name) of shape[2], stored as `stored`, becomes under --type q:
 * q itself when a float type, else wsrc_quant_target's block type for it, or `stored` where
 * the rule keeps it (rows not whole blocks, Gemma 4's per-layer table) (gguf_quant.c). */
dtype gq_matrix_type(dtype q, const char *gg, const int64_t *shape, dtype stored);
/* llama.cpp's general.file_type (LLAMA_FTYPE) for a file of --type t. */
uint32_t gq_file_type(dtype t);
/* Gemma 4's generated rope_freqs.weight: its length (0: none) and values (gguf_quant_meta.c). */
int gq_rope_freqs(const gq_model *m, float *out, int max, int *n, strata_err *err);
/* tokenizer.ggml.* from tokenizer.json / tokenizer_config.json and tokenizer.chat_template,
 * or only the bos / eos ids of the config when the tokenizer cannot be written as llama.cpp's
 * gpt2 model (a note says so) (gguf_quant_text.c). */
int gq_text(gguf_write *w, const gq_model *m, strata_err *err);

/* A GGUF input (gguf_requant.c): opens p->m.o->in, plans each of its tensors (a matrix takes
 * --type by the same rule, the rest is kept as stored), and copies its keys but the file type. */
int gq_open_gguf(gq_plan *p, strata_err *err);
int gq_plan_gguf(gq_plan *p, strata_err *err);
int gq_meta_gguf(gguf_write *w, const gq_plan *p, strata_err *err);

#endif
