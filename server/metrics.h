/* metrics.h - the Prometheus metrics of the server, vLLM's names under "strata:".
 *
 * Histograms and counters live here behind one mutex: the loop thread records
 * request outcomes, the step thread records inter-token gaps, and an HTTP thread
 * renders the text format. Gauges (running, waiting, cache usage, token totals) are
 * read by the caller at render time and passed in. Thread: any. */
#ifndef STRATA_METRICS_H
#define STRATA_METRICS_H

#include <stdint.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"

#define METRICS_HIST_LIST(X)                                                                       \
    X(TTFT, "time_to_first_token_seconds", "Histogram of time to first token in seconds.")         \
    X(ITL, "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.")          \
    X(TPOT, "request_time_per_output_token_seconds",                                               \
      "Histogram of time_per_output_token_seconds per request.")                                   \
    X(E2E, "e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.")   \
    X(QUEUE, "request_queue_time_seconds", "Histogram of time spent in the waiting queue.")        \
    X(PREFILL, "request_prefill_time_seconds", "Histogram of time spent in prefill.")              \
    X(DECODE, "request_decode_time_seconds", "Histogram of time spent in decode.")                 \
    X(PROMPT_LEN, "request_prompt_tokens", "Number of prefill tokens processed per request.")      \
    X(GEN_LEN, "request_generation_tokens", "Number of generation tokens processed per request.")

enum {
#define METRICS_HIST_ENUM(name, metric, help) METRICS_##name,
    METRICS_HIST_LIST(METRICS_HIST_ENUM)
#undef METRICS_HIST_ENUM
        METRICS_N_HIST
};

typedef struct metrics metrics;

typedef struct metrics_gauges {
    int running;           /* sequences holding a slot */
    int waiting;           /* requests in the queue */
    double kv_usage;       /* 0..1: kv cache blocks held / blocks in the pool */
    int64_t prompt_tokens; /* prompt tokens processed since start */
    int64_t generation_tokens;
    int ready;             /* 1 when the model is loaded and not draining */
    int preparing;         /* requests being parsed / tokenized, or waiting for that */
    int connections;       /* open HTTP connections */
    int64_t head_timeouts; /* connections cut by --header-timeout since start */
    /* the engine's decode steps by how they ran, and its tokens by who sampled them */
    int64_t graph_replays, graph_captures, eager_decode_steps, sampled_device, sampled_host;
    int64_t chained_decode_steps, pad_rows;
    /* the paged kv pool and the prefix cache (engine_stats) */
    int64_t kv_blocks, kv_blocks_used, kv_blocks_peak, kv_evictions;
    int64_t prefix_queries, prefix_hits, prefix_query_tokens, prefix_hit_tokens;
    int64_t prefix_blocks, prefix_snapshots;
} metrics_gauges;

/* model_name labels every series. Caller frees with metrics_destroy. */
int metrics_create(metrics **out, const char *model_name, strata_err *err);
void metrics_destroy(metrics *m);

void metrics_observe(metrics *m, int hist, double value);
/* One finished sequence with its finish reason ("stop", "length", "abort", "error"). */
void metrics_count_finish(metrics *m, const char *reason);
/* One request refused before admission with this HTTP status (429, 503, 408, ...). */
void metrics_count_rejected(metrics *m, int status);

/* Appends the Prometheus text exposition (format 0.0.4) to out. */
int metrics_render(metrics *m, const metrics_gauges *g, strbuf *out);

#endif
