/* sampler_scan.c - the sampler's passes over a row (see sampler_scan.h).
 *
 * The arg-max and the exponential sum walk the row in blocks of 16 with 16 running
 * values: a loop whose trip count is a multiple of the vector length is what gcc's -O2
 * vectorizes, and target_clones builds it for AVX-512, AVX2 and the baseline, picked at
 * load time. The selection is a radix select on the values' order-preserving bit
 * patterns: a histogram of the top 11 bits finds the bin of the k-th value, the next 11
 * and the last 10 bits narrow it to one value, and the ties at that value go to the
 * lowest ids. Two passes over the row, where a quickselect swapped through an index
 * array of the whole vocabulary; up to 64 candidates, one pass that skips a block unless
 * its largest value enters the list. */
#include "engine/sampler_scan.h"

#include <math.h>
#include <string.h>

/* SAMPLER_SCAN_BASELINE: one plain build, which tests/unit/test_sampler_scan.c includes to
 * check the baseline clone on machines whose loader picks another. gcc only: clang 14 names
 * the dispatched symbol "vocab_argmax.ifunc", so callers would not link. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__) && !defined(SAMPLER_SCAN_BASELINE)
#define VS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VS_CLONES
#endif

enum { VS_BLOCK = 16 };

VS_CLONES float vocab_argmax(const float *x, int n, int32_t *arg) {
    float m[VS_BLOCK];
    for (int j = 0; j < VS_BLOCK; j++) m[j] = -INFINITY;
    int i = 0;
    for (; i + VS_BLOCK <= n; i += VS_BLOCK)
        for (int j = 0; j < VS_BLOCK; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    float mx = -INFINITY;
    for (int j = 0; j < VS_BLOCK; j++) mx = m[j] > mx ? m[j] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    *arg = 0;
    if (mx > -INFINITY)
        for (i = 0; i < n; i++)
            if (x[i] == mx) {
                *arg = i;
                break;
            }
    return mx;
}

/* exp(d) for d <= 0 by Cody and Waite's reduction, d = k ln 2 + r with |r| <= ln 2 / 2,
 * and exp(r) by its Taylor series to r^13 (the next term is under 2^-57 of it); 2^k is
 * built in the exponent field. d under -708 (and NaN) is taken as -708: a term of 3e-308. */
static inline double vs_exp(double d) {
    const double shift = 0x1.8p52; /* adding it rounds to an integer held in the low bits */
    d = d >= -708.0 ? d : -708.0;
    d = d <= 709.0 ? d : 709.0;
    double t = d * 0x1.71547652b82fep0 + shift; /* d / ln 2 */
    double k = t - shift;
    double r = d - k * 0x1.62e42feep-1; /* ln 2's upper bits: k times them is exact */
    r = r - k * 0x1.a39ef35793c76p-33;  /* the rest of ln 2 */
    double p = 1.0 / 6227020800.0;      /* 1/13! */
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t tb, sb, scale_bits;
    double scale;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&sb, &shift, sizeof sb);
    scale_bits = (tb - sb + 1023u) << 52; /* k + 1023 in [2, 2046]: a normal power of two */
    memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}

VS_CLONES double vocab_sum_exp(const float *x, int n, double top, double inv_t) {
    double acc[VS_BLOCK] = {0};
    int i = 0;
    for (; i + VS_BLOCK <= n; i += VS_BLOCK)
        for (int j = 0; j < VS_BLOCK; j++) acc[j] += vs_exp(((double)x[i + j] - top) * inv_t);
    double tail = 0;
    for (; i < n; i++) tail += vs_exp(((double)x[i] - top) * inv_t);
    for (int w = VS_BLOCK / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0] + tail;
}

/* The value's place in the order of sampler_scan.h as an unsigned integer: NaN 0, -0 as
 * +0, then the IEEE bits with the negatives' reversed. */
static inline uint32_t vs_key(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    uint32_t mag = u & 0x7fffffffu;
    /* without branches on the sign: logits are half negative, in no order */
    uint32_t key = u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
    key = mag == 0 ? 0x80000000u : key;
    return mag > 0x7f800000u ? 0 : key;
}

/* Keys of a block, in a loop the compiler vectorizes. */
static inline void vs_keys(const float *x, uint32_t *key) {
    for (int j = 0; j < VS_BLOCK; j++) key[j] = vs_key(x[j]);
}

/* The bin, counted from the top of h[0..nbins), that holds the need-th largest;
 * *need becomes its rank among that bin's values. */
static uint32_t vs_bin_of_rank(const uint32_t *h, int nbins, int *need) {
    for (int b = nbins - 1; b > 0; b--) {
        if ((uint32_t)*need <= h[b]) return (uint32_t)b;
        *need -= (int)h[b];
    }
    return 0;
}

