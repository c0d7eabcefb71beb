/* cpu_backend.c - the CPU backend: create/destroy, memory ops, ISA choice and the vtable.
 *
 * Memory is plain host memory, so upload/download are memcpy and weights are used in
 * place (weight_prepare does nothing). The ops themselves live in cpu_ops.c, cpu_matmul.c,
 * cpu_attention.c, cpu_conv1d.c and cpu_gated_delta.c; their profiling in cpu_profile.c. */
#include <cpuid.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/cpu/cpu_act.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_mamba.h"

static const char *const cpu_isa_names[] = {
#define CPU_ISA_NAME(s, n) s,
    CPU_ISA_LIST(CPU_ISA_NAME)
#undef CPU_ISA_NAME
};

static const cpu_kernels *const cpu_isa_tables[] = {
    &cpu_kernels_scalar,
    &cpu_kernels_avx2,
    &cpu_kernels_avx512,
};

/* F16C from CPUID itself: clang's __builtin_cpu_supports does not know the name */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

int cpu_backend_isa_supported(cpu_isa isa) {
    __builtin_cpu_init();
    switch (isa) {
    case CPU_ISA_SCALAR: return 1;
    case CPU_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case CPU_ISA_AVX512:
        return cpu_backend_isa_supported(CPU_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bf16") &&
               __builtin_cpu_supports("avx512vnni"); /* every BF16 part has VNNI */
    default: return 0;
    }
}

const char *cpu_backend_isa_name(cpu_isa isa) {
    return (unsigned)isa < CPU_ISA_COUNT ? cpu_isa_names[isa] : "?";
}

cpu_isa cpu_backend_isa(const backend *b) {
    const cpu_impl *c = b->impl;
    for (int i = 0; i < CPU_ISA_COUNT; i++)
        if (cpu_isa_tables[i] == c->k) return (cpu_isa)i;
    return CPU_ISA_SCALAR;
}

/* Cores this process may run on: the affinity mask (what a container or taskset allows),
 * else every online core. */
static int cpu_backend_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int cpu_backend_task_count(backend *b, int64_t work, int64_t unit_cost) {
    int threads = b->threads;
    /* Below ~30k scalar operations a job is done before a woken worker would start. */
    if (threads <= 1 || work <= 1 || work * unit_cost < 32768) return 1;
    int64_t n = (int64_t)threads * 4;
    return (int)(work < n ? work : n);
}

/* ---- memory ---- */

static void cpu_destroy(backend *b) {
    if (!b) return;
    cpu_impl *c = b->impl;
    if (c) {
        cpu_pool_destroy(c->pool);
        free(c->prof);
        free(c->tile);
        free(c->xb);
    }
    free(c);
    free(b);
}

static void *cpu_alloc(backend *b, size_t bytes) {
    (void)b;
    void *p = NULL;
    /* 64-byte alignment: whole cache lines and aligned SIMD rows. Large buffers (kv
     * caches, recurrent states) are 2 MiB aligned and asked for transparent huge pages:
     * with 4 KiB pages a long streaming read on this class of machine loses about half
     * its bandwidth to TLB misses. */
    size_t huge = (size_t)2 << 20, align = bytes >= huge ? huge : 64;
    if (posix_memalign(&p, align, bytes ? bytes : 1) != 0) return NULL;
    if (align == huge) madvise(p, bytes & ~(huge - 1), MADV_HUGEPAGE);
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(backend *b, void *p) {
    (void)b;
    free(p);
}

static void cpu_copy(backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_zero(backend *b, void *dst, size_t bytes) {
    (void)b;
    if (bytes) memset(dst, 0, bytes);
}

static int cpu_weight_prepare(backend *b, bk_weight *w, strata_err *err) {
    (void)b;
    int blk = dtype_block_elems(w->dt);
    if (blk > 1) {
        /* block types are matrices of whole blocks per row (matmul, embed); the quantized x
         * row of a matmul must fit the scratch */
        if (w->ndim != 2 || w->shape[1] % blk || w->shape[1] > cpu_qmatmul_max_k())
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "cpu backend: a %s weight must be a matrix whose rows are "
                                  "whole blocks of %d, at most %d wide",
                                  dtype_name(w->dt), blk, cpu_qmatmul_max_k());
        return 0;
    }
    if (w->dt != DTYPE_F32 && w->dt != DTYPE_BF16 && w->dt != DTYPE_F16)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "cpu backend: weight dtype %s",
                              dtype_name(w->dt));
    return 0;
}

static void cpu_weight_release(backend *b, bk_weight *w) {
    (void)b;
    (void)w;
}

/* Block-typed weights are read by the matmuls and embed only; everything else is what
 * backend_supports answers for a backend without this slot (asked of a copy of the table
 * without it, so the two cannot drift apart). Not on a hot path. */
static int cpu_supports(const backend *b, int op, dtype dt) {
    if (dtype_block_elems(dt) > 1)
        return op == BK_OP_MATMUL || op == BK_OP_MATMUL_N || op == BK_OP_MATMUL_GLU ||
               op == BK_OP_MATMUL_GNORM || op == BK_OP_EMBED;
    backend_ops plain = *b->ops;
    backend view = *b;
    plain.supports = NULL;
    view.ops = &plain;
    return backend_supports(&view, op, dt);
}

static int cpu_batch_prepare(backend *b, bk_batch *bt, strata_err *err) {
    (void)b;
    (void)err;
    bt->dev = bt; /* host memory is backend memory: nothing to mirror */
    return 0;
}

typedef struct {
    void (*fn)(void *ctx, int i);
    void *ctx;
} cpu_host_job;

static void cpu_host_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_host_job *j = ctx;
    j->fn(j->ctx, task);
}

