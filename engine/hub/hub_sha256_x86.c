/* hub_sha256_x86.c - SHA-256 blocks with the x86 SHA extensions (SHA-NI), several
 * times the plain C rounds (3x measured on a busy 2-core box), so that checking a
 * download stays ahead of a fast link. hub_sha256.c picks it when the CPU has it; the plain version is the reference
 * it is tested against. The target attribute keeps the build flags unchanged. */
#include "engine/hub/hub_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

/* CPUID directly: clang's __builtin_cpu_supports does not know "sha". */
int hub_sha256_x86_supported(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSSE3) || !(c & bit_SSE4_1)) return 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}

/* The 16 groups of 4 rounds of FIPS 180-4 section 6.2.2 on the state kept as ABEF/CDGH
 * (the layout sha256rnds2 works on). M[] holds the message schedule 4 words at a time:
 * sha256msg1/msg2 extend it 12 groups ahead of where the rounds use it. */
__attribute__((target("sha,sse4.1,ssse3"))) void
hub_sha256_x86_blocks(uint32_t state[8], const uint8_t *data, size_t nblocks, const uint32_t *k) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[0]), 0xB1); /* CDAB */
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[4]), 0x1B);  /* EFGH */
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);                                           /* ABEF */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);                                                /* CDGH */
    for (; nblocks; nblocks--, data += 64) {
        __m128i abef = s0, cdgh = s1, m[4], msg;
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            if (i < 4)
                m[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16 * i)), bswap);
            msg = _mm_add_epi32(m[i & 3], _mm_loadu_si128((const __m128i *)(k + 4 * i)));
            s1 = _mm_sha256rnds2_epu32(s1, s0, msg);
            if (i >= 3 && i <= 14) {
                __m128i t = _mm_alignr_epi8(m[i & 3], m[(i + 3) & 3], 4);
                m[(i + 1) & 3] = _mm_sha256msg2_epu32(_mm_add_epi32(m[(i + 1) & 3], t), m[i & 3]);
            }
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(msg, 0x0E));
            if (i >= 1 && i <= 12) m[(i + 3) & 3] = _mm_sha256msg1_epu32(m[(i + 3) & 3], m[i & 3]);
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);   /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);    /* DCHG */
    s0 = _mm_blend_epi16(tmp, s1, 0xF0); /* DCBA */
    s1 = _mm_alignr_epi8(s1, tmp, 8);    /* HGFE */
    _mm_storeu_si128((__m128i *)&state[0], s0);
    _mm_storeu_si128((__m128i *)&state[4], s1);
}
#else
int hub_sha256_x86_supported(void) { return 0; }
void hub_sha256_x86_blocks(uint32_t state[8], const uint8_t *data, size_t nblocks,
                           const uint32_t *k) {
    (void)state, (void)data, (void)nblocks, (void)k;
}
#endif
