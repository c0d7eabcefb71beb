/* metrics.c - Prometheus histograms and counters, rendered in the text format.
 *
 * Bucket bounds are vLLM's, extended downwards where a CPU tiny model answers in
 * microseconds, so dashboards built for vLLM read these series unchanged. */
#include "server/metrics.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const double metrics_b_ttft[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                        0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                        20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double metrics_b_itl[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                       0.15,  0.2,    0.3,   0.4,  0.5,   0.75, 1.0,   2.5,
                                       5.0,   7.5,    10.0,  20.0, 40.0,  80.0};
static const double metrics_b_req[] = {0.01, 0.05, 0.1,   0.3,   0.5,   0.8,   1.0,    1.5,
                                       2.0,  2.5,  5.0,   10.0,  15.0,  20.0,  30.0,   40.0,
                                       50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double metrics_b_tok[] = {1,   2,    5,    10,   20,    50,    100,   200,
                                       500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};

#define METRICS_MAX_BUCKETS 32
#define METRICS_N_REASONS 4
static const char *const metrics_reasons[METRICS_N_REASONS] = {"stop", "length", "abort", "error"};
#define METRICS_N_STATUS 6
static const int metrics_statuses[METRICS_N_STATUS] = {408, 429, 499, 500, 503, 400};

typedef struct metrics_hist {
    const double *bounds;
    int n;
    uint64_t counts[METRICS_MAX_BUCKETS]; /* per bucket, not cumulative */
    uint64_t total;
    double sum;
} metrics_hist;

struct metrics {
    pthread_mutex_t mu;
    char *model;
    metrics_hist h[METRICS_N_HIST];
    uint64_t finish[METRICS_N_REASONS];
    uint64_t rejected[METRICS_N_STATUS];
};

static const char *const metrics_hist_names[] = {
#define METRICS_HIST_NAME(name, metric, help) metric,
    METRICS_HIST_LIST(METRICS_HIST_NAME)
#undef METRICS_HIST_NAME
};
static const char *const metrics_hist_help[] = {
#define METRICS_HIST_HELP(name, metric, help) help,
    METRICS_HIST_LIST(METRICS_HIST_HELP)
#undef METRICS_HIST_HELP
};

int metrics_create(metrics **out, const char *model_name, strata_err *err) {
    metrics *m = calloc(1, sizeof *m);
    if (!m || !(m->model = strdup(model_name ? model_name : ""))) {
        free(m);
        return strata_err_set(err, STRATA_ENOMEM, "metrics: out of memory");
    }
    /* label values are quoted: drop characters that would need escaping */
    for (char *p = m->model; *p; p++)
        if (*p == '"' || *p == '\\' || *p == '\n') *p = '_';
    pthread_mutex_init(&m->mu, NULL);
    for (int i = 0; i < METRICS_N_HIST; i++) {
        metrics_hist *h = &m->h[i];
        switch (i) {
        case METRICS_TTFT:
            h->bounds = metrics_b_ttft, h->n = (int)(sizeof metrics_b_ttft / sizeof(double));
            break;
        case METRICS_ITL:
        case METRICS_TPOT:
            h->bounds = metrics_b_itl, h->n = (int)(sizeof metrics_b_itl / sizeof(double));
            break;
        case METRICS_PROMPT_LEN:
        case METRICS_GEN_LEN:
            h->bounds = metrics_b_tok, h->n = (int)(sizeof metrics_b_tok / sizeof(double));
            break;
        default:
            h->bounds = metrics_b_req, h->n = (int)(sizeof metrics_b_req / sizeof(double));
            break;
        }
    }
    *out = m;
    return 0;
}

void metrics_destroy(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->model);
    free(m);
}

void metrics_observe(metrics *m, int hist, double v) {
    if (!m || hist < 0 || hist >= METRICS_N_HIST || !(v >= 0)) return;
    metrics_hist *h = &m->h[hist];
    int b = 0;
    while (b < h->n && v > h->bounds[b]) b++;
    pthread_mutex_lock(&m->mu);
    h->counts[b]++; /* b == n: only in +Inf */
    h->total++;
    h->sum += v;
    pthread_mutex_unlock(&m->mu);
}

void metrics_count_finish(metrics *m, const char *reason) {
    if (!m) return;
    for (int i = 0; i < METRICS_N_REASONS; i++)
        if (!strcmp(reason, metrics_reasons[i])) {
            pthread_mutex_lock(&m->mu);
            m->finish[i]++;
            pthread_mutex_unlock(&m->mu);
        }
}

