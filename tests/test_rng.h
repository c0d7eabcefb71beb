/* test_rng.h - the xorshift64 stream the randomized tests draw from. Each test keeps its
 * own state, seeded once, so its draws (and what a failure reports) stay the same whatever
 * another test draws. Test-only. */
#ifndef STRATA_TEST_RNG_H
#define STRATA_TEST_RNG_H

#include <stdint.h>

/* A draw in [0, n), n > 0, advancing *state. */
static inline uint32_t test_rng_below(uint64_t *state, uint32_t n) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (uint32_t)(*state % n);
}

#endif
