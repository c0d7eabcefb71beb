/* bench_gemv.h - `strata bench --gemv`: the decode matmuls of a model one shape at a time.
 * A recorder put in front of the backend's matmul slots notes every distinct weight a few
 * forwards multiply by (the model's real weights, in backend memory); each is then timed
 * alone at m = 1 and m = 8 and held against the copy bandwidth measured in the same run.
 * Thread: main (the engine idle while the recorder is put in place or taken away). */
#ifndef STRATA_BENCH_GEMV_H
#define STRATA_BENCH_GEMV_H

#include "kernels/backend.h"

typedef struct bench_gemv bench_gemv;

/* Puts the recorder in front of b's ops (b->ops points at its table until stop). NULL when
 * out of memory. */
bench_gemv *bench_gemv_start(backend *b);
/* Restores b's own ops. */
void bench_gemv_stop(bench_gemv *g);
/* Times every recorded shape and prints one "gemv" line each; copy_gbs is the ceiling. */
void bench_gemv_report(bench_gemv *g, double copy_gbs);
void bench_gemv_free(bench_gemv *g);

#endif
