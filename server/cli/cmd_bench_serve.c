/* cmd_bench_serve.c - `strata bench-serve`: load-tests a running OpenAI-compatible
 * server the way `vllm bench serve` does.
 *
 * Random prompts of a set input length (token ids by default, so the length is
 * exact and no tokenizer is needed; --text sends random words instead), a set
 * output length (ignore_eos, so every request generates exactly that many), sent
 * at a Poisson rate (--request-rate, inf = all at once) under a concurrency cap,
 * all streamed. Per request: TTFT (send -> first content chunk), E2EL (send -> end),
 * TPOT = (E2EL - TTFT) / (output_tokens - 1), and ITL = every gap between chunks,
 * pooled. Output counts come from the usage chunk (stream_options.include_usage).
 * One thread drives every transfer through libcurl's multi interface. */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/cli/commands.h"
#include "engine/base/clock.h"
#include "engine/base/strbuf.h"

typedef struct bs_opts {
    const char *url, *model, *endpoint, *api_key, *json_out;
    int num_prompts, input_len, output_len, concurrency, vocab, text, warmup;
    double rate, temperature;
    unsigned long long seed;
} bs_opts;

typedef struct bs_req {
    CURL *h;
    struct curl_slist *hdr;
    char *body;
    strbuf in; /* SSE bytes not yet split into events */
    double t_start, t_first, t_last, t_end;
    int out_tokens, chunks, ok, done_seen, prompt_tokens;
    double *itl; /* gaps between content chunks */
    int n_itl, cap_itl;
    char err[160];
} bs_req;

static unsigned long long bs_rand(unsigned long long *s) {
    /* splitmix64: reproducible prompts and arrival times for a given --seed */
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double bs_uniform(unsigned long long *s) {
    return (double)(bs_rand(s) >> 11) / 9007199254740992.0;
}

static void bs_event(bs_req *r, const char *data, size_t n) {
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        r->done_seen = 1;
        return;
    }
    json_t *j = json_loadb(data, n, 0, NULL);
    if (!j) return;
    json_t *e = json_object_get(j, "error"), *ch = json_object_get(j, "choices"),
           *u = json_object_get(j, "usage");
    if (e)
        snprintf(r->err, sizeof r->err, "%s",
                 json_string_value(json_object_get(e, "message")) ?: "error event");
    if (json_is_object(u)) {
        r->out_tokens = (int)json_integer_value(json_object_get(u, "completion_tokens"));
        r->prompt_tokens = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
    }
    json_t *c0 = json_array_get(ch, 0);
    if (c0) {
        json_t *d = json_object_get(c0, "delta");
        const char *t = d ? json_string_value(json_object_get(d, "content"))
                          : json_string_value(json_object_get(c0, "text"));
        const char *rs = d ? json_string_value(json_object_get(d, "reasoning_content")) : NULL;
        if ((t && *t) || (rs && *rs)) {
            double now = strata_now();
            if (!r->t_first) r->t_first = now;
            else {
                if (r->n_itl == r->cap_itl) {
                    r->cap_itl = r->cap_itl ? 2 * r->cap_itl : 64;
                    r->itl = realloc(r->itl, (size_t)r->cap_itl * sizeof *r->itl);
                }
                if (r->itl) r->itl[r->n_itl++] = now - r->t_last;
            }
            r->t_last = now;
            r->chunks++;
        }
    }
    json_decref(j);
}

static size_t bs_write(char *p, size_t sz, size_t nm, void *ud) {
    bs_req *r = ud;
    size_t n = sz * nm;
    if (strbuf_add(&r->in, p, n)) return 0;
    char *s = r->in.p, *end;
    size_t used = 0;
    while ((end = strstr(s + used, "\n\n"))) {
        char *ev = s + used;
        if (!strncmp(ev, "data: ", 6)) bs_event(r, ev + 6, (size_t)(end - ev - 6));
        else if (*ev == '{') bs_event(r, ev, (size_t)(end - ev)); /* a JSON error body */
        used = (size_t)(end - s) + 2;
    }
    if (used) {
        memmove(s, s + used, r->in.len - used);
        r->in.len -= used;
        s[r->in.len] = 0;
    }
    return n;
}