void metrics_count_rejected(metrics *m, int status) {
    if (!m) return;
    for (int i = 0; i < METRICS_N_STATUS; i++)
        if (metrics_statuses[i] == status) {
            pthread_mutex_lock(&m->mu);
            m->rejected[i]++;
            pthread_mutex_unlock(&m->mu);
        }
}

static int metrics_series(strbuf *o, const char *prefix, const char *model, const char *name,
                          const char *type, const char *help, double v) {
    return strbuf_addf(o, "# HELP %s:%s %s\n# TYPE %s:%s %s\n%s:%s{model_name=\"%s\"} %.17g\n",
                       prefix, name, help, prefix, name, type, prefix, name, model, v);
}

/* One gauge or counter of a render: its value read from the caller's gauges. */
typedef struct metrics_row {
    const char *name, *type, *help;
    double v;
} metrics_row;

/* The n rows as single series named prefix:name, in order. */
static int metrics_rows(strbuf *o, const char *prefix, const char *model, const metrics_row *r,
                        size_t n) {
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        rc |= metrics_series(o, prefix, model, r[i].name, r[i].type, r[i].help, r[i].v);
    return rc;
}

/* A counter split by one label besides model_name: the n series name{label="keys[i]"} v[i],
 * under one HELP and TYPE, the two labels in name order. */
static int metrics_split(strbuf *o, const char *model, const char *name, const char *help,
                         const char *label, const char *const *keys, const uint64_t *v, int n) {
    int rc = strbuf_addf(o, "# HELP strata:%s %s\n# TYPE strata:%s counter\n", name, help, name);
    const int label_first = strcmp(label, "model_name") < 0;
    for (int i = 0; i < n; i++) {
        unsigned long long x = v[i];
        rc |= label_first ? strbuf_addf(o, "strata:%s{%s=\"%s\",model_name=\"%s\"} %llu\n", name,
                                        label, keys[i], model, x)
                          : strbuf_addf(o, "strata:%s{model_name=\"%s\",%s=\"%s\"} %llu\n", name,
                                        model, label, keys[i], x);
    }
    return rc;
}

