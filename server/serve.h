/* serve.h - the daemon's one door: `strata serve`, run by the command dispatcher
 * (server/cli). Everything else of server/ is internal to the daemon. */
#ifndef STRATA_SERVE_H
#define STRATA_SERVE_H

/* Runs the OpenAI-compatible daemon until it drains; returns the SERVE_EXIT_* status
 * (server_internal.h, README "Running it in production"). */
int cmd_serve(int argc, char **argv);

#endif
