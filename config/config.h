/* config.h - the server configuration: every option written once, loaded from
 * defaults, a JSON config file, STRATA_<FLAG> environment variables and the command
 * line, in rising precedence (CLI > env > file > default).
 *
 * The option list is an X-macro so the struct, the defaults, the parser, the help
 * text, the env names and the config-file keys cannot drift apart. config/schema.json
 * and config/example.jsonc describe the same keys for humans and tools; a unit test
 * checks that the schema lists exactly these options. Not thread-safe: load once on
 * the main thread, then treat as read-only. */
#ifndef STRATA_CONFIG_H
#define STRATA_CONFIG_H

#include <stddef.h>

#include "engine/base/err.h"

/* X(field, flag, type, default, help). type: STR (char *, NULL = unset), INT (long
 * long), BOOL (int 0/1), NUM (double), LIST (config_list, empty by default: a flag
 * given several times, a comma-separated value, or a JSON array in the file; a later
 * source replaces the whole list of an earlier one). Flags are the field with '_' ->
 * '-'; the env name is STRATA_ + field in upper case; the config-file key is the flag
 * name. */
#define CONFIG_OPTION_LIST(X)                                                                      \
    X(config, "config", STR, NULL, "JSON config file (comments allowed); CLI and env win")         \
    X(model, "model", STR, NULL,                                                                   \
      "model directory, .gguf file, hub id, or a preset with --load-format dummy")                 \
    X(tokenizer, "tokenizer", STR, NULL, "directory with tokenizer files (default: the model's)")  \
    X(load_format, "load-format", STR, "auto", "auto (safetensors) or dummy (random weights)")     \
    X(revision, "revision", STR, NULL, "hub revision (branch, tag or commit)")                     \
    X(gguf_file, "gguf-file", STR, NULL,                                                           \
      "the .gguf file to load from the --model directory or hub repository")                       \
    X(mmap, "mmap", BOOL, 0,                                                                       \
      "CPU: read the weights in place from the checkpoint's mapping (default: copy them into "     \
      "huge pages at load, which decodes faster)")                                                 \
    X(served_model_name, "served-model-name", STR, NULL, "model id in the API (default: --model)") \
    X(host, "host", STR, "127.0.0.1", "address to listen on")                                      \
    X(port, "port", INT, 8080, "TCP port to listen on")                                            \
    X(api_key, "api-key", LIST, NULL,                                                              \
      "require 'Authorization: Bearer KEY' on the API routes (repeatable; commas separate keys)")  \
    X(api_key_file, "api-key-file", STR, NULL,                                                     \
      "file of API keys, one a line (blank lines and # comments ignored); adds to --api-key")      \
    X(metrics_auth, "metrics-auth", BOOL, 0, "/metrics needs an API key too (else it is open)")    \
    X(allowed_origins, "allowed-origins", LIST, NULL,                                              \
      "CORS: origins whose pages may call the API (scheme://host[:port], a comma list, or *)")     \
    X(device, "device", STR, "auto", "cpu, cuda, cuda:N or auto (CUDA when available)")            \
    X(threads, "threads", INT, 0, "CPU backend threads (0 = one per core)")                        \
    X(ple_on_device, "ple-on-device", BOOL, 0,                                                     \
      "Gemma 4: keep the per-layer embeddings on the GPU")                                         \
    X(quantization, "quantization", STR, "none",                                                   \
      "quantize the weight matrices at load: none, q8_0 or q4_k (CPU backend)")                    \
    X(kv_cache_dtype, "kv-cache-dtype", STR, "auto",                                               \
      "auto (bf16 for a 16-bit model on the GPU, else f32), bf16 or f32")                          \
    X(tool_call_parser, "tool-call-parser", STR, "auto",                                           \
      "how tool calls are read from the output: auto (from the model and its template), "          \
      "xml (Qwen3.5, Nemotron), gemma4, none")                                                     \
    X(host_sampling, "host-sampling", BOOL, 0,                                                     \
      "sample on the CPU even where the device has a sampler")                                     \
    X(http_threads, "http-threads", INT, 4, "HTTP worker threads")                                 \
    X(max_seqs, "max-seqs", INT, 8, "sequences decoded together (cache slots)")                    \
    X(ctx_size, "ctx-size", INT, 0, "positions per sequence (0 = the model's max)")                \
    X(kv_cache_memory, "kv-cache-memory", INT, 0,                                                  \
      "bytes of the paged kv cache (0 = auto: gpu-memory-utilization on a GPU)")                   \
    X(gpu_memory_utilization, "gpu-memory-utilization", NUM, 0.9,                                  \
      "share of GPU memory the model and an auto-sized kv cache may fill")                         \
    X(kv_block_size, "kv-block-size", INT, 16, "positions per kv cache block (a power of two)")    \
    X(prefix_cache, "prefix-cache", BOOL, 1,                                                       \
      "reuse the kv blocks and state of prompt prefixes seen before (--no-prefix-cache)")          \
    X(prefix_cache_memory, "prefix-cache-memory", INT, 1073741824,                                 \
      "bytes of recurrent-state snapshots the prefix cache keeps")                                 \
    X(prefill_chunk, "prefill-chunk", INT, 512, "prompt tokens per step (chunked prefill)")        \
    X(max_queue, "max-queue", INT, 256, "requests waiting for a slot before 429")                  \
    X(max_body_bytes, "max-body-bytes", INT, 4194304, "largest request body (413 above)")          \
    X(max_connections, "max-connections", INT, 1024,                                               \
      "open HTTP connections at most (a few more answer only /health and /metrics)")               \
    X(max_connections_per_ip, "max-connections-per-ip", INT, 0,                                    \
      "open HTTP connections per client address (0 = no limit)")                                   \
    X(idle_timeout, "idle-timeout", INT, 30, "seconds an idle or stalled connection lives")        \
    X(header_timeout, "header-timeout", INT, 10,                                                   \
      "seconds a client has to send a request's head and body")                                    \
    X(prepare_threads, "prepare-threads", INT, 4,                                                  \
      "requests parsed, rendered and tokenized at once (worker threads)")                          \
    X(request_timeout, "request-timeout", INT, 600, "seconds a request may take (0 = none)")       \
    X(sse_keepalive, "sse-keepalive", INT, 15,                                                     \
      "seconds a stream may stay silent before a ': keep-alive' comment (0 = off)")                \
    X(shutdown_timeout, "shutdown-timeout", INT, 30, "seconds to drain on SIGTERM")                \
    X(seed, "seed", INT, 0, "seed of dummy weights and of requests without one")                   \
    X(log_requests, "log-requests", BOOL, 0, "log one line per request to stderr")