static char *bs_make_body(const bs_opts *o, unsigned long long *seed) {
    json_t *j =
        json_pack("{s:i, s:b, s:b, s:{s:b}, s:f}", "max_tokens", o->output_len, "ignore_eos", 1,
                  "stream", 1, "stream_options", "include_usage", 1, "temperature", o->temperature);
    if (o->model) json_object_set_new(j, "model", json_string(o->model));
    static const char *words[] = {"the", "quick", "brown", "fox",   "jumps",  "over",  "lazy",
                                  "dog", "hello", "world", "model", "server", "token", "stream"};
    int chat = !strcmp(o->endpoint, "chat");
    if (o->text || chat) {
        strbuf t = {0};
        for (int i = 0; i < o->input_len; i++)
            strbuf_addf(&t, "%s%s", i ? " " : "", words[bs_rand(seed) % 14]);
        if (chat)
            json_object_set_new(
                j, "messages",
                json_pack("[{s:s, s:s}]", "role", "user", "content", t.p ? t.p : ""));
        else json_object_set_new(j, "prompt", json_string(t.p ? t.p : ""));
        strbuf_free(&t);
    } else {
        json_t *ids = json_array();
        for (int i = 0; i < o->input_len; i++)
            json_array_append_new(
                ids, json_integer((json_int_t)(100 + bs_rand(seed) % (unsigned)(o->vocab - 100))));
        json_object_set_new(j, "prompt", ids);
    }
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static void bs_start(CURLM *m, bs_req *r, const bs_opts *o, const char *path) {
    char url[1024], auth[600];
    snprintf(url, sizeof url, "%s%s", o->url, path);
    r->h = curl_easy_init();
    r->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (o->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        r->hdr = curl_slist_append(r->hdr, auth);
    }
    curl_easy_setopt(r->h, CURLOPT_URL, url);
    curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, r->hdr);
    curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, bs_write);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->h, CURLOPT_TIMEOUT, 3600L);
    curl_easy_setopt(r->h, CURLOPT_TCP_NODELAY, 1L);
    r->t_start = strata_now();
    curl_multi_add_handle(m, r->h);
}

static int bs_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct bs_stat {
    double mean, p50, p90, p99;
    int n;
} bs_stat;

static bs_stat bs_stats(double *v, int n) {
    bs_stat s = {0};
    s.n = n;
    if (!n) return s;
    qsort(v, (size_t)n, sizeof *v, bs_cmp);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    s.mean = sum / n;
    /* linear interpolation between closest ranks, as numpy.percentile */
#define BS_PCT(p)                                                                                  \
    (v[(int)floor((p) * (n - 1))] +                                                                \
     ((p) * (n - 1) - floor((p) * (n - 1))) *                                                      \
         (v[(int)ceil((p) * (n - 1))] - v[(int)floor((p) * (n - 1))]))
    s.p50 = BS_PCT(0.50);
    s.p90 = BS_PCT(0.90);
    s.p99 = BS_PCT(0.99);
#undef BS_PCT
    return s;
}

static void bs_print(const char *name, const char *abbr, bs_stat s, json_t *out) {
    const char *names[] = {"Mean", "Median", "P90", "P99"};
    const char *keys[] = {"mean", "median", "p90", "p99"};
    double v[] = {s.mean, s.p50, s.p90, s.p99};
    char label[64], k[64];
    printf("%s\n", name);
    for (int i = 0; i < 4; i++) {
        snprintf(label, sizeof label, "%s %s (ms):", names[i], abbr);
        printf("%-40s%10.2f\n", label, v[i] * 1e3);
        snprintf(k, sizeof k, "%s_%s_ms", keys[i], abbr);
        for (char *p = k; *p; p++) *p = *p >= 'A' && *p <= 'Z' ? (char)(*p + 32) : *p;
        json_object_set_new(out, k, json_real(v[i] * 1e3));
    }
}

