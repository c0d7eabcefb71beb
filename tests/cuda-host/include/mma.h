/* mma.h for kernels/cuda compiled on the host: nvcuda::wmma, the warp-level tensor-core
 * API (tests/cuda-host/README.md), m16n16k16 with __nv_bfloat16 or __half inputs and
 * float accumulators.
 *
 * CUDA leaves the mapping of a fragment's elements to lanes unspecified, so a kernel may
 * only treat a fragment as a whole (fill, scale every element alike, load, store, mma).
 * Here every lane holds the whole tile: a load reads all of it, and an mma is computed once
 * for the warp (f32 sums in k order from the accumulator; the product of two 16-bit values
 * is exact in f32) and copied to every lane. A store writes only element e of the tile
 * where e % 32 is the lane, so a lane that reads the stored tile before a __syncwarp (or
 * __syncthreads) finds the elements of later lanes not yet written, as it may on a GPU.
 * Each operation is a rendezvous of the warp first (CUDA: "waits until all warp lanes have
 * arrived"), so lanes that diverge around one abort like a diverged shuffle. Pointers must
 * be 32-byte aligned and ldm a multiple of 16 bytes, as CUDA requires. */
#ifndef STRATA_HC_MMA_H
#define STRATA_HC_MMA_H

#include "tests/cuda-host/hc_device.h"
#include "tests/cuda-host/hc_half.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct hc_shape;
template <int M, int N, int K> struct hc_shape<matrix_a, M, N, K> {
    static constexpr int rows = M, cols = K;
};
template <int M, int N, int K> struct hc_shape<matrix_b, M, N, K> {
    static constexpr int rows = K, cols = N;
};
template <int M, int N, int K> struct hc_shape<accumulator, M, N, K> {
    static constexpr int rows = M, cols = N;
};

static inline float hc_wf(float v) { return v; }
static inline float hc_wf(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float hc_wf(__half v) { return __half2float(v); }

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "only m16n16k16 is emulated");
    static constexpr int rows = hc_shape<Use, M, N, K>::rows, cols = hc_shape<Use, M, N, K>::cols;
    static constexpr int num_elements = rows * cols;
    using element_type = T;
    using storage_element_type = T;
    T x[num_elements]; /* row-major, the whole tile on every lane */
};

static inline void hc_wmma_enter(const void *p, unsigned ldm, size_t elem) {
    hc_warp_exchange(HC_WMMA, 0xffffffffu, 0);
    if (p && ((uintptr_t)p & 31)) hc_kernel_fault("wmma: pointer %p is not 32-byte aligned", p);
    if (p && (ldm * elem) % 16) hc_kernel_fault("wmma: ldm %u is not a multiple of 16 bytes", ldm);
}

template <typename Use, int M, int N, int K, typename T, typename L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, T v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}
template <int M, int N, int K>
static inline void fill_fragment(fragment<accumulator, M, N, K, float, void> &f, float v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

/* Inputs: the layout is the fragment's own (row_major: element (r, c) at p[r·ldm + c]). */
template <typename Use, int M, int N, int K, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm) {
    static_assert(std::is_same<L, row_major>::value || std::is_same<L, col_major>::value,
                  "an input fragment has a layout");
    hc_wmma_enter(p, ldm, sizeof(T));
    constexpr bool rm = std::is_same<L, row_major>::value;
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++)
            f.x[r * f.cols + c] = rm ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float, void> &f, const float *p,
                                    unsigned ldm, layout_t l) {
    hc_wmma_enter(p, ldm, sizeof(float));
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++)
            f.x[r * f.cols + c] =
                l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float, void> &f,
                                     unsigned ldm, layout_t l) {
    hc_wmma_enter(p, ldm, sizeof(float));
    const int lane = hc_me()->lane;
    for (int e = lane; e < f.num_elements; e += 32) {
        const int r = e / f.cols, c = e % f.cols;
        (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[e];
    }
}

/* The product, computed once a warp by the last lane to arrive (every lane holds the same
 * tiles) into the warp's row of hc_wmma_out, which each lane then copies. */
template <typename T> struct hc_wmma_job {
    const T *a, *b;
    const float *c;
    float *out;
};
template <typename T> static void hc_wmma_product(void *p) {
    const hc_wmma_job<T> *j = (const hc_wmma_job<T> *)p;
    float fa[256], fb[256];
    for (int i = 0; i < 256; i++) fa[i] = hc_wf(j->a[i]), fb[i] = hc_wf(j->b[i]);
    for (int i = 0; i < 16; i++)
        for (int n = 0; n < 16; n++) {
            float s = j->c[i * 16 + n];
            for (int k = 0; k < 16; k++) s += fa[i * 16 + k] * fb[k * 16 + n];
            j->out[i * 16 + n] = s;
        }
}
static thread_local float hc_wmma_out[HC_MAX_THREADS / 32][256];

template <int M, int N, int K, typename T, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float, void> &d,
                            const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b,
                            const fragment<accumulator, M, N, K, float, void> &c) {
    float *out = hc_wmma_out[hc_me()->warp];
    hc_wmma_job<T> job = {a.x, b.x, c.x, out};
    hc_warp_exchange_last(HC_WMMA, 0xffffffffu, 0, hc_wmma_product<T>, &job);
    memcpy(d.x, out, sizeof d.x); /* d may be c */
}

} // namespace wmma
} // namespace nvcuda

#endif
