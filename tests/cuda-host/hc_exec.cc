/* hc_exec.cc - how a grid runs on the CPU: blocks spread over a pool of OS threads, the
 * threads of a block as fibers on one of them, switched at __syncthreads and at warp
 * operations, 32-lane warps with their own exchange slots.
 *
 * A fiber runs until it must wait (a barrier, a warp operation) or ends; then it hands
 * the OS thread straight to the next fiber that can run, preferring a lane of its own
 * warp at a warp operation (so a warp runs through its shuffles together, as on a GPU)
 * and the next thread of the block at a barrier. When no fiber can run and some have not
 * ended, the threads of the block reached different counts of barriers or of warp
 * operations: the kernel, the block and what every thread waits for are printed, and
 * the process aborts. A GPU would hang or compute garbage; here the bug is named.
 *
 * The context switch saves only the callee-saved registers of the SysV x86-64 ABI (rbx,
 * rbp, r12-r15), so a switch is a few nanoseconds; the x87 / SSE control words are left
 * alone because no kernel changes them. Other machines use ucontext. */
#include <cxxabi.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include "tests/cuda-host/hc_internal.h"

/* ---- contexts ---- */

/* A fiber's region (HC_REGION, aligned to its size so hc_me finds it from the stack
 * pointer): a page holding its hc_thread, a guard page, its stack. Each region puts its
 * hc_thread and its stack top at its own cache-line offset: at the same offsets every
 * fiber's hot lines would fall into one cache set. */
enum { HC_PAGE = 4096, HC_STACK_BYTES = HC_REGION - 3 * HC_PAGE };

struct hc_thread;
extern "C" __attribute__((visibility("hidden"))) void hc_fiber_main(hc_thread *t);

#if defined(__x86_64__)
struct hc_ctx {
    void *sp;
};
extern "C" void hc_ctx_swap(void **save_sp, void *to_sp) __attribute__((visibility("hidden")));
extern "C" void hc_fiber_start(void) __attribute__((visibility("hidden")));
__asm__(".pushsection .text\n"
        ".globl hc_ctx_swap\n"
        ".hidden hc_ctx_swap\n"
        ".type hc_ctx_swap,@function\n"
        "hc_ctx_swap:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size hc_ctx_swap, .-hc_ctx_swap\n"
        ".globl hc_fiber_start\n"
        ".hidden hc_fiber_start\n"
        ".type hc_fiber_start,@function\n"
        "hc_fiber_start:\n"
        "  movq %rbx, %rdi\n"
        "  call hc_fiber_main\n"
        "  ud2\n"
        ".size hc_fiber_start, .-hc_fiber_start\n"
        ".popsection\n");

/* A fresh fiber's stack as hc_ctx_swap leaves a suspended one: six callee-saved
 * registers (rbx = the thread) and hc_fiber_start as the return address; after the pops
 * the stack is 16-byte aligned, as at a call. */
static void hc_ctx_init(hc_ctx *c, char *stack_top, hc_thread *t) {
    uint64_t *sp = (uint64_t *)stack_top - 9;
    sp[0] = sp[1] = sp[2] = sp[3] = 0; /* r15 .. r12 */
    sp[4] = (uint64_t)(uintptr_t)t;    /* rbx */
    sp[5] = 0;                         /* rbp */
    sp[6] = (uint64_t)(uintptr_t)&hc_fiber_start;
    sp[7] = sp[8] = 0;
    c->sp = sp;
}
static inline void hc_switch(hc_ctx *from, hc_ctx *to) { hc_ctx_swap(&from->sp, to->sp); }
#else
struct hc_ctx {
    ucontext_t uc;
};
static void hc_ucontext_entry(unsigned lo, unsigned hi) {
    hc_fiber_main((hc_thread *)(((uintptr_t)hi << 32) | lo));
}
static void hc_ctx_init(hc_ctx *c, char *stack_top, hc_thread *t) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack_top - HC_STACK_BYTES;
    c->uc.uc_stack.ss_size = HC_STACK_BYTES;
    c->uc.uc_link = NULL;
    uintptr_t p = (uintptr_t)t;
    makecontext(&c->uc, (void (*)(void))hc_ucontext_entry, 2, (unsigned)p, (unsigned)(p >> 32));
}
static inline void hc_switch(hc_ctx *from, hc_ctx *to) { swapcontext(&from->uc, &to->uc); }
#endif