static int bs_usage(int code) {
    fprintf(code ? stderr : stdout,
            "usage: strata bench-serve [options]\n"
            "  --url URL            server base (default http://127.0.0.1:8080)\n"
            "  --endpoint E         completions (default) or chat\n"
            "  --model NAME         model field to send (default: none)\n"
            "  --num-prompts N      requests (default 64)\n"
            "  --input-len N        prompt tokens (default 128)\n"
            "  --output-len N       generated tokens per request (default 64)\n"
            "  --concurrency N      requests in flight at most (default 0 = unlimited)\n"
            "  --request-rate R     Poisson arrivals per second (default inf: all at once)\n"
            "  --vocab N            random prompt ids are in [100, N) (default 5000)\n"
            "  --text               random words instead of token ids\n"
            "  --warmup N           requests sent first and not measured (default 0)\n"
            "  --seed S             prompts and arrivals (default 0)\n"
            "  --temperature T      sampling temperature sent (default 0: greedy; the OpenAI\n"
            "                       default, what a client that sends none gets, is 1)\n"
            "  --api-key KEY        Authorization: Bearer KEY\n"
            "  --json FILE          also write the results as JSON\n");
    return code;
}

/* Runs n requests; fills rs. Returns the wall time from first send to last end. */
static double bs_run(const bs_opts *o, bs_req *rs, int n, unsigned long long *seed) {
    const char *path = !strcmp(o->endpoint, "chat") ? "/v1/chat/completions" : "/v1/completions";
    double *arrive = calloc((size_t)n, sizeof *arrive), t = 0;
    for (int i = 0; i < n; i++) {
        rs[i].body = bs_make_body(o, seed);
        if (o->rate > 0 && isfinite(o->rate)) t += -log(1.0 - bs_uniform(seed)) / o->rate;
        arrive[i] = t;
    }
    CURLM *m = curl_multi_init();
    int next = 0, active = 0, finished = 0;
    double t0 = strata_now();
    while (finished < n) {
        double now = strata_now() - t0;
        while (next < n && arrive[next] <= now && (!o->concurrency || active < o->concurrency)) {
            bs_start(m, &rs[next++], o, path);
            active++;
        }
        int running;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            bs_req *r;
            long code = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            r->t_end = strata_now();
            r->ok = msg->data.result == CURLE_OK && code == 200 && r->done_seen && !r->err[0];
            if (!r->ok && !r->err[0])
                snprintf(r->err, sizeof r->err, "HTTP %ld, %s", code,
                         curl_easy_strerror(msg->data.result));
            curl_multi_remove_handle(m, r->h);
            curl_easy_cleanup(r->h);
            curl_slist_free_all(r->hdr);
            active--;
            finished++;
        }
        int wait_ms = 100;
        if (next < n && (!o->concurrency || active < o->concurrency)) {
            double dt = arrive[next] - (strata_now() - t0);
            wait_ms = dt <= 0 ? 0 : dt < 0.1 ? (int)(dt * 1000) + 1 : 100;
        }
        curl_multi_poll(m, NULL, 0, wait_ms, NULL);
    }
    curl_multi_cleanup(m);
    free(arrive);
    return strata_now() - t0;
}

