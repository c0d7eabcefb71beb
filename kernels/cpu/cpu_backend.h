/* cpu_backend.h - CPU-backend extras beyond kernels/backend.h: choosing the ISA (tests,
 * benchmarks) and measuring the memory roofline that decode is held against.
 *
 * backend_cpu_create() makes the backend with the best ISA this machine runs. It needs no reserve call: every op works in
 * registers or on the stack (attention uses an online softmax, matmul converts weights
 * in registers), so nothing is allocated after create. */
#ifndef STRATA_CPU_BACKEND_H
#define STRATA_CPU_BACKEND_H

#include <stddef.h>

#include "kernels/backend.h"

/* CPU backend with n_threads workers (0 = one per core). Caller frees with
 * backend_destroy. Thread: any; the returned backend belongs to one thread. */
int backend_cpu_create(int n_threads, backend **out, strata_err *err);

/* X(name, enum suffix) in increasing preference. */
#define CPU_ISA_LIST(X) X("scalar", SCALAR) X("avx2", AVX2) X("avx512", AVX512)

typedef enum {
    CPU_ISA_AUTO = -1,
#define CPU_ISA_ENUM(s, n) CPU_ISA_##n,
    CPU_ISA_LIST(CPU_ISA_ENUM)
#undef CPU_ISA_ENUM
        CPU_ISA_COUNT
} cpu_isa;

/* 1 when this CPU (and OS) can run kernels built for isa; scalar always can. avx2 means
 * AVX2 + FMA + F16C; avx512 means F + BW + VL + DQ + BF16
 * + VNNI. */
int cpu_backend_isa_supported(cpu_isa isa);
/* "scalar" / "avx2" / "avx512". */
const char *cpu_backend_isa_name(cpu_isa isa);
/* Like backend_cpu_create, with the kernel ISA forced (CPU_ISA_AUTO = best supported).
 * STRATA_EUNSUPPORTED when the machine cannot run isa. Caller frees with backend_destroy. */
int cpu_backend_create_isa(int n_threads, cpu_isa isa, backend **out, strata_err *err);
/* The ISA a CPU backend runs. */
cpu_isa cpu_backend_isa(const backend *b);

/* Multi-threaded streaming read bandwidth in GB/s (1e9 bytes/s), the decode roofline:
 * sums a buffer of `bytes` (use much more than the last-level cache, e.g. 1 GiB) on every
 * pool thread in 32 MiB windows (one contiguous range per thread, as a matmul splits W)
 * and returns the best window of three passes, i.e. the peak rate of a ~1 ms read at this
 * moment. The buffer is 2 MiB aligned and asked for transparent huge pages like the
 * weights and caches decode reads (models/load/wsrc.c, the backend's alloc); it is fully
 * THP-backed when the kernel has huge pages to give (checked with AnonHugePages). Allocates
 * and frees the buffer; 0 when it cannot allocate. Not for the step loop. Thread: the
 * backend's thread. */
double cpu_membw_read_gbs(backend *b, size_t bytes);
/* Seconds one matmul shape takes: times reps calls of out[m, n] = x[m, k] · Wᵀ, each on a
 * different copy of a random W of dtype dt (together more than span bytes, 512 MiB when 0;
 * huge pages, so W comes from memory as in decode), and returns the fastest call's time
 * through *best and the median call's through *median (when not NULL). Allocates its own
 * W, x, out. Not for the step loop. */
int cpu_membw_matmul_time(backend *b, int n, int k, dtype dt, int m, int reps, size_t span,
                          double *best, double *median, strata_err *err);

#endif
