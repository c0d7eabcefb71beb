/* cmd_bench.c - `strata bench`: prefill time and batch-1 decode speed of a model through
 * the engine's step loop (the server's: scheduler, graphs, sampler), held against the
 * memory-read roofline measured in the same run (bytes read per decode token / read
 * bandwidth). Numbers for BENCHMARKS.md come from here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/text/tokenizer.h"
#include "kernels/backend_select.h"
#include "server/cli/bench_gemv.h"
#include "server/cli/cli_engine.h"
#include "server/serve.h"

static const char bench_usage[] =
    "usage: strata bench --model DIR|PRESET [--load-format dummy] [--prompt-len 16]\n"
    "         [--gen-len 60] [--dtype bf16|f16|f32] [--quantization none|q8_0|q4_k]\n"
    "         [--device cpu|cuda|auto] [--threads N]\n"
    "         [--prefill-chunk N] [--kv-cache-dtype auto|bf16|f32] [--host-sampling] [--mmap]\n"
    "         [--print-tokens] [--gemv] [--profile] [--profile-prefill]\n"
    "Prints prefill ms, decode tok/s, bytes read per decode token, the measured read\n"
    "bandwidth and the fraction of the roofline reached. --print-tokens also prints the\n"
    "prompt and the greedy tokens (ids, and text with the checkpoint's tokenizer).\n"
    "--host-sampling samples on the CPU where the device has a sampler. --gemv then times\n"
    "every distinct matmul shape of a decode step alone, at m = 1 and m = 8, against the\n"
    "copy bandwidth (\"gemv\" lines). --profile then runs one more decode step eagerly with\n"
    "every op timed, five times (\"profile\" lines: mean time per kind of op, most first,\n"
    "and the step's time outside the ops). --profile-prefill does the same for a prefill\n"
    "of the prompt, three times (\"profile prefill\" and \"profile pf op\" lines).\n";

/* This machine's streaming bandwidth drifts between phases (about 50 and 85 GB/s on the
 * dev machine), so decode runs in segments with a bandwidth probe between them; each
 * segment is held against the larger of the probes around it, so a fraction is never
 * flattered by a slow probe and a phase change inside the decode moves only one
 * segment's ceiling. The probes run from the engine's step callback with nothing on the
 * backend: when a segment ends, the step already launched behind its last one is let
 * finish (the callback asks the engine to hold), it counts for the next segment from the
 * moment the last one ended, and the probe runs after it, its time counted nowhere. */
enum { BENCH_SEGS_MAX = 4 };

typedef struct bench_clock {
    backend *b;
    int measuring; /* the timed sequence runs (not the warm-up) */
    int segs, gen_len, n_decode;
    double prefill;   /* seconds of the timed prefill step */
    double seg_start; /* when the current segment's time began */
    double seg_end;   /* when the last segment ended, while a probe is due */
    int probe_due;    /* probe after this step (the one launched behind a segment's end) */
    double probe[BENCH_SEGS_MAX + 1], t_seg[BENCH_SEGS_MAX];
    int n_seg[BENCH_SEGS_MAX];
    int graph_steps;             /* decode steps that replayed a captured graph */
    int eager_steps;             /* decode steps that ran eagerly */
    int chained_steps;           /* decode steps launched behind the one before */
    int dev_tokens, host_tokens; /* timed tokens picked by the device's / the host's sampler */
    double last_step;            /* seconds of the last decode step, measured or not */
    double last_prefill;         /* seconds of the last prefill step, measured or not */
} bench_clock;

static double bench_probe(backend *b) {
    return b->ops->read_bandwidth ? b->ops->read_bandwidth(b, (size_t)1 << 30) : 0;
}

