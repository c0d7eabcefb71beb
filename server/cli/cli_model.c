/* cli_model.c - option parsing and model opening for the offline commands. */
#include "server/cli/cli_model.h"

#include "kernels/backend_select.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cli_parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 16, cnt = 0;
    int32_t *v = malloc(sizeof(int32_t) * (size_t)cap);
    if (!v) return -1;
    while (*s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return -1;
        }
        if (cnt == cap) {
            int32_t *nv = realloc(v, sizeof(int32_t) * (size_t)(cap *= 2));
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        s = *end ? end + 1 : end;
    }
    *ids = v;
    *n = cnt;
    return 0;
}

static int parse_int(const char *flag, const char *v, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "strata: %s needs an integer in [%ld, %ld]\n", flag, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_float(const char *flag, const char *v, float *out) {
    char *end;
    float x = v ? strtof(v, &end) : 0;
    if (!v || end == v || *end) {
        fprintf(stderr, "strata: %s needs a number\n", flag);
        return -1;
    }
    *out = x;
    return 0;
}

int cli_model_parse(cli_model *o, int argc, char **argv, const char *usage) {
    memset(o, 0, sizeof *o);
    o->dt = DTYPE_COUNT;
    o->chunk = 256;
    o->max_seqs = 1;
    o->max_tokens = 16;
    o->prompt_len = 16;
    o->gen_len = 60;
    o->device = "auto";
    sampler_params_default(&o->sp);
    o->sp.logprobs = 0; /* the server's default: only with --logprobs */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1, rc = 0, seed;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 1;
        } else if (!strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--load-format")) {
            if (!v || (strcmp(v, "dummy") && strcmp(v, "safetensors") && strcmp(v, "auto"))) {
                fprintf(stderr, "strata: --load-format is dummy, safetensors or auto\n");
                return -1;
            }
            o->dummy = !strcmp(v, "dummy");
        } else if (!strcmp(a, "--dtype")) {
            if (!v) rc = -1;
            else if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) o->dt = DTYPE_BF16;
            else if (!strcmp(v, "f16") || !strcmp(v, "float16")) o->dt = DTYPE_F16;
            else if (!strcmp(v, "f32") || !strcmp(v, "float32")) o->dt = DTYPE_F32;
            else if (!strcmp(v, "auto")) o->dt = DTYPE_COUNT;
            else rc = -1;
            if (rc) fprintf(stderr, "strata: --dtype is bf16, f16, f32 or auto\n");
        } else if (!strcmp(a, "--quantization")) {
            if (!v || model_quant_parse(v, &o->quant)) {
                fprintf(stderr, "strata: --quantization is none, q8_0 or q4_k\n");
                return -1;
            }
        } else if (!strcmp(a, "--device")) {
            o->device = v;
        } else if (!strcmp(a, "--threads")) {
            rc = parse_int(a, v, 0, 1024, &o->threads);
        } else if (!strcmp(a, "--ctx-size")) {
            rc = parse_int(a, v, 1, 1 << 24, &o->ctx_size);
        } else if (!strcmp(a, "--prefill-chunk")) {
            rc = parse_int(a, v, 1, 1 << 16, &o->chunk);
        } else if (!strcmp(a, "--prompt-ids")) {
            o->prompt_ids = v;
        } else if (!strcmp(a, "--prompt")) {
            o->prompt = v;
        } else if (!strcmp(a, "--max-tokens")) {
            rc = parse_int(a, v, 0, 1 << 24, &o->max_tokens);
        } else if (!strcmp(a, "--out")) {
            o->out = v;
        } else if (!strcmp(a, "--prompt-len")) {
            rc = parse_int(a, v, 1, 1 << 20, &o->prompt_len);
        } else if (!strcmp(a, "--gen-len")) {
            rc = parse_int(a, v, 1, 1 << 20, &o->gen_len);
        } else if (!strcmp(a, "--temperature")) {
            rc = parse_float(a, v, &o->sp.temperature);
        } else if (!strcmp(a, "--top-p")) {
            rc = parse_float(a, v, &o->sp.top_p);
        } else if (!strcmp(a, "--min-p")) {
            rc = parse_float(a, v, &o->sp.min_p);
        } else if (!strcmp(a, "--top-k")) {
            rc = parse_int(a, v, 0, 1 << 24, &o->sp.top_k);
        } else if (!strcmp(a, "--repetition-penalty")) {
            rc = parse_float(a, v, &o->sp.repetition_penalty);
        } else if (!strcmp(a, "--presence-penalty")) {
            rc = parse_float(a, v, &o->sp.presence_penalty);
        } else if (!strcmp(a, "--frequency-penalty")) {
            rc = parse_float(a, v, &o->sp.frequency_penalty);
        } else if (!strcmp(a, "--logprobs")) {
            rc = parse_int(a, v, 0, SAMPLER_MAX_TOP_LOGPROBS, &o->sp.top_logprobs);
            o->sp.logprobs = 1;
        } else if (!strcmp(a, "--seed")) {
            rc = parse_int(a, v, 0, INT_MAX, &seed);
            o->sp.seed = (uint64_t)seed;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = 1;
            used = 0;
        } else if (!strcmp(a, "--ple-on-device")) {
            o->ple_on_device = 1;
            used = 0;
        } else if (!strcmp(a, "--kv-cache-dtype")) {
            if ((o->kv_cache = model_kv_cache_parse(v ? v : "?")) < 0) {
                fprintf(stderr, "strata: --kv-cache-dtype is auto, bf16 or f32\n");
                return -1;
            }
        } else if (!strcmp(a, "--host-sampling")) {
            o->host_sampling = 1;
            used = 0;
        } else if (!strcmp(a, "--mmap")) {
            o->weights_mmap = 1;
            used = 0;
        } else {
            fprintf(stderr, "strata: unknown option '%s'\n%s", a, usage);
            return -1;
        }
        if (rc) return -1;
        if (used && !v) {
            fprintf(stderr, "strata: %s needs a value\n", a);
            return -1;
        }
        i += used;
    }
    if (!o->model) {
        fprintf(stderr, "strata: --model is required\n%s", usage);
        return -1;
    }
    return 0;
}

