/* cmd_bench.c - `strata bench`: prefill time and batch-1 decode speed of a model,
 * held against the memory-read roofline measured in the same run (bytes read per
 * decode token / read bandwidth). Numbers for BENCHMARKS.md come from here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend_select.h"
#include "engine/batch.h"
#include "server/cli_model.h"

static const char bench_usage[] =
    "usage: strata bench --model DIR|PRESET [--load-format dummy] [--prompt-len 16]\n"
    "         [--gen-len 60] [--dtype bf16|f16|f32] [--device cpu|cuda|auto] [--threads N]\n"
    "         [--prefill-chunk N]\n"
    "Prints prefill ms, decode tok/s, bytes read per decode token, the measured read\n"
    "bandwidth and the fraction of the roofline reached.\n";

int cmd_bench(int argc, char **argv) {
    cli_model o;
    int rc = cli_model_parse(&o, argc, argv, bench_usage);
    if (rc) return rc > 0 ? 0 : 2;
    if (o.ctx_size == 0) o.ctx_size = o.prompt_len + o.gen_len + 1;
    if (o.chunk < o.prompt_len) o.chunk = o.prompt_len;
    double t_load = cli_now();
    if (cli_model_open(&o)) return 1;
    t_load = cli_now() - t_load;
    const model_info *in = model_get_info(o.m);
    strata_err err = {0};
    batch_buf bb = {0};
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)o.prompt_len);
    int32_t *rows = malloc(sizeof(int32_t));
    float *logits = malloc(sizeof(float) * (size_t)in->vocab);
    rc = 1;
    if (!ids || !rows || !logits || batch_buf_init(&bb, o.chunk, 1, &err)) {
        fprintf(stderr, "strata: out of memory\n");
        goto out;
    }
    uint64_t x = 12345;
    for (int i = 0; i < o.prompt_len; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)in->vocab);
    }
    double bw = o.b->ops->read_bandwidth ? o.b->ops->read_bandwidth(o.b, (size_t)1 << 30) : 0;

    /* Prefill: warm once (page faults of mmapped or fresh weights), then time. */
    double t_prefill = 0;
    for (int rep = 0; rep < 2; rep++) {
        model_reset_slot(o.m, 0);
        batch_buf_clear(&bb);
        batch_buf_add(&bb, 0, 0, o.prompt_len);
        rows[0] = o.prompt_len - 1;
        double t0 = cli_now();
        if (model_forward(o.m, &bb.bt, ids, rows, 1, logits, &err)) {
            fprintf(stderr, "strata: %s\n", err.msg);
            goto out;
        }
        t_prefill = cli_now() - t0;
    }
    /* Decode: greedy, batch 1. */
    int32_t tok = 0;
    double t0 = cli_now();
    for (int i = 0; i < o.gen_len; i++) {
        float best = logits[0];
        tok = 0;
        for (int v = 1; v < in->vocab; v++)
            if (logits[v] > best) best = logits[v], tok = v;
        batch_buf_clear(&bb);
        batch_buf_add(&bb, 0, o.prompt_len + i, 1);
        rows[0] = 0;
        /* Decode steps of one shape replay one captured graph where the backend has
         * graphs; a refused replay runs the step again eagerly. */
        int g = backend_graph_begin(o.b, 1, &err);
        int frc = model_forward(o.m, &bb.bt, &tok, rows, 1, logits, &err);
        if (g >= 0 && (backend_graph_end(o.b, &err) || frc))
            frc = model_forward(o.m, &bb.bt, &tok, rows, 1, logits, &err);
        if (frc) {
            fprintf(stderr, "strata: %s\n", err.msg);
            goto out;
        }
    }
    double t_dec = cli_now() - t0;
    double tok_s = o.gen_len / t_dec;
    /* This machine's streaming bandwidth drifts between phases; the probe runs before and
     * after the decode and the larger reading sets the roofline, so a fraction is never
     * flattered by a slow probe. */
    double bw_after = o.b->ops->read_bandwidth ? o.b->ops->read_bandwidth(o.b, (size_t)1 << 30) : 0;
    double bw_before = bw;
    if (bw_after > bw) bw = bw_after;
    /* Bytes per decode token: every weight once (the embedding only as the head when
     * tied), the recurrent state read and written, the kv cache at the mean context. */
    double ctx_mean = o.prompt_len + o.gen_len / 2.0;
    double bytes = (double)in->weight_bytes + (double)in->state_bytes +
                   (double)in->kv_bytes_per_token * ctx_mean;
    double roof = bw > 0 ? bw * 1e9 / bytes : 0;
    printf("model            %s (%s%s)\n", o.model, in->arch, o.dummy ? ", dummy weights" : "");
    printf("backend          %s, %d threads\n", backend_name(o.b), o.b->threads);
    printf("load             %.3f s\n", t_load);
    printf("prefill          %d tokens in %.2f ms (%.1f tok/s)\n", o.prompt_len, t_prefill * 1e3,
           o.prompt_len / t_prefill);
    printf("decode           %d tokens, %.2f tok/s (%.2f ms/token)\n", o.gen_len, tok_s,
           1e3 / tok_s);
    printf("bytes/token      %.1f MB (weights %.1f MB, state %.1f MB, kv %.2f MB)\n", bytes / 1e6,
           in->weight_bytes / 1e6, in->state_bytes / 1e6, in->kv_bytes_per_token * ctx_mean / 1e6);
    printf("read bandwidth   %.2f GB/s (measured now: %.2f before, %.2f after the decode)\n", bw,
           bw_before, bw_after);
    printf("roofline         %.2f tok/s\n", roof);
    printf("fraction         %.3f of the memory-read roofline\n", roof > 0 ? tok_s / roof : 0);
    backend_mem mem;
    if (backend_memory(o.b, &mem) == 0)
        printf("device memory    %.1f MiB peak, %.1f MiB in use\n", mem.peak / 1048576.0,
               mem.used / 1048576.0);
    rc = 0;
out:
    batch_buf_deinit(&bb);
    free(ids);
    free(rows);
    free(logits);
    cli_model_close(&o);
    return rc;
}
