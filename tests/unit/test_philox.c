/* test_philox.c - engine/base/philox.h against Random123's known answers (kat_vectors,
 * the three philox4x32 10 lines), and the uniform it gives the sampler: in [0, 1), a pure
 * function of (seed, n), and about uniform. */
#include <math.h>

#include "engine/base/philox.h"
#include "tests/test.h"

static void test_known_answers(void) {
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        philox_block c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        philox_block o = philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
        for (int j = 0; j < 4; j++) CHECK_EQ_INT(o.v[j], kat[i].want[j]);
    }
}

static void test_uniform(void) {
    double sum = 0, lo = 1, hi = 0;
    int buckets[10] = {0};
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        double u = philox_uniform(42, (uint64_t)i);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        buckets[(int)(u * 10)]++;
    }
    CHECK(lo >= 0.0 && hi < 1.0);
    CHECK(fabs(sum / n - 0.5) < 0.005); /* sd of the mean: 0.29 / sqrt(1e5) = 0.0009 */
    for (int b = 0; b < 10; b++) CHECK(abs(buckets[b] - n / 10) < 600); /* sd ~95 */
    /* a pure function: the same (seed, n) anywhere, another seed or n another number */
    CHECK(philox_uniform(42, 7) == philox_uniform(42, 7));
    CHECK(philox_uniform(42, 7) != philox_uniform(43, 7));
    CHECK(philox_uniform(42, 7) != philox_uniform(42, 8));
    CHECK(philox_uniform(1ull << 32, 0) != philox_uniform(0, 0)); /* the key's high word counts */
    CHECK(philox_uniform(0, 1ull << 32) != philox_uniform(0, 0)); /* and the counter's */
}

int main(void) {
    RUN(test_known_answers);
    RUN(test_uniform);
    TEST_DONE();
}
