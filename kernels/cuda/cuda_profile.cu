/* cuda_profile.cu - where a forward's device time goes, op by op (backend_ops.profile).
 *
 * While profiling is on, every op records an event on the stream as it starts (cuda_enter)
 * and graphs are refused, so a forward runs eagerly and its ops follow each other on the one
 * stream: an op's time is from its event to the next one (to the forward's end for the last).
 * The events are created once, when profiling is turned on, and the marks of a forward
 * restart at its batch_prepare. The events themselves cost a few microseconds a forward,
 * so this is a benchmark's tool (strata bench --profile), never the serving path's. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_internal.cuh"

struct cuda_prof {
    cudaEvent_t ev[CUDA_PROF_MAX + 1];
    int op[CUDA_PROF_MAX];
    int n, lost; /* marks of this forward; ops past CUDA_PROF_MAX */
};

static const char *const cuda_op_names[CUDA_OP_COUNT] = {"(none)",
#define CUDA_OP_NAME(n) #n,
                                                         CUDA_OP_LIST(CUDA_OP_NAME)
#undef CUDA_OP_NAME
};

void cuda_prof_mark(cuda_impl *c, int op) {
    cuda_prof *p = c->prof;
    if (p->n == CUDA_PROF_MAX) {
        p->lost++;
        return;
    }
    p->op[p->n] = op;
    cudaEventRecord(p->ev[p->n++], c->stream);
}

void cuda_prof_forward(cuda_impl *c) {
    if (c->prof) c->prof->n = c->prof->lost = 0;
}

static void cuda_prof_free(cuda_prof *p) {
    for (int i = 0; i <= CUDA_PROF_MAX; i++)
        if (p->ev[i]) cudaEventDestroy(p->ev[i]);
    free(p);
}

void cuda_profile(backend *b, int on) {
    cuda_impl *c = cuda_impl_of(b);
    if (!on == !c->prof || c->mode != CUDA_MODE_EAGER) return;
    cuda_use(c);
    if (!on) {
        cudaStreamSynchronize(c->stream);
        cuda_prof_free(c->prof);
        c->prof = NULL;
        return;
    }
    cuda_prof *p = (cuda_prof *)calloc(1, sizeof *p);
    if (!p) return;
    for (int i = 0; i <= CUDA_PROF_MAX; i++)
        if (cudaEventCreate(&p->ev[i]) != cudaSuccess) {
            cudaGetLastError();
            cuda_prof_free(p);
            return;
        }
    c->prof = p;
}

int cuda_profile_read(backend *b, bk_op_time *out, int max) {
    cuda_impl *c = cuda_impl_of(b);
    cuda_prof *p = c->prof;
    if (!p || !p->n || max <= 0) return -1;
    cuda_use(c);
    cudaEventRecord(p->ev[p->n], c->stream);
    if (cudaEventSynchronize(p->ev[p->n]) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    int count[CUDA_OP_COUNT] = {0};
    double ms[CUDA_OP_COUNT] = {0};
    for (int i = 0; i < p->n; i++) {
        float t = 0.0f;
        if (cudaEventElapsedTime(&t, p->ev[i], p->ev[i + 1]) != cudaSuccess) cudaGetLastError();
        int op = p->op[i] > 0 && p->op[i] < CUDA_OP_COUNT ? p->op[i] : 0;
        count[op]++;
        ms[op] += t;
    }
    int n = 0;
    for (;;) { /* the kinds by time, most first */
        int best = -1;
        for (int op = 0; op < CUDA_OP_COUNT; op++)
            if (count[op] && (best < 0 || ms[op] > ms[best])) best = op;
        if (best < 0 || n == max) break;
        out[n++] = bk_op_time{cuda_op_names[best], count[best], ms[best]};
        count[best] = 0;
    }
    return n;
}