/* Few candidates (top_k 40, top logprobs): one pass keeping the best k in a sorted list,
 * which a block enters only when its largest key beats the list's last. An equal key goes
 * after its equals and never enters a full list, so the list is in the order, ties kept
 * the lowest ids. */
VS_CLONES static void vs_top_few(const float *x, int n, int k, int32_t *idx) {
    uint32_t kk[VOCAB_TOP_FEW], key[VS_BLOCK];
    int32_t ki[VOCAB_TOP_FEW];
    int cnt = 0;
    for (int i = 0; i < n; i += VS_BLOCK) {
        int len = n - i < VS_BLOCK ? n - i : VS_BLOCK;
        if (len == VS_BLOCK) {
            vs_keys(x + i, key);
            uint32_t top = 0;
            for (int j = 0; j < VS_BLOCK; j++) top = key[j] > top ? key[j] : top;
            if (cnt == k && top <= kk[k - 1]) continue;
        } else {
            for (int j = 0; j < len; j++) key[j] = vs_key(x[i + j]);
        }
        for (int j = 0; j < len; j++) {
            if (cnt == k && key[j] <= kk[k - 1]) continue;
            int p = cnt < k ? cnt++ : k - 1;
            for (; p > 0 && kk[p - 1] < key[j]; p--) kk[p] = kk[p - 1], ki[p] = ki[p - 1];
            kk[p] = key[j];
            ki[p] = i + j;
        }
    }
    memcpy(idx, ki, sizeof(int32_t) * (size_t)k);
}

VS_CLONES void vocab_top_k(const float *x, int n, int k, int32_t *idx, int32_t *tmp) {
    if (k <= VOCAB_TOP_FEW) {
        vs_top_few(x, n, k, idx);
        return;
    }
    if (k >= n) {
        for (int i = 0; i < n; i++) idx[i] = i;
        return;
    }
    /* four histograms so that runs of one bin do not wait on one counter */
    enum { HB = 2048 };
    uint32_t h[4][HB], key[VS_BLOCK];
    memset(h, 0, sizeof h);
    int i = 0;
    for (; i + VS_BLOCK <= n; i += VS_BLOCK) {
        vs_keys(x + i, key);
        for (int j = 0; j < VS_BLOCK; j += 4)
            for (int c = 0; c < 4; c++) h[c][key[j + c] >> 21]++;
    }
    for (; i < n; i++) h[0][vs_key(x[i]) >> 21]++;
    for (int b = 0; b < HB; b++) h[0][b] += h[1][b] + h[2][b] + h[3][b];
    int need = k, na = 0, nt = 0;
    uint32_t b1 = vs_bin_of_rank(h[0], HB, &need);
    /* ids above the bin are in; those in it wait, in id order. Most blocks hold neither. */
    for (i = 0; i < n; i += VS_BLOCK) {
        int len = n - i < VS_BLOCK ? n - i : VS_BLOCK;
        uint32_t top = 0;
        if (len == VS_BLOCK) {
            vs_keys(x + i, key);
            for (int j = 0; j < VS_BLOCK; j++) top = key[j] > top ? key[j] : top;
        } else {
            for (int j = 0; j < len; j++) key[j] = vs_key(x[i + j]);
            top = b1 << 21;
        }
        if (top >> 21 < b1) continue;
        for (int j = 0; j < len; j++) {
            uint32_t b = key[j] >> 21;
            if (b > b1) idx[na++] = i + j;
            else if (b == b1) tmp[nt++] = i + j;
        }
    }
    memset(h[0], 0, sizeof h[0]);
    for (int t = 0; t < nt; t++) h[0][vs_key(x[tmp[t]]) >> 10 & 2047]++;
    uint32_t b2 = vs_bin_of_rank(h[0], HB, &need);
    int nt2 = 0;
    for (int t = 0; t < nt; t++) {
        uint32_t b = vs_key(x[tmp[t]]) >> 10 & 2047;
        if (b > b2) idx[na++] = tmp[t];
        else if (b == b2) tmp[nt2++] = tmp[t];
    }
    memset(h[0], 0, sizeof h[0]);
    for (int t = 0; t < nt2; t++) h[0][vs_key(x[tmp[t]]) & 1023]++;
    uint32_t b3 = vs_bin_of_rank(h[0], 1024, &need);
    for (int t = 0; t < nt2; t++) { /* one value left: its lowest ids */
        uint32_t b = vs_key(x[tmp[t]]) & 1023;
        if (b > b3 || (b == b3 && need-- > 0)) idx[na++] = tmp[t];
    }
}