int cmd_bench_serve(int argc, char **argv) {
    bs_opts o = {.url = "http://127.0.0.1:8080",
                 .endpoint = "completions",
                 .num_prompts = 64,
                 .input_len = 128,
                 .output_len = 64,
                 .vocab = 5000,
                 .rate = INFINITY};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return bs_usage(0);
        if (!strcmp(a, "--text")) {
            o.text = 1;
            continue;
        }
        if (!v) return bs_usage(2);
        i++;
        if (!strcmp(a, "--url")) o.url = v;
        else if (!strcmp(a, "--endpoint")) o.endpoint = v;
        else if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--api-key")) o.api_key = v;
        else if (!strcmp(a, "--json")) o.json_out = v;
        else if (!strcmp(a, "--num-prompts")) o.num_prompts = atoi(v);
        else if (!strcmp(a, "--input-len")) o.input_len = atoi(v);
        else if (!strcmp(a, "--output-len")) o.output_len = atoi(v);
        else if (!strcmp(a, "--concurrency")) o.concurrency = atoi(v);
        else if (!strcmp(a, "--vocab")) o.vocab = atoi(v);
        else if (!strcmp(a, "--warmup")) o.warmup = atoi(v);
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--request-rate")) o.rate = !strcmp(v, "inf") ? INFINITY : atof(v);
        else if (!strcmp(a, "--temperature")) o.temperature = atof(v);
        else return bs_usage(2);
    }
    if (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1 || o.vocab <= 100 ||
        !(o.temperature >= 0 && o.temperature <= 2) ||
        (strcmp(o.endpoint, "completions") && strcmp(o.endpoint, "chat")))
        return bs_usage(2);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    unsigned long long seed = o.seed;
    if (o.warmup > 0) {
        bs_req *w = calloc((size_t)o.warmup, sizeof *w);
        bs_run(&o, w, o.warmup, &seed);
        for (int i = 0; i < o.warmup; i++) free(w[i].body), free(w[i].itl), strbuf_free(&w[i].in);
        free(w);
    }
    int n = o.num_prompts;
    bs_req *rs = calloc((size_t)n, sizeof *rs);
    double dur = bs_run(&o, rs, n, &seed);
    double *ttft = calloc((size_t)n, sizeof(double)), *tpot = calloc((size_t)n, sizeof(double)),
           *e2e = calloc((size_t)n, sizeof(double));
    int n_itl = 0, ok = 0, n_tpot = 0;
    long long in_tok = 0, out_tok = 0;
    for (int i = 0; i < n; i++) n_itl += rs[i].n_itl;
    double *itl = calloc((size_t)n_itl + 1, sizeof(double));
    n_itl = 0;
    for (int i = 0; i < n; i++) {
        bs_req *r = &rs[i];
        if (!r->ok) {
            if (i < 5 || ok == 0) fprintf(stderr, "request %d failed: %s\n", i, r->err);
            continue;
        }
        ttft[ok] = r->t_first ? r->t_first - r->t_start : r->t_end - r->t_start;
        e2e[ok] = r->t_end - r->t_start;
        if (r->out_tokens > 1) tpot[n_tpot++] = (e2e[ok] - ttft[ok]) / (r->out_tokens - 1);
        ok++;
        in_tok += r->prompt_tokens;
        out_tok += r->out_tokens;
        if (r->n_itl) memcpy(itl + n_itl, r->itl, (size_t)r->n_itl * sizeof(double));
        n_itl += r->n_itl;
    }
    json_t *out = json_pack("{s:i, s:i, s:f, s:I, s:I, s:f, s:f, s:f, s:i, s:f}", "completed", ok,
                            "failed", n - ok, "duration_s", dur, "total_input_tokens",
                            (json_int_t)in_tok, "total_output_tokens", (json_int_t)out_tok,
                            "request_throughput", ok / dur, "output_throughput", out_tok / dur,
                            "total_token_throughput", (in_tok + out_tok) / dur, "concurrency",
                            o.concurrency, "request_rate", isfinite(o.rate) ? o.rate : -1.0);
    printf("============ Serving Benchmark Result ============\n");
    printf("%-40s%10d\n%-40s%10d\n", "Successful requests:", ok, "Failed requests:", n - ok);
    printf("%-40s%10.2f\n%-40s%10lld\n%-40s%10lld\n", "Benchmark duration (s):", dur,
           "Total input tokens:", in_tok, "Total generated tokens:", out_tok);
    printf("%-40s%10.2f\n%-40s%10.2f\n%-40s%10.2f\n", "Request throughput (req/s):", ok / dur,
           "Output token throughput (tok/s):", out_tok / dur,
           "Total token throughput (tok/s):", (in_tok + out_tok) / dur);
    bs_print("---------------Time to First Token----------------", "TTFT", bs_stats(ttft, ok), out);
    bs_print("-----Time per Output Token (excl. 1st token)------", "TPOT", bs_stats(tpot, n_tpot),
             out);
    bs_print("---------------Inter-token Latency----------------", "ITL", bs_stats(itl, n_itl),
             out);
    bs_print("----------------End-to-end Latency----------------", "E2EL", bs_stats(e2e, ok), out);
    printf("==================================================\n");
    if (o.json_out && json_dump_file(out, o.json_out, JSON_INDENT(1)))
        fprintf(stderr, "bench-serve: cannot write %s\n", o.json_out);
    json_decref(out);
    for (int i = 0; i < n; i++) free(rs[i].body), free(rs[i].itl), strbuf_free(&rs[i].in);
    free(rs), free(ttft), free(tpot), free(e2e), free(itl);
    curl_global_cleanup();
    return ok == n ? 0 : 1;
}