/* Device memory in MiB, for the load report and for "does not fit" errors. */
static void cli_print_device_memory(const backend *b, const char *when) {
    backend_mem dm;
    if (backend_memory(b, &dm)) return;
    fprintf(stderr,
            "strata: %s device memory %s: %zu MiB held (peak %zu MiB), %zu MiB free of %zu MiB\n",
            backend_name(b), when, dm.used >> 20, dm.peak >> 20, dm.free >> 20, dm.total >> 20);
}

int cli_model_open(cli_model *o) {
    strata_err err = {0};
    if (backend_create(o->device, o->threads, &o->b, &err)) {
        fprintf(stderr, "strata: %s\n", err.msg);
        return -1;
    }
    model_opts mo = {.path = o->model,
                     .load_dummy = o->dummy,
                     .weight_dtype = o->dt,
                     .quant = o->quant,
                     .max_seqs = o->max_seqs,
                     .ctx_size = o->ctx_size,
                     .step_tokens = o->chunk,
                     .ple_on_device = o->ple_on_device,
                     .kv_cache = o->kv_cache,
                     .weights_mmap = o->weights_mmap};
    if (model_open(&o->m, &mo, o->b, &err)) {
        fprintf(stderr, "strata: %s\n", err.msg);
        if (err.code == STRATA_ENOMEM) cli_print_device_memory(o->b, "when it ran out");
        backend_destroy(o->b);
        o->b = NULL;
        return -1;
    }
    cli_print_device_memory(o->b, "after load");
    return 0;
}

void cli_model_close(cli_model *o) {
    model_close(o->m);
    backend_destroy(o->b);
    o->m = NULL;
    o->b = NULL;
}
