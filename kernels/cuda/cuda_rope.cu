/* cuda_rope.cu - rotate-half RoPE on the first rot dims of each head, in place.
 *
 * One thread per (token, frequency j): the angle tok_pos · inv_freq[j] is the f32 product
 * the CPU reference and torch form, and its cos / sin (full-range accurate, positions
 * reach 1e5 radians) are computed once and applied to every head. Threads of a warp take
 * consecutive j, so the pairs x[j], x[j + rot/2] are read coalesced. */
#include "kernels/cuda/cuda_internal.cuh"

__global__ void rope_rotate(float *x, const int32_t *tok_pos, const float *inv_freq, int m,
                            int heads, int hd, int half, int ld) {
    size_t total = (size_t)m * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx / (size_t)half), j = (int)(idx % (size_t)half);
        float a = (float)tok_pos[i] * inv_freq[j], s, c;
        sincosf(a, &s, &c);
        float *xr = x + (size_t)i * ld + j;
        for (int h = 0; h < heads; h++) {
            float *xh = xr + (size_t)h * hd;
            float x0 = xh[0], x1 = xh[half];
            xh[0] = x0 * c - x1 * s;
            xh[half] = x1 * c + x0 * s;
        }
    }
}

void cuda_rope(backend *b, float *x, const bk_batch *bt, const float *inv_freq, int heads, int hd,
               int rot, int ld) {
    cuda_impl *c = cuda_impl_of(b);
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    int m = bt->n_tokens, half = rot / 2;
    if (m <= 0 || half <= 0 || heads <= 0 ||
        !cuda_enter(c, CUDA_OP_ROPE, (const void *)x, (const void *)inv_freq, m, heads, hd, rot,
                    ld))
        return;
    size_t total = (size_t)m * half;
    rope_rotate<<<cuda_blocks(total, CUDA_BLOCK, 65535), CUDA_BLOCK, 0, c->stream>>>(
        x, d->tok_pos, inv_freq, m, heads, hd, half, ld);
    cuda_check_launch(c, "rope");
}