/* ---- blocks, warps, threads ---- */

enum { HC_READY = 0, HC_AT_BARRIER, HC_AT_WARP, HC_DONE };

struct hc_warp {
    uint64_t slot[2][HC_WARP]; /* operation g leaves its values in slot[g & 1] */
    uint32_t done;             /* operations every lane has reached */
    int arrived;               /* lanes at operation `done` so far */
    uint8_t kind[2];
    int nlanes;
    unsigned full; /* the mask naming every lane that exists */
};

struct hc_block : hc_block_pub {
    int n, n_done;
    uint32_t bar_done; /* barriers every thread has reached */
    int bar_arrived;
    hc_warp warps[HC_MAX_THREADS / HC_WARP];
    hc_ctx sched; /* the OS thread's own context, resumed when the block ends */
    const hc_grid *g;
    hc_thread *th[HC_MAX_THREADS];
};

struct hc_thread : hc_thread_pub {
    hc_ctx ctx;
    int wait;
    uint32_t wait_for;
    uint32_t bars, wops; /* barriers and warp operations reached so far */
    uint8_t last_kind;
};
static_assert(sizeof(hc_thread) + 63 * 64 <= HC_PAGE, "a fiber's hc_thread must fit its page");

static inline hc_thread *hc_self(void) { return (hc_thread *)hc_me(); }
static inline hc_block *hc_blk(hc_thread *t) { return (hc_block *)t->blk; }

static const char *hc_kind_name(int k) {
    switch (k) {
    case HC_SHFL: return "__shfl_sync";
    case HC_SHFL_UP: return "__shfl_up_sync";
    case HC_SHFL_DOWN: return "__shfl_down_sync";
    case HC_SHFL_XOR: return "__shfl_xor_sync";
    case HC_VOTE: return "__ballot_sync/__any_sync/__all_sync";
    case HC_SYNCWARP: return "__syncwarp";
    case HC_WMMA: return "wmma::load/store/mma_sync";
    }
    return "?";
}

/* ---- names of kernels ---- */

std::string hc_kernel_name(const char *text, const void *kernel) {
    Dl_info info;
    if (kernel && dladdr(kernel, &info) && info.dli_sname && info.dli_saddr == kernel) {
        int st = 1;
        char *d = abi::__cxa_demangle(info.dli_sname, NULL, NULL, &st);
        if (st == 0 && d) {
            std::string s = d;
            free(d);
            /* "void mm_gemv<2, 3>(float*, ...)" -> "mm_gemv<2, 3>" */
            if (s.compare(0, 5, "void ") == 0) s.erase(0, 5);
            int depth = 0;
            for (size_t i = 0; i < s.size(); i++) {
                if (s[i] == '<') depth++;
                else if (s[i] == '>') depth--;
                else if (s[i] == '(' && depth == 0) return s.substr(0, i);
            }
            return s;
        }
    }
    return text ? text : "?";
}

/* ---- faults ---- */

static void hc_where_prefix(char *buf, size_t len, hc_thread *t) {
    hc_block *b = hc_blk(t);
    snprintf(buf, len,
             "cuda-host: kernel %s, block (%u,%u,%u) of grid (%u,%u,%u), thread (%u,%u,%u)",
             b->g->name.c_str(), b->idx.x, b->idx.y, b->idx.z, b->grid.x, b->grid.y, b->grid.z,
             t->idx.x, t->idx.y, t->idx.z);
}

void hc_kernel_fault(const char *fmt, ...) {
    char where[512], what[1024];
    hc_where_prefix(where, sizeof where, hc_self());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s (warp %d lane %d): %s\n", where, hc_self()->warp, hc_self()->lane, what);
    fflush(stderr);
    abort();
}

