/* cuda_graph.cu - decode steps as CUDA graphs: capture once per key, replay after, and
 * up to two in flight.
 *
 * A forward is a few hundred small launches; at batch 1 on a small model their launch
 * cost is most of the step (perf-anchors §2). The model calls its ops exactly as in an
 * eager forward; between graph_begin and graph_end the backend either records them into
 * a graph (capture) or, when a graph for the key exists, skips every launch and only
 * refills the host side of the staging ring (replay) - the captured memcpy nodes read the
 * pinned ring when the graph runs, so the new ids and positions reach the device. A
 * running hash of every op and its device arguments guards the replay: a forward that
 * differs from the captured one is refused before anything runs.
 *
 * graph_end may return before the graph has run, so the engine prepares step t+1 (its
 * tokens fed on the device by step t's sampler) while step t runs. A graph's copies use
 * one half of the staging ring and of the bounce buffer, the half the graph in flight
 * does not, so the refill of one never touches what the other reads; a key is therefore
 * captured once per half. README.md has the design. */
#include <stdio.h>

#include "kernels/cuda/cuda_internal.cuh"

static cuda_graph_entry *cuda_graph_find(cuda_impl *c, uint64_t key, int half) {
    for (int i = 0; i < c->n_graphs; i++)
        if (c->graphs[i].key == key && c->graphs[i].half == half) return &c->graphs[i];
    return NULL;
}

static void cuda_graph_drop(cuda_impl *c, cuda_graph_entry *g) {
    cudaGraphExecDestroy(g->exec);
    *g = c->graphs[--c->n_graphs];
}

/* Waits for the oldest graph in flight and hands its downloads to their callers. */
static int cuda_flight_complete(cuda_impl *c) {
    cuda_flight *f = &c->flights[c->flight_head];
    cudaError_t e = cudaEventSynchronize(f->done);
    c->flight_head = (c->flight_head + 1) % CUDA_FLIGHT_MAX;
    c->n_flights--;
    if (e != cudaSuccess) {
        cuda_fail(c, "graph launch", e);
        for (int i = 0; i < f->n_pending; i++) /* never hand back stale memory as results */
            memset(f->pending[i].dst, 0, f->pending[i].bytes);
        return c->err_code;
    }
    for (int i = 0; i < f->n_pending; i++)
        memcpy(f->pending[i].dst, c->bounce + f->pending[i].off, f->pending[i].bytes);
    return 0;
}

int cuda_flights_drain(cuda_impl *c) {
    int rc = 0;
    while (c->n_flights)
        if (cuda_flight_complete(c)) rc = c->err_code;
    return rc;
}

int cuda_graph_sync(backend *b, strata_err *err) {
    cuda_impl *c = cuda_impl_of(b);
    if (c->mode != CUDA_MODE_EAGER)
        return strata_err_set(err, STRATA_ESTATE, "cuda: graph_sync inside a graph");
    if (c->n_flights) {
        cuda_use(c);
        cuda_flight_complete(c);
    }
    if (c->err_code) return strata_err_set(err, c->err_code, "%s", c->err_msg);
    return 0;
}

