/* main.c - the strata binary: dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "server/cli/commands.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
#define STRATA_COMMAND_ROW(name, fn, help) {name, fn, help},
    STRATA_COMMAND_LIST(STRATA_COMMAND_ROW)
#undef STRATA_COMMAND_ROW
};

static void usage(FILE *f) {
    fprintf(f, "usage: strata <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`strata <command> --help` lists a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