static void cpu_host_tasks(backend *b, void (*fn)(void *ctx, int i), void *ctx, int n) {
    cpu_host_job j = {fn, ctx};
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_host_task, &j, n);
}

static const backend_ops cpu_backend_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .weight_prepare = cpu_weight_prepare,
    .weight_release = cpu_weight_release,
    .batch_prepare = cpu_batch_prepare,
    .embed = cpu_ops_embed,
    .rmsnorm = cpu_ops_rmsnorm,
    .rmsnorm_gated = cpu_ops_rmsnorm_gated,
    .residual = cpu_ops_residual,
    .l2norm = cpu_ops_l2norm,
    .add = cpu_ops_add,
    .silu_mul = cpu_ops_silu_mul,
    .sigmoid_mul = cpu_ops_sigmoid_mul,
    .split_halves = cpu_ops_split_halves,
    .gather_rows = cpu_ops_gather_rows,
    .matmul = cpu_matmul,
    .matmul_n = cpu_matmul_n,
    .matmul_glu = cpu_fused_matmul_glu,
    .matmul_gnorm = cpu_fused_matmul_gnorm,
    .rope = cpu_ops_rope,
    .kv_store = cpu_attention_kv_store,
    .attention = cpu_attention,
    .attn_prep = cpu_fused_attn_prep,
    .conv1d = cpu_conv1d,
    .gdn_gates = cpu_ops_gdn_gates,
    .gated_delta = cpu_gated_delta,
    .gdn = cpu_fused_gdn,
    .gelu_tanh_mul = cpu_act_gelu_tanh_mul,
    .scale = cpu_act_scale,
    .softcap = cpu_act_softcap,
    .relu2 = cpu_mamba_relu2,
    .rmsnorm_gated_grouped = cpu_mamba_rmsnorm_gated_grouped,
    .ssd = cpu_ssd,
    .read_bandwidth = cpu_membw_read_gbs,
    .profile = cpu_profile,
    .profile_read = cpu_profile_read,
    .host_tasks = cpu_host_tasks,
    .supports = cpu_supports,
};

int cpu_backend_create_isa(int n_threads, cpu_isa isa, backend **out, strata_err *err) {
    backend *b = NULL;
    cpu_impl *c = NULL;
    int rc = 0;
    if (isa == CPU_ISA_AUTO) {
        isa = CPU_ISA_SCALAR;
        for (int i = CPU_ISA_COUNT - 1; i > 0; i--)
            if (cpu_backend_isa_supported((cpu_isa)i)) {
                isa = (cpu_isa)i;
                break;
            }
    }
    if (!cpu_backend_isa_supported(isa))
        return strata_err_set(err, STRATA_EUNSUPPORTED, "cpu backend: this CPU cannot run %s",
                              cpu_backend_isa_name(isa));
    if (n_threads < 0)
        return strata_err_set(err, STRATA_EINVALID, "cpu backend: %d threads", n_threads);
    if (n_threads == 0) n_threads = cpu_backend_cores();
    b = calloc(1, sizeof *b);
    c = calloc(1, sizeof *c);
    if (!b || !c) {
        rc = strata_err_set(err, STRATA_ENOMEM, "cpu backend: out of memory");
        goto fail;
    }
    c->k = cpu_isa_tables[isa];
    {
        /* 0 or -1 where the system does not say (some VMs): assume 32 KiB */
        long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
        if (l1 < 16 * 1024 || l1 > 1024 * 1024) l1 = 32 * 1024;
        c->l1d = (int)l1;
    }
    if (!(c->xb = aligned_alloc(64, CPU_XB_BYTES)) ||
        !(c->tile =
              aligned_alloc(64, (size_t)n_threads * CPU_TILE_SCRATCH_FLOATS * sizeof(float)))) {
        rc = strata_err_set(err, STRATA_ENOMEM, "cpu backend: out of memory");
        goto fail;
    }
    rc = cpu_pool_create(n_threads, &c->pool, err);
    if (rc) goto fail;
    b->ops = &cpu_backend_ops;
    b->threads = n_threads;
    b->impl = c;
    *out = b;
    return 0;
fail:
    if (c) {
        free(c->tile);
        free(c->xb);
    }
    free(c);
    free(b);
    return rc;
}

int backend_cpu_create(int n_threads, backend **out, strata_err *err) {
    return cpu_backend_create_isa(n_threads, CPU_ISA_AUTO, out, err);
}
