/* cuda_membw.cu - the device-memory ceiling decode is held against: the bandwidth of a
 * device-to-device copy, counted as bytes read plus bytes written over the copy's time
 * (the figure tools/device/peer_bench.py measures for the peers, perf-anchors §8).
 * Best of a few passes after a warm-up. Allocates and frees its buffer: never called
 * from the step loop (backend.h). */
#include "kernels/cuda/cuda_internal.cuh"

double cuda_read_bandwidth(backend *b, size_t bytes) {
    cuda_impl *c = cuda_impl_of(b);
    if (c->mode != CUDA_MODE_EAGER || bytes < 2 * 4096) return 0.0;
    cuda_use(c);
    size_t half = bytes / 2 & ~(size_t)4095;
    char *buf = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = 0.0;
    if (cudaMalloc((void **)&buf, 2 * half) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) goto out;
    cudaMemsetAsync(buf, 1, 2 * half, c->stream);
    for (int rep = 0; rep < 6; rep++) {
        cudaEventRecord(e0, c->stream);
        cudaMemcpyAsync(buf + half, buf, half, cudaMemcpyDeviceToDevice, c->stream);
        cudaEventRecord(e1, c->stream);
        if (cudaEventSynchronize(e1) != cudaSuccess) break;
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        double gbs = ms > 0 ? 2.0 * (double)half / (ms * 1e-3) / 1e9 : 0.0;
        if (rep > 0 && gbs > best) best = gbs; /* pass 0 warms up */
    }
out:
    cudaGetLastError();
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaStreamSynchronize(c->stream);
    cudaFree(buf);
    return best;
}
