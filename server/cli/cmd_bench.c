/* cmd_bench.c - `strata bench`: prefill time and batch-1 decode speed of a model,
 * held against the memory-read roofline measured in the same run (bytes read per
 * decode token / read bandwidth). Numbers for BENCHMARKS.md come from here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend_select.h"
#include "engine/batch.h"
#include "server/cli/cli_model.h"

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
    /* Bytes per decode token: every weight once (the embedding only as the head when
     * tied), the recurrent state read and written, the kv cache at the mean context. */
    double ctx_mean = o.prompt_len + o.gen_len / 2.0;
    double bytes = (double)in->weight_bytes + (double)in->state_bytes +
                   (double)in->kv_bytes_per_token * ctx_mean;
    /* Decode: greedy, batch 1, in segments with a bandwidth probe between them. This
     * machine's streaming bandwidth drifts between phases (about 50 and 85 GB/s on the dev
     * machine); each segment is held against the larger of the probes around it, so a
     * fraction is never flattered by a slow probe, and a phase change inside the decode
     * moves only one segment's ceiling. fraction = the time the segments would take at
     * their rooflines / the time they took. */
    enum { SEGS_MAX = 4 };
    int segs = o.gen_len >= 40 ? SEGS_MAX : 1;
    double probe[SEGS_MAX + 1] = {bw}, t_seg[SEGS_MAX] = {0};
    int n_seg[SEGS_MAX] = {0};
    int32_t tok = 0;
    for (int sg = 0, i = 0; sg < segs; sg++) {
        int end = (int)((int64_t)o.gen_len * (sg + 1) / segs);
        double t0 = cli_now();
        for (; i < end; i++) {
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
            n_seg[sg]++;
        }
        t_seg[sg] = cli_now() - t0;
        probe[sg + 1] = o.b->ops->read_bandwidth ? o.b->ops->read_bandwidth(o.b, (size_t)1 << 30) : 0;
    }
    double t_dec = 0, t_ideal = 0, bw_lo = probe[0], bw_hi = probe[0];
    for (int sg = 0; sg < segs; sg++) {
        double ceil_bw = probe[sg] > probe[sg + 1] ? probe[sg] : probe[sg + 1];
        t_dec += t_seg[sg];
        t_ideal += ceil_bw > 0 ? n_seg[sg] * bytes / (ceil_bw * 1e9) : 0;
    }
    for (int sg = 1; sg <= segs; sg++) {
        if (probe[sg] < bw_lo) bw_lo = probe[sg];
        if (probe[sg] > bw_hi) bw_hi = probe[sg];
    }
    double tok_s = o.gen_len / t_dec;
    double frac = t_dec > 0 ? t_ideal / t_dec : 0;
    double roof = frac > 0 ? tok_s / frac : 0; /* the segments' rooflines, time-weighted */
    printf("model            %s (%s%s)\n", o.model, in->arch, o.dummy ? ", dummy weights" : "");
    printf("backend          %s, %d threads\n", backend_name(o.b), o.b->threads);
    printf("load             %.3f s\n", t_load);
    printf("prefill          %d tokens in %.2f ms (%.1f tok/s)\n", o.prompt_len, t_prefill * 1e3,
           o.prompt_len / t_prefill);
    printf("decode           %d tokens, %.2f tok/s (%.2f ms/token)\n", o.gen_len, tok_s,
           1e3 / tok_s);
    printf("bytes/token      %.1f MB (weights %.1f MB, state %.1f MB, kv %.2f MB)\n", bytes / 1e6,
           in->weight_bytes / 1e6, in->state_bytes / 1e6, in->kv_bytes_per_token * ctx_mean / 1e6);
    printf("read bandwidth   %.2f-%.2f GB/s (%d probes around %d decode segment%s)\n", bw_lo, bw_hi,
           segs + 1, segs, segs > 1 ? "s" : "");
    printf("roofline         %.2f tok/s\n", roof);
    printf("fraction         %.3f of the memory-read roofline\n", frac);
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