int cuda_graph_begin(backend *b, uint64_t key, strata_err *err) {
    cuda_impl *c = cuda_impl_of(b);
    if (c->mode != CUDA_MODE_EAGER)
        return strata_err_set(err, STRATA_ESTATE, "cuda: graph_begin inside a graph");
    if (c->err_code) return strata_err_set(err, c->err_code, "%s", c->err_msg);
    if (c->prof) /* a profiled forward times its ops one by one */
        return strata_err_set(err, STRATA_EUNSUPPORTED, "cuda: no graphs while profiling");
    cuda_use(c);
    /* The host side of the ring is refilled below: the eager copies still reading it must
     * be done, and so must the older of two graphs in flight (it owns the half we take). */
    if (c->stage_ev_live) {
        cudaEventSynchronize(c->stage_ev);
        c->stage_ev_live = 0;
    }
    if (c->n_flights == CUDA_FLIGHT_MAX && cuda_flight_complete(c))
        return strata_err_set(err, c->err_code, "%s", c->err_msg);
    int newest = (c->flight_head + c->n_flights - 1) % CUDA_FLIGHT_MAX;
    c->half = c->n_flights ? 1 - c->flights[newest].half : 0;
    c->stage_off = (size_t)c->half * (CUDA_STAGE_BYTES / 2);
    c->stage_end = c->stage_off + CUDA_STAGE_BYTES / 2;
    c->bounce_off = (size_t)c->half * (CUDA_BOUNCE_BYTES / 2);
    c->bounce_end = c->bounce_off + CUDA_BOUNCE_BYTES / 2;
    c->n_pending = 0;
    c->key = key;
    c->sig = 0xcbf29ce484222325ULL;
    c->n_ops = 0;
    c->graph_bad = 0;
    c->graph_msg[0] = 0;
    if (cuda_graph_find(c, key, c->half)) {
        c->mode = CUDA_MODE_REPLAY;
        return 1;
    }
    if (c->n_graphs == CUDA_GRAPH_MAX)
        return strata_err_set(err, STRATA_ERANGE, "cuda: more than %d graph keys", CUDA_GRAPH_MAX);
    /* Thread-local: other threads of the process (HTTP, loop) may call CUDA-free code
     * only, but a relaxed mode would hide our own unsafe calls. */
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return strata_err_set(err, STRATA_EDEVICE, "cuda: cannot capture: %s",
                              cudaGetErrorString(e));
    }
    c->mode = CUDA_MODE_CAPTURE;
    return 0;
}

/* Launches g and records it in flight; with wait, completes every graph in flight. A
 * launch refused while the device stays usable (the stream still synchronises) ran
 * nothing: g is dropped and the caller runs the forward eagerly; any other failure is
 * sticky. */
static int cuda_graph_run(cuda_impl *c, cuda_graph_entry *g, int wait, strata_err *err) {
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
    if (e != cudaSuccess) {
        cuda_fail(c, "graph launch", e);
        c->n_pending = 0;
        return strata_err_set(err, STRATA_EDEVICE, "%s", c->err_msg);
    }
    cuda_flight *f = &c->flights[(c->flight_head + c->n_flights) % CUDA_FLIGHT_MAX];
    f->half = c->half;
    f->n_pending = c->n_pending;
    memcpy(f->pending, c->pending, sizeof f->pending[0] * (size_t)c->n_pending);
    c->n_pending = 0;
    c->n_flights++;
    e = cudaEventRecord(f->done, c->stream);
    if (e != cudaSuccess) cuda_fail(c, "graph event", e);
    if (wait) cuda_flights_drain(c);
    if (c->err_code) return strata_err_set(err, c->err_code, "%s", c->err_msg);
    return 0;
}

int cuda_graph_end(backend *b, int wait, strata_err *err) {
    cuda_impl *c = cuda_impl_of(b);
    cuda_mode mode = c->mode;
    c->mode = CUDA_MODE_EAGER;
    c->stage_end = CUDA_STAGE_BYTES; /* eager ops may use it all, once nothing is in flight */
    if (mode == CUDA_MODE_EAGER)
        return strata_err_set(err, STRATA_ESTATE, "cuda: graph_end without graph_begin");
    if (mode == CUDA_MODE_REPLAY) {
        cuda_graph_entry *g = cuda_graph_find(c, c->key, c->half);
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
        return cuda_graph_run(c, g, wait, err);
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
    g->half = c->half;
    g->sig = c->sig;
    g->n_ops = c->n_ops;
    g->exec = exec;
    return cuda_graph_run(c, g, wait, err);
}

void cuda_graph_clear(backend *b) {
    cuda_impl *c = cuda_impl_of(b);
    cuda_flights_drain(c);
    while (c->n_graphs) cuda_graph_drop(c, &c->graphs[c->n_graphs - 1]);
}
