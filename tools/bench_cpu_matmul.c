/* bench_cpu_matmul.c - matmul bandwidth of the CPU backend against this machine's
 * measured read bandwidth (the decode roofline), on the decode shapes of the models we
 * serve on CPU (Qwen3.5-0.8B and 2B, Gemma 4 E2B, Nemotron 3 Nano 4B) or on shapes given as
 * arguments.
 *
 * Build and run from the repo root (after `make`, which builds build/libstrata.a):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I. -pthread tools/bench_cpu_matmul.c build/libstrata.a \
 *       -o build/bench_cpu_matmul -lm -ldl
 *   build/bench_cpu_matmul [-t threads] [-i isa] [-m m,m,...] [-d dtype,...] [-s MiB] [NxK ...]
 * isa: scalar | avx2 | avx512 (default: the best this CPU runs); dtypes: bf16 (default),
 * f16, f32, and the block types q8_0 | q4_0 | q4_k | q6_k (GB/s counts the bytes of W as
 * stored, so a quantized W's roofline is its own bytes); m defaults to 1; with no NxK the
 * built-in decode shapes run. Each call reads a different copy of W, the copies together
 * over -s MiB (512 by default; a model's weights span gigabytes, which on some VMs streams
 * slower: give the model's size to see the rate a decode step meets). ms, GB/s and GFLOP/s are the fastest call's, what the hardware
 * can do; "median" is the median call's share of the read probe, what a decode step meets
 * call after call on a shared machine (the two differ by 5-25% on a noisy VM). E.g. the quantized formats against bf16 on a 2B-class shape:
 *   build/bench_cpu_matmul -t 2 -m 1,8 -d bf16,q8_0,q4_0,q4_k,q6_k 6144x2048
 * and the prefill GEMM (GFLOP/s is the figure there; m rows of x share each weight read):
 *   build/bench_cpu_matmul -t 2 -m 128,1024 6144x2048 2048x6144 3584x1024 1024x3584
 * On the avx512 isa each m >= 8 line also gives its GFLOP/s as a share of the multiply
 * ceiling: the rate at which the threads issue the kernel's multiply instruction alone
 * (vdpbf16ps for bf16, vfmadd231ps for f32 / f16, vpdpbusd for q8_0 / q4_0 / q5_0; 12
 * independent chains per thread, the best of 7 trials at start), times the operations each
 * does. A prefill GEMM near 100% of it is bound by the multiplier, which no loop order
 * moves. The K-quant tiles mix vpmaddubsw and vpdpwssd and get none.
 * Build with -pthread. */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_backend.h"

typedef struct {
    const char *what;
    int n, k;
} bench_shape;

static const bench_shape bench_shapes[] = {
    {"qwen3.5-0.8b gate/up", 3584, 1024},   {"qwen3.5-0.8b down", 1024, 3584},
    {"qwen3.5-0.8b qkv", 6144, 1024},       {"qwen3.5-0.8b lm_head", 248320, 1024},
    {"qwen3.5-2b gate/up", 6144, 2048},     {"qwen3.5-2b down", 2048, 6144},
    {"gemma4-e2b gate/up", 6144, 1536},     {"gemma4-e2b down", 1536, 6144},
    {"gemma4-e2b gate/up x2", 12288, 1536}, {"gemma4-e2b down x2", 1536, 12288},
    {"gemma4-e2b ple gate", 256, 1536},     {"gemma4-e2b lm_head", 262144, 1536},
    {"nemotron-4b up", 12544, 3136},        {"nemotron-4b down", 3136, 12544},
    {"nemotron-4b in_proj", 17504, 3136},   {"nemotron-4b out_proj", 3136, 7680},
    {"nemotron-4b lm_head", 131072, 3136},
};

/* One name of a comma list ("q4_k" or "Q4_K"); -1 when it is not a matmul weight dtype. */
static int bench_parse_dtype(const char *s, dtype *out) {
    char name[16] = {0};
    for (int i = 0; s[i] && s[i] != ',' && i < 15; i++)
        name[i] = (char)toupper((unsigned char)s[i]);
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (strcmp(name, dtype_name((dtype)i)) == 0 &&
            (i == DTYPE_F32 || i == DTYPE_F16 || i == DTYPE_BF16 ||
             dtype_block_elems((dtype)i) > 1)) {
            *out = (dtype)i;
            return 0;
        }
    return -1;
}

/* ---- the multiply ceiling (avx512 only) ---- */

enum { PEAK_FMA, PEAK_DPBF16, PEAK_DPBUSD, PEAK_COUNT };
static const char *const peak_names[PEAK_COUNT] = {"vfmadd231ps", "vdpbf16ps", "vpdpbusd"};
/* Operations (two per multiply-add) one instruction contributes to bench's 2·m·n·k. */
static const double peak_ops[PEAK_COUNT] = {32, 64, 128};

