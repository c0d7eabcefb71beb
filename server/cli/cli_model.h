/* cli_model.h - the model options shared by generate, logits and bench, and the
 * backend + model they open. Thread: main. */
#ifndef STRATA_CLI_MODEL_H
#define STRATA_CLI_MODEL_H

#include <stdint.h>

#include "models/model.h"
#include "engine/sampler.h"

typedef struct cli_model {
    const char *model;  /* --model DIR or preset name */
    int dummy;          /* --load-format dummy */
    dtype dt;           /* --dtype (DTYPE_COUNT = as stored) */
    dtype quant;        /* --quantization (a plain dtype: none) */
    int threads;        /* --threads */
    const char *device; /* --device cpu|cuda|cuda:N|auto (default auto) */
    int ctx_size;       /* --ctx-size */
    int chunk;          /* --prefill-chunk: prompt tokens per forward */
    int max_seqs;
    const char *prompt_ids;  /* --prompt-ids 1,2,3 */
    const char *prompt;      /* --prompt TEXT (needs the checkpoint's tokenizer) */
    int max_tokens;          /* --max-tokens */
    int ignore_eos;          /* --ignore-eos */
    int ple_on_device;       /* --ple-on-device: Gemma 4's PLE table with the weights */
    int host_sampling;       /* --host-sampling: not the device's sampler */
    int weights_mmap;        /* --mmap: weights read in place from the file mapping */
    int kv_cache;            /* --kv-cache-dtype as MODEL_KV_* */
    const char *out;         /* --out FILE */
    int prompt_len, gen_len; /* bench */
    sampler_params sp;
    backend *b;
    model *m;
} cli_model;

/* Parses argv into o (defaults first). Returns 0, 1 for --help (usage printed), or
 * -1 after printing the problem. */
int cli_model_parse(cli_model *o, int argc, char **argv, const char *usage);
/* Opens backend and model; prints the error and returns -1 on failure. */
int cli_model_open(cli_model *o);
void cli_model_close(cli_model *o);
/* Parses "1,2,3" into a malloc'ed array; -1 on a malformed list. */
int cli_parse_ids(const char *s, int32_t **ids, int *n);

#endif
