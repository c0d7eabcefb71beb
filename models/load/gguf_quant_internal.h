/* gguf_quant_internal.h - what the files of `strata quantize` share (gguf_quant.c writes the
 * tensors, gguf_quant_meta.c the architecture's keys, gguf_quant_text.c the tokenizer and chat
 * template): the checkpoint's config as read once, and the writer they all add to. */
#ifndef STRATA_GGUF_QUANT_INTERNAL_H
#define STRATA_GGUF_QUANT_INTERNAL_H

#include <jansson.h>

#include "models/load/gguf_model.h"
#include "models/load/gguf_write.h"

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
/* Gemma 4's generated rope_freqs.weight: its length (0: none) and values (gguf_quant_meta.c). */
int gq_rope_freqs(const gq_model *m, float *out, int max, int *n, strata_err *err);
/* tokenizer.ggml.* from tokenizer.json / tokenizer_config.json and tokenizer.chat_template,
 * or only the bos / eos ids of the config when the tokenizer cannot be written as llama.cpp's
 * gpt2 model (a note says so) (gguf_quant_text.c). */
int gq_text(gguf_write *w, const gq_model *m, strata_err *err);

#endif