static std::string hc_state_of(const hc_thread *t) {
    char s[256];
    switch (t->wait) {
    case HC_DONE:
        snprintf(s, sizeof s, "ended after %u __syncthreads and %u warp operations", t->bars,
                 t->wops);
        break;
    case HC_AT_BARRIER:
        snprintf(s, sizeof s, "wait at __syncthreads #%u (after %u warp operations)", t->wait_for,
                 t->wops);
        break;
    case HC_AT_WARP:
        snprintf(s, sizeof s, "wait at warp operation #%u (%s) of warp %d, after %u __syncthreads",
                 t->wait_for, hc_kind_name(t->last_kind), t->warp, t->bars);
        break;
    default: snprintf(s, sizeof s, "can run (a scheduler bug)"); break;
    }
    return s;
}

/* No fiber can run and some have not ended: print each run of threads in the same state. */
[[noreturn]] static void hc_deadlock(hc_block *b) {
    char where[512];
    snprintf(where, sizeof where, "cuda-host: kernel %s, block (%u,%u,%u) of grid (%u,%u,%u)",
             b->g->name.c_str(), b->idx.x, b->idx.y, b->idx.z, b->grid.x, b->grid.y, b->grid.z);
    fprintf(stderr,
            "%s: the threads of the block do not meet (different counts of __syncthreads, or "
            "lanes of a warp at different counts of warp operations):\n",
            where);
    int shown = 0;
    for (int i = 0; i < b->n && shown < 12;) {
        std::string st = hc_state_of(b->th[i]);
        int j = i + 1;
        while (j < b->n && hc_state_of(b->th[j]) == st) j++;
        if (j - i == 1) fprintf(stderr, "    thread %d: %s\n", i, st.c_str());
        else fprintf(stderr, "    threads %d-%d: %s\n", i, j - 1, st.c_str());
        shown++;
        i = j;
    }
    fflush(stderr);
    abort();
}

/* ---- scheduling ---- */

static inline bool hc_runnable(const hc_block *b, const hc_thread *t) {
    switch (t->wait) {
    case HC_READY: return true;
    case HC_AT_BARRIER: return b->bar_done >= t->wait_for;
    case HC_AT_WARP: return b->warps[t->warp].done >= t->wait_for;
    default: return false;
    }
}

/* Gives the OS thread to the next fiber that can run; returns when `me` may go on. */
static void hc_yield(hc_thread *me, bool warp_first) {
    hc_block *b = hc_blk(me);
    hc_thread *next = NULL;
    if (warp_first) {
        const hc_warp *w = &b->warps[me->warp];
        const int base = me->warp * HC_WARP;
        for (int i = 1, l = me->lane; i <= w->nlanes; i++) {
            if (++l == w->nlanes) l = 0;
            if (hc_runnable(b, b->th[base + l])) {
                next = b->th[base + l];
                break;
            }
        }
    }
    if (!next) {
        for (int i = 1, t = me->tid; i <= b->n; i++) {
            if (++t == b->n) t = 0;
            if (hc_runnable(b, b->th[t])) {
                next = b->th[t];
                break;
            }
        }
    }
    if (next == me) {
        me->wait = HC_READY;
        return;
    }
    if (!next) {
        if (b->n_done == b->n) hc_switch(&me->ctx, &b->sched); /* the block is over */
        hc_deadlock(b);
    }
    hc_switch(&me->ctx, &next->ctx);
    me->wait = HC_READY;
}

extern "C" void hc_fiber_main(hc_thread *t) {
    hc_block *b = hc_blk(t);
    b->g->invoke(b->g->rec.get());
    t->wait = HC_DONE;
    b->n_done++;
    hc_yield(t, false);
    abort(); /* a fiber that ended is never resumed */
}

void hc_syncthreads(void) {
    hc_thread *me = hc_self();
    hc_block *b = hc_blk(me);
    me->bars++;
    me->wait = HC_AT_BARRIER;
    me->wait_for = me->bars;
    if (++b->bar_arrived == b->n) {
        b->bar_arrived = 0;
        b->bar_done = me->bars;
    }
    hc_yield(me, false);
}

const uint64_t *hc_warp_exchange(hc_warp_kind kind, unsigned mask, uint64_t v) {
    return hc_warp_exchange_last(kind, mask, v, NULL, NULL);
}