static double peak_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    int kind;
    long iters;
    double per_sec; /* instructions per second on this thread */
    double sink;    /* the chains' sum: what keeps them computed */
} peak_job;

#if defined(__x86_64__)
#include <immintrin.h>
#define PEAK_CHAINS 12
/* The chains live in a plain array and are summed once at the end (peak_job.sink), so each
 * step is one instruction on registers. An empty asm that names the chains as operands
 * each iteration (an earlier form) made the compiler store and reload all of them around
 * it, and the store-to-load latency then bounded the rate: 80 instead of 232 GFLOP/s a
 * thread of vdpbf16ps on AMD Zen 4. */
#define PEAK_LOOP(T, ZERO, STEP, SUM)                                                              \
    do {                                                                                           \
        T a[PEAK_CHAINS];                                                                          \
        for (int c = 0; c < PEAK_CHAINS; c++) a[c] = ZERO;                                         \
        for (long it = 0; it < j->iters; it++) {                                                   \
            _Pragma("GCC unroll 12") for (int c = 0; c < PEAK_CHAINS; c++) a[c] = STEP;            \
        }                                                                                          \
        for (int c = 0; c < PEAK_CHAINS; c++) j->sink += SUM(a[c]);                                \
    } while (0)

__attribute__((target("avx512f,avx512bw,avx512bf16,avx512vnni"))) static void *peak_thread(
    void *arg) {
    peak_job *j = arg;
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512bh bh = (__m512bh)_mm512_set1_epi16(0x3f80);
    const __m512i u8 = _mm512_set1_epi8(1);
    double t0 = peak_now();
    switch (j->kind) {
    case PEAK_FMA:
        PEAK_LOOP(__m512, _mm512_setzero_ps(), _mm512_fmadd_ps(a[c], one, one),
                  _mm512_reduce_add_ps);
        break;
    case PEAK_DPBF16:
        PEAK_LOOP(__m512, _mm512_setzero_ps(), _mm512_dpbf16_ps(a[c], bh, bh),
                  _mm512_reduce_add_ps);
        break;
    default:
        PEAK_LOOP(__m512i, _mm512_setzero_si512(), _mm512_dpbusd_epi32(a[c], u8, u8),
                  _mm512_reduce_add_epi32);
        break;
    }
    j->per_sec = (double)j->iters * PEAK_CHAINS / (peak_now() - t0);
    return NULL;
}

/* Instructions per second of one kind on all threads at once, the best of 7 trials of
 * ~20 ms (a shared machine slows some of them: the ceiling is the undisturbed rate); 0 where
 * it cannot run. */
static double peak_rate(int kind, int threads) {
    if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512vnni") ||
        threads < 1 || threads > 64)
        return 0;
    double best = 0;
    for (int trial = 0; trial < 7; trial++) {
        peak_job jobs[64];
        pthread_t th[64];
        int joined[64] = {0};
        for (int i = 0; i < threads; i++) jobs[i] = (peak_job){.kind = kind, .iters = 2000000};
        for (int i = 1; i < threads; i++)
            joined[i] = pthread_create(&th[i], NULL, peak_thread, &jobs[i]) == 0;
        peak_thread(&jobs[0]);
        double sum = jobs[0].per_sec;
        for (int i = 1; i < threads; i++) {
            if (joined[i]) pthread_join(th[i], NULL);
            else peak_thread(&jobs[i]); /* no thread: this one ran alone */
            sum += jobs[i].per_sec;
        }
        if (sum > best) best = sum;
    }
    return best;
}
#else
static double peak_rate(int kind, int threads) {
    (void)kind;
    (void)threads;
    return 0;
}
#endif

/* The multiply a dtype's kernel runs on, or -1 (the K-quants: see the top). */
static int peak_kind_of(dtype dt) {
    switch (dt) {
    case DTYPE_BF16: return PEAK_DPBF16;
    case DTYPE_Q8_0:
    case DTYPE_Q4_0:
    case DTYPE_Q5_0: return PEAK_DPBUSD;
    case DTYPE_F32:
    case DTYPE_F16: return PEAK_FMA;
    default: return -1;
    }
}