/* Step thread. */
static int bench_on_step(void *ud, const engine_step_info *si) {
    bench_clock *c = ud;
    if (si->n_decode) c->last_step = si->t_end - si->t_start;
    else c->last_prefill = si->t_end - si->t_start;
    if (!c->measuring) return 0;
    c->dev_tokens += si->sampled_device;
    c->host_tokens += si->sampled_host;
    if (!si->n_decode) { /* the prefill step: the first token comes with it */
        c->prefill = si->t_end - si->t_start;
        c->seg_start = si->t_end;
        return 0;
    }
    int sg = (int)((int64_t)c->n_decode * c->segs / c->gen_len);
    c->n_decode++;
    c->n_seg[sg]++;
    c->graph_steps += si->graph == 1;
    c->eager_steps += si->graph == -1;
    c->chained_steps += si->chained;
    if (c->probe_due) {
        double t0 = strata_now();
        c->probe[sg] = bench_probe(c->b);
        c->seg_start = c->seg_end + (strata_now() - t0);
        c->probe_due = 0;
    }
    if (c->n_decode < (int)((int64_t)c->gen_len * (sg + 1) / c->segs)) return 0;
    c->t_seg[sg] = si->t_end - c->seg_start;
    if (sg + 1 == c->segs) { /* the last step: nothing runs behind it */
        c->probe[sg + 1] = bench_probe(c->b);
        return 0;
    }
    c->seg_end = si->t_end;
    c->probe_due = 1;
    return 1;
}

/* One more decode step (or, prefill set, one more prefill of the prompt), eager, with
 * every op timed (backend_ops.profile), run BENCH_PROFILE_RUNS times (a prefill
 * BENCH_PROFILE_PREFILL_RUNS times: it is the last forward of a run of one token):
 * "profile" lines, the kinds of op by their mean time, most first, and the step's mean
 * wall time, whose part outside the ops is the host's (sampling, the batch). The engine is
 * idle between runs, so the backend may be switched from here. */
enum { BENCH_PROFILE_RUNS = 5, BENCH_PROFILE_PREFILL_RUNS = 3, BENCH_PROFILE_KINDS = 64 };

static int bench_profile(engine *e, cli_model *o, const int32_t *ids, bench_clock *clk,
                         int prefill) {
    int want = prefill ? BENCH_PROFILE_PREFILL_RUNS : BENCH_PROFILE_RUNS;
    if (!backend_supports(o->b, BK_OP_PROFILE, DTYPE_COUNT)) {
        printf("profile          the %s backend has no op timers\n", backend_name(o->b));
        return 0;
    }
    bk_op_time sum[BENCH_PROFILE_KINDS];
    int kinds = 0, runs = 0;
    double wall = 0;
    clk->measuring = 0;
    o->b->ops->profile(o->b, 1);
    for (; runs < want; runs++) {
        bk_op_time t[BENCH_PROFILE_KINDS];
        cli_result r = {0};
        int bad = cli_run(e, o, ids, o->prompt_len, prefill ? 1 : 2, NULL, NULL, &r);
        int n = bad ? -1 : o->b->ops->profile_read(o->b, t, BENCH_PROFILE_KINDS);
        cli_result_free(&r);
        if (n < 0) break;
        wall += prefill ? clk->last_prefill : clk->last_step;
        for (int i = 0; i < n; i++) { /* by name: the order of the kinds differs per run */
            int k = 0;
            while (k < kinds && strcmp(sum[k].op, t[i].op)) k++;
            if (k == kinds) sum[kinds++] = (bk_op_time){t[i].op, 0, 0};
            sum[k].count += t[i].count;
            sum[k].ms += t[i].ms;
        }
    }
    o->b->ops->profile(o->b, 0);
    if (runs < want) {
        fprintf(stderr, "strata: the profiled %s did not run\n",
                prefill ? "prefill" : "decode step");
        return -1;
    }
    for (int i = 1; i < kinds; i++) /* most time first */
        for (int j = i; j > 0 && sum[j].ms > sum[j - 1].ms; j--) {
            bk_op_time x = sum[j];
            sum[j] = sum[j - 1], sum[j - 1] = x;
        }
    double all = 0;
    int ops = 0;
    for (int i = 0; i < kinds; i++) all += sum[i].ms / runs, ops += sum[i].count;
    ops /= runs;
    wall = wall * 1e3 / runs;
    if (prefill)
        printf("profile prefill  one prefill of %d tokens, eager: %d ops, %.3f ms (mean of %d)\n",
               o->prompt_len, ops, all, runs);
    else
        printf("profile          one decode step, eager: %d ops, %.3f ms (mean of %d steps)\n", ops,
               all, runs);
    printf("%-17s%.3f ms wall, %.3f ms outside the ops (host: sampling, batch)\n",
           prefill ? "profile prefill" : "profile step", wall, wall > all ? wall - all : 0.0);
    for (int i = 0; i < kinds; i++)
        printf("%-17s%-14s %5d ops %10.3f ms %6.1f%%\n", prefill ? "profile pf op" : "profile op",
               sum[i].op, sum[i].count / runs, sum[i].ms / runs,
               all > 0 ? 100.0 * sum[i].ms / runs / all : 0.0);
    return 0;
}

