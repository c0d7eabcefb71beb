/* bench_cpu_matmul.c - matmul bandwidth of the CPU backend against this machine's
 * measured read bandwidth (the decode roofline), on Qwen3.5-0.8B shapes.
 *
 * Build and run from the repo root (after `make`, which builds build/libstrata.a):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I. -pthread tools/bench_cpu_matmul.c build/libstrata.a \
 *       -o build/bench_cpu_matmul -lm && build/bench_cpu_matmul [threads] [isa]
 * or, without the rest of the library:
 *   gcc ... tools/bench_cpu_matmul.c kernels/cpu/ *.o engine/dtype.c engine/err.c
 * isa: scalar | avx2 | avx512 (default: the best this CPU runs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    cpu_isa isa = CPU_ISA_AUTO;
    if (argc > 2)
        for (int i = 0; i < CPU_ISA_COUNT; i++)
            if (strcmp(argv[2], cpu_backend_isa_name((cpu_isa)i)) == 0) isa = (cpu_isa)i;
    strata_err err = {0};
    backend *b = NULL;
    if (cpu_backend_create_isa(threads, isa, &b, &err) != 0) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    double bw = cpu_membw_read_gbs(b, (size_t)1 << 30);
    printf("cpu backend: %d threads, isa %s; streaming read %.1f GB/s (1 GiB)\n", threads,
           cpu_backend_isa_name(cpu_backend_isa(b)), bw);
    static const struct {
        const char *what;
        int n, k;
    } shapes[] = {
        {"gate/up  [3584,1024]", 3584, 1024},
        {"down     [1024,3584]", 1024, 3584},
        {"qkv      [6144,1024]", 6144, 1024},
        {"lm_head  [248320,1024]", 248320, 1024},
    };
    static const int ms[] = {1, 4, 8, 64, 256};
    static const dtype dts[] = {DTYPE_BF16, DTYPE_F32};
    for (size_t di = 0; di < 2; di++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
                int m = ms[mi], n = shapes[si].n, k = shapes[si].k;
                if (dts[di] == DTYPE_F32 && m > 1) continue;
                double wbytes = (double)n * k * (dts[di] == DTYPE_F32 ? 4 : 2);
                int reps = (int)(4e9 / (wbytes * (m > 8 ? m / 4 : 1)));
                reps = reps < 2 ? 2 : reps > 200 ? 200 : reps;
                double gbs = 0, sec = 0;
                if (cpu_membw_matmul_gbs(b, n, k, dts[di], m, reps, &gbs, &sec, &err) != 0) {
                    fprintf(stderr, "bench: %s\n", err.msg);
                    continue;
                }
                printf("%-5s %s m=%-4d %8.3f ms  %6.1f GB/s weights (%3.0f%% of read bw)  %7.1f "
                       "GFLOP/s\n",
                       dtype_name(dts[di]), shapes[si].what, m, sec * 1e3, gbs, 100 * gbs / bw,
                       2.0 * m * n * k / sec * 1e-9);
            }
    backend_destroy(b);
    return 0;
}