enum { CONFIG_STR, CONFIG_INT, CONFIG_BOOL, CONFIG_NUM, CONFIG_LIST };

/* The values of a repeatable option, each a malloc'ed string without commas. */
typedef struct config_list {
    char **v;
    int n;
} config_list;

typedef struct config {
#define CONFIG_FIELD_STR char *
#define CONFIG_FIELD_INT long long
#define CONFIG_FIELD_BOOL int
#define CONFIG_FIELD_NUM double
#define CONFIG_FIELD_LIST config_list
#define CONFIG_FIELD(field, flag, type, def, help) CONFIG_FIELD_##type field;
    CONFIG_OPTION_LIST(CONFIG_FIELD)
#undef CONFIG_FIELD
} config;

/* Fills c with the defaults (strings are malloc'ed copies). */
int config_init(config *c, strata_err *err);
/* Frees the strings of c. */
void config_deinit(config *c);

/* Loads defaults, then the file named by --config / STRATA_CONFIG, then the
 * environment (envp: NULL-terminated "K=V" array, usually environ), then argv
 * (argv[0] is skipped), then adds the keys of --api-key-file to api_key (a file that
 * cannot be read or holds no key is an error naming it). Unknown flags / keys, bad
 * numbers and out-of-range values are STRATA_EINVALID naming the flag and where it
 * came from. *help is set when --help
 * was given. c must be config_init'ed; on error it holds a partial result. */
int config_load(config *c, int argc, char **argv, char **envp, int *help, strata_err *err);

/* Validates ranges (port, positive sizes, ...). Called by config_load. */
int config_check(const config *c, strata_err *err);

/* Writes the option help to buf (truncated to len). */
void config_format_help(char *buf, size_t len);

/* Number of options and the flag name / type of option i (tests, schema check). */
int config_count(void);
const char *config_flag_name(int i);
int config_flag_type(int i);

#endif
