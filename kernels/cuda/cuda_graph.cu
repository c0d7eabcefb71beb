/* cuda_graph.cu - decode steps as CUDA graphs: capture once per key, replay after.
 *
 * A forward is a few hundred small launches; at batch 1 on a small model their launch
 * cost is most of the step (perf-anchors §2). The model calls its ops exactly as in an
 * eager forward; between graph_begin and graph_end the backend either records them into
 * a graph (capture) or, when a graph for the key exists, skips every launch and only
 * refills the host side of the staging ring (replay) - the captured memcpy nodes read the
 * pinned ring when the graph runs, so the new ids and positions reach the device. A
 * running hash of every op and its device arguments guards the replay: a forward that
 * differs from the captured one is refused before anything runs. README.md has the design. */
#include <stdio.h>

#include "kernels/cuda/cuda_internal.cuh"

static cuda_graph_entry *cuda_graph_find(cuda_impl *c, uint64_t key) {
    for (int i = 0; i < c->n_graphs; i++)
        if (c->graphs[i].key == key) return &c->graphs[i];
    return NULL;
}

static void cuda_graph_drop(cuda_impl *c, cuda_graph_entry *g) {
    cudaGraphExecDestroy(g->exec);
    *g = c->graphs[--c->n_graphs];
}

int cuda_graph_begin(backend *b, uint64_t key, strata_err *err) {
    cuda_impl *c = cuda_impl_of(b);
    if (c->mode != CUDA_MODE_EAGER)
        return strata_err_set(err, STRATA_ESTATE, "cuda: graph_begin inside a graph");
    if (c->err_code) return strata_err_set(err, c->err_code, "%s", c->err_msg);
    cuda_use(c);
    /* Everything queued before must finish: the ring and bounce buffer are reused. */
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        cuda_fail(c, "graph_begin", e);
        return strata_err_set(err, STRATA_EDEVICE, "%s", c->err_msg);
    }
    c->stage_ev_live = 0;
    c->stage_off = 0;
    c->bounce_off = 0;
    c->n_pending = 0;
    c->key = key;
    c->sig = 0xcbf29ce484222325ULL;
    c->n_ops = 0;
    c->graph_bad = 0;
    c->graph_msg[0] = 0;
    if (cuda_graph_find(c, key)) {
        c->mode = CUDA_MODE_REPLAY;
        return 1;
    }
    if (c->n_graphs == CUDA_GRAPH_MAX)
        return strata_err_set(err, STRATA_ERANGE, "cuda: more than %d graph keys", CUDA_GRAPH_MAX);
    /* Thread-local: other threads of the process (HTTP, loop) may call CUDA-free code
     * only, but a relaxed mode would hide our own unsafe calls. */
    e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return strata_err_set(err, STRATA_EDEVICE, "cuda: cannot capture: %s",
                              cudaGetErrorString(e));
    }
    c->mode = CUDA_MODE_CAPTURE;
    return 0;
}

/* Runs g, waits, and hands the deferred downloads to their callers. A launch refused
 * while the device stays usable (the stream still synchronises) ran nothing: g is dropped
 * and the caller runs the forward eagerly; any other failure is sticky. */
static int cuda_graph_run(cuda_impl *c, cuda_graph_entry *g, strata_err *err) {
    cudaError_t e = cudaGraphLaunch(g->exec, c->stream);
    if (e != cudaSuccess && cudaStreamSynchronize(c->stream) == cudaSuccess) {
        cudaGetLastError();
        c->n_pending = 0;
        int rc = strata_err_set(err, STRATA_EUNSUPPORTED,
                                "cuda: graph launch refused (%s); run it eagerly",
                                cudaGetErrorString(e));
        cuda_graph_drop(c, g);
        return rc;
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        cuda_fail(c, "graph launch", e);
        return strata_err_set(err, STRATA_EDEVICE, "%s", c->err_msg);
    }
    for (int i = 0; i < c->n_pending; i++)
        memcpy(c->pending[i].dst, c->bounce + c->pending[i].off, c->pending[i].bytes);
    c->n_pending = 0;
    return 0;
}

int cuda_graph_end(backend *b, strata_err *err) {
    cuda_impl *c = cuda_impl_of(b);
    cuda_mode mode = c->mode;
    c->mode = CUDA_MODE_EAGER;
    if (mode == CUDA_MODE_EAGER)
        return strata_err_set(err, STRATA_ESTATE, "cuda: graph_end without graph_begin");
    if (mode == CUDA_MODE_REPLAY) {
        cuda_graph_entry *g = cuda_graph_find(c, c->key);
        if (c->graph_bad || g->sig != c->sig || g->n_ops != c->n_ops) {
            /* Same key, other forward: the key does not pin the op sequence. Drop the
             * graph so the next forward under this key is captured afresh (the drop moves
             * another entry into *g, so its op count is read first). */
            int captured = g->n_ops;
            cuda_graph_drop(c, g);
            c->n_pending = 0;
            return strata_err_set(err, STRATA_ESTATE,
                                  "cuda: graph key %llu replayed a different forward (%d ops, "
                                  "captured %d); run it eagerly",
                                  (unsigned long long)c->key, c->n_ops, captured);
        }
        return cuda_graph_run(c, g, err);
    }
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (e == cudaSuccess && !c->graph_bad) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess || c->graph_bad || !exec) {
        if (exec) cudaGraphExecDestroy(exec);
        cudaGetLastError(); /* a failed capture spoils nothing that ran: nothing did */
        c->n_pending = 0;
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "cuda: this forward cannot be captured (%s); run it eagerly",
                              c->graph_msg[0]    ? c->graph_msg
                              : e != cudaSuccess ? cudaGetErrorString(e)
                                                 : "scratch, staging or bounce buffer too small");
    }
    cuda_graph_entry *g = &c->graphs[c->n_graphs++];
    g->key = c->key;
    g->sig = c->sig;
    g->n_ops = c->n_ops;
    g->exec = exec;
    return cuda_graph_run(c, g, err);
}

void cuda_graph_clear(backend *b) {
    cuda_impl *c = cuda_impl_of(b);
    while (c->n_graphs) cuda_graph_drop(c, &c->graphs[c->n_graphs - 1]);
}