static void bench_print_ids(const char *what, const int32_t *ids, int n) {
    printf("%-17s", what);
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    printf("\n");
}

int cmd_bench(int argc, char **argv) {
    cli_model o;
    int print_tokens = 0, gemv = 0, profile = 0, profile_prefill = 0;
    /* --print-tokens, --gemv and --profile(-prefill) are ours; the rest are the shared
     * model options */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--print-tokens") || !strcmp(argv[i], "--gemv") ||
            !strcmp(argv[i], "--profile") || !strcmp(argv[i], "--profile-prefill")) {
            if (!strcmp(argv[i], "--gemv")) gemv = 1;
            else if (!strcmp(argv[i], "--profile")) profile = 1;
            else if (!strcmp(argv[i], "--profile-prefill")) profile_prefill = 1;
            else print_tokens = 1;
            memmove(argv + i, argv + i + 1, sizeof *argv * (size_t)(argc - i));
            argc--, i--;
        }
    int rc = cli_model_parse(&o, argc, argv, bench_usage);
    if (rc) return rc > 0 ? 0 : 2;
    if (o.ctx_size == 0) o.ctx_size = o.prompt_len + o.gen_len + 2;
    if (o.chunk < o.prompt_len) o.chunk = o.prompt_len;
    /* greedy, to the length asked for: a decode of fixed work */
    o.sp.temperature = 0;
    o.ignore_eos = 1;
    double t_load = strata_now();
    if (cli_model_open(&o)) return 1;
    t_load = strata_now() - t_load;
    const model_info *in = model_get_info(o.m);
    tokenizer *tok = NULL;
    strata_err err = {0};
    if (!o.dummy && model_text_open(o.model, &tok, NULL, &err))
        tok = NULL; /* ids only: text is "[id]" */
    bench_clock clk = {
        .b = o.b, .gen_len = o.gen_len, .segs = o.gen_len >= 40 ? BENCH_SEGS_MAX : 1};
    engine *e = NULL;
    cli_result warm = {0}, res = {0};
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)o.prompt_len);
    rc = 1;
    if (!ids) {
        fprintf(stderr, "strata: out of memory\n");
        goto out;
    }
    uint64_t x = 12345;
    for (int i = 0; i < o.prompt_len; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)in->vocab);
    }
    if (cli_engine_open(&o, tok, bench_on_step, &clk, &e)) goto out;
    /* warm-up: page faults of mmapped or fresh weights, the decode graph's captures (one
     * per half of the staging ring: two decode steps, the second behind the first) */
    if (cli_run(e, &o, ids, o.prompt_len, 3, NULL, NULL, &warm)) goto out;
    clk.probe[0] = bench_probe(o.b);
    clk.measuring = 1;
    /* one prefill step, then gen_len decode steps */
    if (cli_run(e, &o, ids, o.prompt_len, o.gen_len + 1, NULL, NULL, &res)) goto out;
    if (clk.n_decode != o.gen_len) {
        fprintf(stderr, "strata: %d decode steps ran, %d expected\n", clk.n_decode, o.gen_len);
        goto out;
    }
    /* Bytes per decode token: every weight once (the embedding only as the head when
     * tied), the recurrent state read and written, the kv cache at the mean context. */
    double ctx_mean = o.prompt_len + o.gen_len / 2.0;
    double bytes = (double)in->weight_bytes + (double)in->state_bytes +
                   (double)in->kv_bytes_per_token * ctx_mean;
    /* fraction = the time the segments would take at their rooflines / the time they took */
    double t_dec = 0, t_ideal = 0, bw_lo = clk.probe[0], bw_hi = clk.probe[0];
    for (int sg = 0; sg < clk.segs; sg++) {
        double ceil_bw = clk.probe[sg] > clk.probe[sg + 1] ? clk.probe[sg] : clk.probe[sg + 1];
        t_dec += clk.t_seg[sg];
        t_ideal += ceil_bw > 0 ? clk.n_seg[sg] * bytes / (ceil_bw * 1e9) : 0;
        if (clk.probe[sg + 1] < bw_lo) bw_lo = clk.probe[sg + 1];
        if (clk.probe[sg + 1] > bw_hi) bw_hi = clk.probe[sg + 1];
    }
    double tok_s = o.gen_len / t_dec;
    double frac = t_dec > 0 ? t_ideal / t_dec : 0;
    double roof = frac > 0 ? tok_s / frac : 0; /* the segments' rooflines, time-weighted */
    printf("model            %s (%s%s)\n", o.model, in->arch, o.dummy ? ", dummy weights" : "");
    printf("backend          %s, %d threads%s\n", backend_name(o.b), o.b->threads,
           clk.graph_steps ? ", decode graphs" : "");
    printf("load             %.3f s\n", t_load);
    printf("decode steps     %d replayed a graph, %d eager, %d chained on the device\n",
           clk.graph_steps, clk.eager_steps, clk.chained_steps);
    printf("sampler          %d tokens on the device, %d on the host\n", clk.dev_tokens,
           clk.host_tokens);
    printf("prefill          %d tokens in %.2f ms (%.1f tok/s)\n", o.prompt_len, clk.prefill * 1e3,
           o.prompt_len / clk.prefill);
    printf("decode           %d tokens, %.2f tok/s (%.2f ms/token)\n", o.gen_len, tok_s,
           1e3 / tok_s);
    printf("bytes/token      %.1f MB (weights %.1f MB, state %.1f MB, kv %.2f MB)\n", bytes / 1e6,
           in->weight_bytes / 1e6, in->state_bytes / 1e6, in->kv_bytes_per_token * ctx_mean / 1e6);
    printf("read bandwidth   %.2f-%.2f GB/s (%d probes around %d decode segment%s)\n", bw_lo, bw_hi,
           clk.segs + 1, clk.segs, clk.segs > 1 ? "s" : "");
    printf("roofline         %.2f tok/s\n", roof);
    printf("fraction         %.3f of the memory-read roofline\n", frac);
    backend_mem mem;
    if (backend_memory(o.b, &mem) == 0)
        printf("device memory    %.1f MiB peak, %.1f MiB in use\n", mem.peak / 1048576.0,
               mem.used / 1048576.0);
    if (print_tokens) {
        bench_print_ids("prompt ids", ids, o.prompt_len);
        bench_print_ids("generated ids", res.ids, res.n_ids);
        if (tok) printf("generated text   %.*s\n", (int)res.text.len, res.text.p ? res.text.p : "");
    }
    if (gemv) { /* the shapes of two more decode steps, then each timed alone */
        bench_gemv *g = bench_gemv_start(o.b);
        cli_result rec = {0};
        clk.measuring = 0;
        int bad = !g || cli_run(e, &o, ids, o.prompt_len, 3, NULL, NULL, &rec);
        bench_gemv_stop(g);
        cli_result_free(&rec);
        if (!bad) bench_gemv_report(g, bw_hi);
        bench_gemv_free(g);
        if (bad) {
            fprintf(stderr, "strata: the gemv benchmark could not run\n");
            goto out;
        }
    }
    if (profile && bench_profile(e, &o, ids, &clk, 0)) goto out;
    if (profile_prefill && bench_profile(e, &o, ids, &clk, 1)) goto out;
    rc = 0;
out:
    engine_destroy(e);
    cli_result_free(&warm);
    cli_result_free(&res);
    free(ids);
    tok_free(tok);
    cli_model_close(&o);
    return rc;
}
