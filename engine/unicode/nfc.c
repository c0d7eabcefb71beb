/* nfc.c - canonical decomposition, reordering and composition (UAX #15) over
 * the generated Unicode 9.0 tables. Input must be valid UTF-8 (the tokenizer sanitises
 * text before normalising). */
#include "engine/unicode/nfc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"
#include "engine/unicode/nfc_internal.h"
#include "engine/base/utf8.h"

enum {
    HANGUL_S = 0xAC00,
    HANGUL_L = 0x1100,
    HANGUL_V = 0x1161,
    HANGUL_T = 0x11A7,
    HANGUL_LCOUNT = 19,
    HANGUL_VCOUNT = 21,
    HANGUL_TCOUNT = 28,
    HANGUL_NCOUNT = HANGUL_VCOUNT * HANGUL_TCOUNT,
    HANGUL_SCOUNT = HANGUL_LCOUNT * HANGUL_NCOUNT,
};

static uint16_t nfc_props(uint32_t cp) {
    if (cp >= UNICODE_NFC_LIMIT) return 0;
    return unicode_nfc_stage2[unicode_nfc_stage1[cp / UNICODE_NFC_BLOCK] * UNICODE_NFC_BLOCK +
                              cp % UNICODE_NFC_BLOCK];
}

static int nfc_ccc(uint32_t cp) { return nfc_props(cp) & 0xFF; }

int unicode_nfc_is_quick(const char *s, size_t len) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int k;
        uint32_t cp = unicode_utf8_decode(p + i, &k);
        /* NFC_Quick_Check=Yes starters that cannot join a predecessor are stable; a
         * precomposed char (e.g. U+00E9) recomposes to itself. */
        if (nfc_props(cp) & (0xFF | UNICODE_NFC_COMP_SECOND | UNICODE_NFC_QC_NO)) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* Canonical composite of (a, b), or 0 when the pair does not compose. */
static uint32_t nfc_compose(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LCOUNT && b >= HANGUL_V &&
        b < HANGUL_V + HANGUL_VCOUNT)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VCOUNT + (b - HANGUL_V)) * HANGUL_TCOUNT;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SCOUNT && (a - HANGUL_S) % HANGUL_TCOUNT == 0 &&
        b > HANGUL_T && b < HANGUL_T + HANGUL_TCOUNT)
        return a + (b - HANGUL_T);
    if (!(nfc_props(b) & UNICODE_NFC_COMP_SECOND)) return 0;
    uint64_t key = ((uint64_t)a << 21) | b;
    size_t lo = 0, hi = unicode_nfc_n_comp;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (unicode_nfc_comp_key[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo < unicode_nfc_n_comp && unicode_nfc_comp_key[lo] == key ? unicode_nfc_comp_val[lo]
                                                                      : 0;
}

/* Appends the full canonical decomposition of cp to buf[*n..]; buf has room for 4 more
 * code points than the longest decomposition (18 in Unicode 9.0, checked by caller). */
static void nfc_decompose(uint32_t cp, uint32_t *buf, size_t *n) {
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SCOUNT) {
        uint32_t si = cp - HANGUL_S;
        buf[(*n)++] = HANGUL_L + si / HANGUL_NCOUNT;
        buf[(*n)++] = HANGUL_V + (si % HANGUL_NCOUNT) / HANGUL_TCOUNT;
        if (si % HANGUL_TCOUNT) buf[(*n)++] = HANGUL_T + si % HANGUL_TCOUNT;
        return;
    }
    if (nfc_props(cp) & UNICODE_NFC_HAS_DECOMP) {
        size_t lo = 0, hi = unicode_nfc_n_decomp;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (unicode_nfc_decomp_cp[mid] < cp) lo = mid + 1;
            else hi = mid;
        }
        if (lo < unicode_nfc_n_decomp && unicode_nfc_decomp_cp[lo] == cp) {
            uint32_t off = unicode_nfc_decomp_off[lo];
            for (uint32_t i = 0; i < (off & 7); i++)
                buf[(*n)++] = unicode_nfc_decomp_data[(off >> 3) + i];
            return;
        }
    }
    buf[(*n)++] = cp;
}

int unicode_nfc(char **out, size_t *out_len, size_t *cap, const char *s, size_t len) {
    const uint8_t *p = (const uint8_t *)s;
    /* Each char (>= 1 byte) decomposes into at most 4 code points. */
    uint32_t *cps = malloc((len * 4 + 8) * sizeof *cps);
    if (!cps) return STRATA_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        int k;
        uint32_t cp = unicode_utf8_decode(p + i, &k);
        nfc_decompose(cp, cps, &n);
        i += (size_t)k;
    }
    /* Canonical ordering: stable insertion sort of each run of non-starters by ccc. */
    for (size_t i = 1; i < n; i++) {
        int c = nfc_ccc(cps[i]);
        if (!c) continue;
        uint32_t v = cps[i];
        size_t j = i;
        while (j > 0 && nfc_ccc(cps[j - 1]) > c) {
            cps[j] = cps[j - 1];
            j--;
        }
        cps[j] = v;
    }
    /* Composition (the UAX #15 reference loop). */
    if (n > 0) {
        size_t starter = 0, w = 1;
        uint32_t starter_ch = cps[0];
        int last = nfc_ccc(starter_ch) ? 256 : 0;
        for (size_t i = 1; i < n; i++) {
            uint32_t ch = cps[i];
            int cc = nfc_ccc(ch);
            uint32_t comp = nfc_compose(starter_ch, ch);
            if (comp && (last < cc || last == 0)) {
                cps[starter] = starter_ch = comp;
                continue;
            }
            if (cc == 0) {
                starter = w;
                starter_ch = ch;
            }
            last = cc;
            cps[w++] = ch;
        }
        n = w;
    }
    size_t need = n * 4 + 1;
    if (*cap < need) {
        char *nb = realloc(*out, need);
        if (!nb) {
            free(cps);
            return STRATA_ENOMEM;
        }
        *out = nb;
        *cap = need;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)unicode_utf8_encode(cps[i], *out + o);
    *out_len = o;
    free(cps);
    return 0;
}
