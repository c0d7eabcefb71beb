/* utf8.h - UTF-8 helpers shared by the tokenizer, detokenizer and NFC.
 *
 * Invalid input is replaced the way Rust's String::from_utf8_lossy and Python's
 * bytes.decode("utf-8", "replace") do: one U+FFFD per maximal subpart of an ill-formed
 * sequence (Unicode ch. 3, "U+FFFD substitution of maximal subparts"). */
#ifndef STRATA_UNICODE_UTF8_H
#define STRATA_UNICODE_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/strbuf.h"

/* Classifies the sequence at s[0..n): returns its length (1-4) when it is one complete,
 * valid character; -k when the first k bytes are an ill-formed maximal subpart (k >= 1);
 * 0 when the n available bytes are a valid but incomplete prefix (n >= 1). */
static inline int unicode_utf8_check(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) return 0;
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -i;
    }
    return need + 1;
}

/* Decodes the valid character at s (caller checked validity); sets *len. */
static inline uint32_t unicode_utf8_decode(const uint8_t *s, int *len) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if (c < 0xE0) {
        *len = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (c < 0xF0) {
        *len = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *len = 4;
    return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
           ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* Writes cp as UTF-8 into out (room for 4); returns the length. */
static inline int unicode_utf8_encode(uint32_t cp, char *out) {
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* 1 when s[0..n) is entirely valid UTF-8. */
static inline int unicode_utf8_valid(const char *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int k = unicode_utf8_check(p + i, n - i);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* Appends s[0..n) to out with every ill-formed maximal subpart replaced by one
 * U+FFFD (an incomplete tail counts as one). 0 or STRATA_ENOMEM. */
int unicode_utf8_lossy(strbuf *out, const char *s, size_t n);
/* The same for one piece of a stream: unless final, an incomplete character at the end is
 * not consumed (it may be completed by the next piece). *used: the bytes consumed. */
int unicode_utf8_lossy_part(strbuf *out, const char *s, size_t n, int final, size_t *used);

/* Unicode White_Space (what Rust's char::is_whitespace tests). */
static inline int unicode_is_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

#endif
