/* cli_engine.h - the offline commands run their sequences through the engine's step
 * loop, exactly as the server does (same scheduler, graphs, sampler, detokenizer), so
 * what `strata generate` prints and what `strata bench` measures is the server's engine.
 * Thread: main; the engine's step thread calls back. */
#ifndef STRATA_CLI_ENGINE_H
#define STRATA_CLI_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "engine/base/strbuf.h"
#include "engine/engine.h"
#include "server/cli/cli_model.h"

/* One finished sequence. */
typedef struct cli_result {
    int32_t *ids;       /* the generated ids, [n_ids] */
    sampler_result *lp; /* [n_ids]: their logprobs when o->sp.logprobs, else NULL */
    int n_ids, cap;
    strbuf text; /* their text (with a tokenizer; "[id]" pieces without) */
    int finish;  /* ENGINE_FINISH_* */
    char error[256];
    engine_seq_times times;
} cli_result;

void cli_result_free(cli_result *r);

/* An engine over o's model (and tok, which may be NULL) with o's prefill chunk;
 * on_step / ud as engine_opts (may be NULL). Prints the error and returns -1 on failure. */
int cli_engine_open(cli_model *o, const tokenizer *tok,
                    int (*on_step)(void *, const engine_step_info *), void *ud, engine **out);

/* Runs one sequence of prompt to its end: sampling from o->sp, at most max_tokens new
 * tokens, stopping at the model's eos unless ignore_eos. on_ids (may be NULL) sees the
 * ids as they come, on this thread. Returns 0 with r filled (free with
 * cli_result_free), or -1 with the error printed. The logprobs are computed (a pass over
 * the vocabulary a token) and kept only when o->sp.logprobs, as the server does them only
 * when a request asks. */
int cli_run(engine *e, const cli_model *o, const int32_t *prompt, int n_prompt, int max_tokens,
            void (*on_ids)(void *ud, const int32_t *ids, int n), void *ud, cli_result *r);

#endif