int main(int argc, char **argv) {
    int threads = 2, ms[16] = {1}, n_ms = 1, n_dts = 1;
    size_t span = 0;
    cpu_isa isa = CPU_ISA_AUTO;
    dtype dts[8] = {DTYPE_BF16};
    bench_shape args[64];
    int n_args = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-t") == 0 && a + 1 < argc) {
            threads = atoi(argv[++a]);
        } else if (strcmp(argv[a], "-s") == 0 && a + 1 < argc) {
            span = (size_t)atol(argv[++a]) << 20;
        } else if (strcmp(argv[a], "-i") == 0 && a + 1 < argc) {
            ++a;
            for (int i = 0; i < CPU_ISA_COUNT; i++)
                if (strcmp(argv[a], cpu_backend_isa_name((cpu_isa)i)) == 0) isa = (cpu_isa)i;
        } else if (strcmp(argv[a], "-d") == 0 && a + 1 < argc) {
            n_dts = 0;
            for (char *s = argv[++a]; *s && n_dts < 8; s = strchr(s, ',') ? strchr(s, ',') + 1 : "")
                if (bench_parse_dtype(s, &dts[n_dts++]) != 0) {
                    fprintf(stderr, "bench: -d takes bf16, f16, f32, q8_0, q4_0, q4_k, q6_k\n");
                    return 2;
                }
        } else if (strcmp(argv[a], "-m") == 0 && a + 1 < argc) {
            n_ms = 0;
            for (char *s = argv[++a]; *s && n_ms < 16; s = strchr(s, ',') ? strchr(s, ',') + 1 : "")
                ms[n_ms++] = atoi(s);
        } else if (n_args < 64 && sscanf(argv[a], "%dx%d", &args[n_args].n, &args[n_args].k) == 2) {
            args[n_args++].what = argv[a];
        } else {
            fprintf(stderr,
                    "usage: %s [-t threads] [-i isa] [-m m,...] [-d dtype,...] [-s MiB] "
                    "[NxK ...]\n",
                    argv[0]);
            return 2;
        }
    }
    const bench_shape *shapes = n_args ? args : bench_shapes;
    size_t n_shapes = n_args ? (size_t)n_args : sizeof bench_shapes / sizeof *bench_shapes;
    strata_err err = {0};
    backend *b = NULL;
    if (cpu_backend_create_isa(threads, isa, &b, &err) != 0) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    /* The read probe before and after: on a shared machine the two differ, and the spread
     * says how far to trust the percentages (taken of the first). Dtypes run interleaved per
     * shape, so they meet the same conditions. */
    double bw = cpu_membw_read_gbs(b, (size_t)1 << 30);
    printf("cpu backend: %d threads, isa %s; streaming read %.1f GB/s (1 GiB, huge pages)\n",
           threads, cpu_backend_isa_name(cpu_backend_isa(b)), bw);
    double peak[PEAK_COUNT] = {0}; /* GFLOP/s of each multiply on all threads */
    if (cpu_backend_isa(b) == CPU_ISA_AVX512)
        for (int p = 0; p < PEAK_COUNT; p++) {
            peak[p] = peak_rate(p, threads) * peak_ops[p] * 1e-9;
            if (peak[p] > 0)
                printf("multiply ceiling: %-20s %7.1f GFLOP/s on %d threads\n", peak_names[p],
                       peak[p], threads);
        }
    for (size_t si = 0; si < n_shapes; si++)
        for (int mi = 0; mi < n_ms; mi++)
            for (int di = 0; di < n_dts; di++) {
                int m = ms[mi], n = shapes[si].n, k = shapes[si].k;
                dtype dt = dts[di];
                double wbytes = (double)n * (double)dtype_row_bytes(dt, k);
                int reps = (int)(4e9 / (wbytes * (m > 8 ? m / 4 : 1)));
                reps = reps < 3 ? 3 : reps > 400 ? 400 : reps;
                double sec = 0, med = 0;
                if (cpu_membw_matmul_time(b, n, k, dt, m, reps, span, &sec, &med, &err) != 0) {
                    fprintf(stderr, "bench: %s\n", err.msg);
                    continue;
                }
                int pk = peak_kind_of(dt);
                double gbs = wbytes / sec * 1e-9, gbs_med = wbytes / med * 1e-9;
                double gflops = 2.0 * m * n * k / sec * 1e-9, ceil = pk < 0 ? 0 : peak[pk];
                printf("%-4s %-24s [%6d,%5d] m=%-4d %8.3f ms %6.1f GB/s (%3.0f%% of read bw, "
                       "median %3.0f%%) %7.1f GFLOP/s",
                       dtype_name(dt), shapes[si].what, n, k, m, sec * 1e3, gbs, 100 * gbs / bw,
                       100 * gbs_med / bw, gflops);
                if (m >= 8 && ceil > 0)
                    printf(" (%3.0f%% of %s)", 100 * gflops / ceil, peak_names[pk]);
                printf("\n");
            }
    printf("streaming read after: %.1f GB/s\n", cpu_membw_read_gbs(b, (size_t)1 << 30));
    backend_destroy(b);
    return 0;
}