int metrics_render(metrics *m, const metrics_gauges *g, strbuf *o) {
    const metrics_row gauges[] = {
        {"num_requests_running", "gauge", "Number of requests in model execution batches.",
         g->running},
        {"num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         g->waiting},
        {"num_requests_preparing", "gauge",
         "Requests being parsed, rendered and tokenized, or waiting for it.", g->preparing},
        {"http_connections", "gauge", "Open HTTP connections.", g->connections},
        {"http_header_timeouts_total", "counter",
         "Connections closed because a request was not received in time.",
         (double)g->head_timeouts},
        {"kv_cache_usage_perc", "gauge", "KV-cache and state usage. 1 means 100 percent usage.",
         g->kv_usage},
        {"kv_cache_blocks", "gauge", "Blocks in the paged kv cache pool.", (double)g->kv_blocks},
        {"kv_cache_blocks_used", "gauge",
         "Blocks held by sequences (the prefix cache's alone are free to take).",
         (double)g->kv_blocks_used},
        {"kv_cache_blocks_peak", "gauge", "Most blocks held at once since start.",
         (double)g->kv_blocks_peak},
        {"kv_cache_preemptions_total", "counter",
         "Sequences that gave up their blocks because the pool was full.", (double)g->kv_evictions},
        {"prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
         (double)g->prefix_query_tokens},
        {"prefix_cache_hits_total", "counter",
         "Prompt tokens restored from the prefix cache instead of computed.",
         (double)g->prefix_hit_tokens},
        {"prefix_cache_requests_total", "counter", "Requests that looked in the prefix cache.",
         (double)g->prefix_queries},
        {"prefix_cache_request_hits_total", "counter", "Requests that found a cached prefix.",
         (double)g->prefix_hits},
        {"prefix_cache_blocks", "gauge", "kv blocks the prefix cache holds.",
         (double)g->prefix_blocks},
        {"prefix_cache_snapshots", "gauge", "Recurrent-state snapshots the prefix cache holds.",
         (double)g->prefix_snapshots},
        {"server_ready", "gauge", "1 when the model is loaded and the server admits requests.",
         g->ready},
        {"prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         (double)g->prompt_tokens},
        {"generation_tokens_total", "counter", "Number of generation tokens processed.",
         (double)g->generation_tokens},
    };
    /* The same gauges again under the names vLLM exports, because load balancers read those:
     * the Gateway API Inference Extension's endpoint picker (its built-in "vllm" engine
     * config, kubernetes-sigs/gateway-api-inference-extension v1.5.0, llm-d/llm-d-router)
     * reads vllm:num_requests_waiting, vllm:num_requests_running and vllm:kv_cache_usage_perc;
     * its releases up to v1.2 read vllm:gpu_cache_usage_perc. Only what strata measures: no
     * vllm:lora_requests_info (no LoRA adapters) and no vllm:cache_config_info. The values
     * are the strata: gauges' own, so both names always agree. */
    const metrics_row vllm[] = {
        {"num_requests_waiting", "gauge",
         "Number of requests waiting to be processed (= strata:num_requests_waiting).", g->waiting},
        {"num_requests_running", "gauge",
         "Number of requests in model execution batches (= strata:num_requests_running).",
         g->running},
        {"kv_cache_usage_perc", "gauge",
         "KV-cache usage. 1 means 100 percent usage (= strata:kv_cache_usage_perc).", g->kv_usage},
        {"gpu_cache_usage_perc", "gauge",
         "KV-cache usage. 1 means 100 percent usage (= strata:kv_cache_usage_perc; the name "
         "older vLLM releases and endpoint pickers use).",
         g->kv_usage},
    };
    const metrics_row decode[] = {
        {"decode_steps_chained_total", "counter",
         "Decode steps launched while the step before ran, their input tokens fed on the "
         "device.",
         (double)g->chained_decode_steps},
        {"decode_pad_rows_total", "counter",
         "Rows that filled decode steps up to their graph's batch size.", (double)g->pad_rows},
    };
    static const char *const modes[] = {"graph_replay", "graph_capture", "eager"};
    static const char *const samplers[] = {"device", "host"};
    const uint64_t steps[] = {(uint64_t)g->graph_replays, (uint64_t)g->graph_captures,
                              (uint64_t)g->eager_decode_steps};
    const uint64_t sampled[] = {(uint64_t)g->sampled_device, (uint64_t)g->sampled_host};
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    const char *md = m->model;
    rc |= metrics_rows(o, "strata", md, gauges, sizeof gauges / sizeof gauges[0]);
    rc |= metrics_rows(o, "vllm", md, vllm, sizeof vllm / sizeof vllm[0]);
    rc |= metrics_split(o, md, "decode_steps_total",
                        "Decode steps by how they ran: a replayed CUDA graph, a capture, or "
                        "eager launches.",
                        "mode", modes, steps, 3);
    rc |= metrics_rows(o, "strata", md, decode, sizeof decode / sizeof decode[0]);
    rc |= metrics_split(o, md, "sampled_tokens_total",
                        "Tokens by the sampler that picked them: the device's or the host's.",
                        "sampler", samplers, sampled, 2);
    rc |= metrics_split(o, md, "request_success_total", "Count of successfully processed requests.",
                        "finished_reason", metrics_reasons, m->finish, METRICS_N_REASONS);
    rc |= strbuf_adds(o, "# HELP strata:request_rejected_total Requests refused before admission, "
                         "by HTTP status.\n# TYPE strata:request_rejected_total counter\n");
    for (int i = 0; i < METRICS_N_STATUS; i++)
        rc |=
            strbuf_addf(o, "strata:request_rejected_total{model_name=\"%s\",status=\"%d\"} %llu\n",
                        md, metrics_statuses[i], (unsigned long long)m->rejected[i]);
    for (int i = 0; i < METRICS_N_HIST; i++) {
        const metrics_hist *h = &m->h[i];
        const char *n = metrics_hist_names[i];
        rc |= strbuf_addf(o, "# HELP strata:%s %s\n# TYPE strata:%s histogram\n", n,
                          metrics_hist_help[i], n);
        uint64_t cum = 0;
        for (int b = 0; b < h->n; b++) {
            cum += h->counts[b];
            rc |= strbuf_addf(o, "strata:%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", n,
                              h->bounds[b], md, (unsigned long long)cum);
        }
        rc |= strbuf_addf(o, "strata:%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", n, md,
                          (unsigned long long)h->total);
        rc |= strbuf_addf(o, "strata:%s_sum{model_name=\"%s\"} %.17g\n", n, md, h->sum);
        rc |= strbuf_addf(o, "strata:%s_count{model_name=\"%s\"} %llu\n", n, md,
                          (unsigned long long)h->total);
    }
    pthread_mutex_unlock(&m->mu);
    return rc ? STRATA_ENOMEM : 0;
}
