/* commands.h - the subcommands of the strata binary, listed once.
 * X(name, function, one-line help). Each function lives in server/cli/cmd_<name>.c
 * (serve: the daemon, server/cmd_serve.c) and has the signature
 * int fn(int argc, char **argv) (argv[0] is the command). */
#ifndef STRATA_COMMANDS_H
#define STRATA_COMMANDS_H

#include "server/serve.h"

#define STRATA_COMMAND_LIST(X)                                                                     \
    X("generate", cmd_generate, "run a prompt through a model and print the tokens")               \
    X("logits", cmd_logits, "write the f32 logits of every prompt position")                       \
    X("bench", cmd_bench, "measure prefill and decode against the memory roofline")                \
    X("quantize", cmd_quantize, "write a checkpoint as a GGUF file llama.cpp reads")               \
    X("pull", cmd_pull, "download a hub model into the Hugging Face cache")                        \
    X("tokenize", cmd_tokenize, "encode text to ids (or --decode ids) with a tokenizer")           \
    X("chat-template", cmd_chat_template, "render a model's chat template for a conversation")     \
    X("serve", cmd_serve, "run the OpenAI-compatible HTTP server")                                 \
    X("bench-serve", cmd_bench_serve, "load-test a running server (vllm bench serve)")

#define STRATA_COMMAND_DECL(name, fn, help) int fn(int argc, char **argv);
STRATA_COMMAND_LIST(STRATA_COMMAND_DECL)
#undef STRATA_COMMAND_DECL

#endif