const uint64_t *hc_warp_exchange_last(hc_warp_kind kind, unsigned mask, uint64_t v,
                                      void (*last)(void *), void *ctx) {
    hc_thread *me = hc_self();
    hc_block *b = hc_blk(me);
    hc_warp *w = &b->warps[me->warp];
    if (mask != 0xffffffffu && mask != w->full)
        hc_kernel_fault("%s with mask 0x%08x: only the full-warp mask (0x%08x) is emulated",
                        hc_kind_name(kind), mask, w->full);
    const uint32_t g = me->wops++;
    const int p = g & 1;
    if (w->arrived == 0) w->kind[p] = (uint8_t)kind;
    else if (w->kind[p] != kind)
        hc_kernel_fault("at warp operation #%u this lane calls %s, earlier lanes of its warp %s",
                        g + 1, hc_kind_name(kind), hc_kind_name(w->kind[p]));
    w->slot[p][me->lane] = v;
    me->last_kind = (uint8_t)kind;
    me->wait = HC_AT_WARP;
    me->wait_for = g + 1;
    if (++w->arrived == w->nlanes) {
        if (last) last(ctx); /* before any lane of the warp moves on */
        w->arrived = 0;
        w->done = g + 1;
    }
    hc_yield(me, true);
    return w->slot[p];
}

unsigned hc_vote(unsigned mask, int pred) {
    const uint64_t *s = hc_warp_exchange(HC_VOTE, mask, pred != 0);
    const hc_warp *w = &hc_blk(hc_self())->warps[hc_self()->warp];
    unsigned r = 0;
    for (int i = 0; i < w->nlanes; i++)
        if (s[i]) r |= 1u << i;
    return r;
}

int hc_all(unsigned mask, int pred) {
    unsigned r = hc_vote(mask, pred);
    return r == hc_blk(hc_self())->warps[hc_self()->warp].full;
}

void *hc_dynamic_smem(void) { return hc_self()->blk->smem; }

/* ---- executors: one per OS thread that runs blocks ---- */

struct hc_exec {
    char *map = NULL, *regions = NULL; /* HC_MAX_THREADS fiber regions, aligned */
    size_t map_bytes = 0;
    int n_fibers = 0; /* regions whose guard page is set */
    hc_block blk;
    std::vector<unsigned char> smem;
    ~hc_exec() {
        if (map) munmap(map, map_bytes);
    }
};

static hc_exec *hc_exec_here(void) {
    static thread_local std::unique_ptr<hc_exec> x;
    if (!x) x.reset(new hc_exec());
    return x.get();
}

static char *hc_region(hc_exec *x, int i) { return x->regions + (size_t)i * HC_REGION; }
static unsigned hc_offset(const char *region) {
    return (unsigned)(((uintptr_t)region / HC_REGION) % 64) * 64;
}
static char *hc_stack_top(hc_exec *x, int i) {
    return hc_region(x, i) + HC_REGION - hc_offset(hc_region(x, i));
}

/* Fiber i, its region mapped and its guard page set on first use. */
static hc_thread *hc_fiber(hc_exec *x, int i) {
    if (!x->map) {
        x->map_bytes = (size_t)(HC_MAX_THREADS + 1) * HC_REGION;
        void *m = mmap(NULL, x->map_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "cuda-host: cannot map %zu MiB of fiber stacks\n", x->map_bytes >> 20);
            abort();
        }
        x->map = (char *)m;
        x->regions = (char *)(((uintptr_t)m + HC_REGION - 1) & ~(uintptr_t)(HC_REGION - 1));
    }
    for (; x->n_fibers <= i; x->n_fibers++)
        mprotect(hc_region(x, x->n_fibers) + HC_PAGE, HC_PAGE, PROT_NONE);
    return (hc_thread *)(hc_region(x, i) + hc_offset(hc_region(x, i)));
}

