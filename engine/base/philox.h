/* philox.h - Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11), the counter-based generator the samplers draw from.
 *
 * A draw is a pure function of (key, counter): no state advances, so draw n of a request
 * is the same number wherever and in whatever order it is computed. The CPU sampler
 * (engine/sampler.c) and device code use this one header (it compiles as CUDA: the
 * functions are host and device there), so with the same seed the same token position
 * gets the same uniform on either backend. The known answers of Random123's kat_vectors
 * are checked in tests/unit/test_philox.c and, on the device, tests/cuda-host/test_runtime.cu. */
#ifndef STRATA_PHILOX_H
#define STRATA_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define PHILOX_FN static inline __host__ __device__
#else
#define PHILOX_FN static inline
#endif

typedef struct philox_block {
    uint32_t v[4];
} philox_block;

/* The 10-round bijection of the 128-bit counter ctr under the 64-bit key (k0, k1). */
PHILOX_FN philox_block philox4x32_10(philox_block ctr, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        if (r) { /* the Weyl key schedule */
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * ctr.v[0], p1 = (uint64_t)0xCD9E8D57u * ctr.v[2];
        philox_block n = {{(uint32_t)(p1 >> 32) ^ ctr.v[1] ^ k0, (uint32_t)p1,
                           (uint32_t)(p0 >> 32) ^ ctr.v[3] ^ k1, (uint32_t)p0}};
        ctr = n;
    }
    return ctr;
}

/* Draw n of the stream seed as a uniform double in [0, 1): the top 53 bits of the first
 * two words of block (n, 0, 0, 0) under key seed. */
PHILOX_FN double philox_uniform(uint64_t seed, uint64_t n) {
    philox_block c = {{(uint32_t)n, (uint32_t)(n >> 32), 0, 0}};
    philox_block o = philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    uint64_t bits = ((uint64_t)o.v[0] << 32 | o.v[1]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0);
}

#endif