static void hc_run_block(hc_exec *x, const hc_grid &g, unsigned bi) {
    hc_block *b = &x->blk;
    const unsigned gx = g.grid.x, gy = g.grid.y;
    b->idx = uint3{bi % gx, (bi / gx) % gy, bi / (gx * gy)};
    b->dim = uint3{g.block.x, g.block.y, g.block.z};
    b->grid = uint3{g.grid.x, g.grid.y, g.grid.z};
    b->g = &g;
    const int n = (int)(g.block.x * g.block.y * g.block.z);
    b->n = n;
    b->n_done = 0;
    b->bar_done = 0;
    b->bar_arrived = 0;
    for (int w = 0; w * HC_WARP < n; w++) {
        hc_warp *wp = &b->warps[w];
        wp->done = 0;
        wp->arrived = 0;
        wp->nlanes = n - w * HC_WARP < HC_WARP ? n - w * HC_WARP : HC_WARP;
        wp->full = wp->nlanes == HC_WARP ? 0xffffffffu : (1u << wp->nlanes) - 1u;
    }
    b->smem = NULL;
    if (g.smem) { /* never-written shared memory reads as NaN */
        if (x->smem.size() < g.smem + 64) x->smem.resize(g.smem + 64);
        b->smem = (void *)(((uintptr_t)x->smem.data() + 63) & ~(uintptr_t)63);
        memset(b->smem, 0xff, g.smem);
    }
    const unsigned bx = g.block.x, by = g.block.y;
    for (int t = 0; t < n; t++) {
        hc_thread *th = hc_fiber(x, t);
        th->blk = b;
        th->idx = uint3{(unsigned)t % bx, ((unsigned)t / bx) % by, (unsigned)t / (bx * by)};
        th->tid = t;
        th->lane = t % HC_WARP;
        th->warp = t / HC_WARP;
        th->wait = HC_READY;
        th->bars = th->wops = 0;
        th->last_kind = 0;
        hc_ctx_init(&th->ctx, hc_stack_top(x, t), th);
        b->th[t] = th;
    }
    hc_switch(&b->sched, &b->th[0]->ctx);
}

/* ---- the pool ---- */

struct hc_job {
    const hc_grid *g;
    unsigned total;
    std::atomic<unsigned> next{0}, done{0};
    int active = 0; /* pool threads inside hc_work (under the pool lock) */
};

struct hc_pool {
    std::mutex m;
    std::condition_variable work, finished;
    std::deque<hc_job *> jobs;
};

static void hc_work(hc_job *j) {
    hc_exec *x = hc_exec_here();
    for (unsigned i; (i = j->next.fetch_add(1)) < j->total;) {
        hc_run_block(x, *j->g, i);
        j->done.fetch_add(1);
    }
}

static void hc_pool_thread(hc_pool *p) {
    std::unique_lock<std::mutex> lk(p->m);
    for (;;) {
        while (!p->jobs.empty() && p->jobs.front()->next.load() >= p->jobs.front()->total)
            p->jobs.pop_front();
        if (p->jobs.empty()) {
            p->work.wait(lk);
            continue;
        }
        hc_job *j = p->jobs.front();
        j->active++;
        lk.unlock();
        hc_work(j);
        lk.lock();
        j->active--;
        p->finished.notify_all();
    }
}

/* Threads that run blocks beside the stream's own: HC_THREADS, else one less than the
 * machine's cores (at least one). They live until exit. */
static hc_pool *hc_the_pool(void) {
    static hc_pool *pool = [] {
        hc_pool *p = new hc_pool();
        int n = (int)std::thread::hardware_concurrency() - 1;
        const char *env = getenv("HC_THREADS");
        if (env && *env) n = atoi(env) - 1;
        if (n < 1) n = 1;
        if (n > 15) n = 15;
        for (int i = 0; i < n; i++) std::thread(hc_pool_thread, p).detach();
        return p;
    }();
    return pool;
}

void hc_run_grid(const hc_grid &g) {
    hc_pool *p = hc_the_pool();
    hc_job j;
    j.g = &g;
    j.total = g.grid.x * g.grid.y * g.grid.z;
    if (j.total >= 4) { /* waking the pool costs more than a block or two */
        std::lock_guard<std::mutex> lk(p->m);
        p->jobs.push_back(&j);
        p->work.notify_all();
    }
    hc_work(&j);
    std::unique_lock<std::mutex> lk(p->m);
    for (auto it = p->jobs.begin(); it != p->jobs.end(); ++it)
        if (*it == &j) {
            p->jobs.erase(it);
            break;
        }
    p->finished.wait(lk, [&] { return j.active == 0 && j.done.load() == j.total; });
}
