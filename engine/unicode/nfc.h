/* nfc.h - Unicode NFC with the Unicode 9.0 data HF tokenizers uses.
 *
 * Not the current Unicode NFC: marks added after 9.0 are left uncomposed on purpose, to
 * be byte-identical with the tokenizers crate (spec tokenizers.md section 4.6). */
#ifndef STRATA_UNICODE_NFC_H
#define STRATA_UNICODE_NFC_H

#include <stddef.h>

/* 1 when NFC leaves the valid UTF-8 s[0..len) unchanged for sure: every char is a
 * starter with NFC_Quick_Check=Yes that cannot compose with its predecessor. */
int unicode_nfc_is_quick(const char *s, size_t len);

/* NFC of the valid UTF-8 s[0..len), written into the growable buffer *out (capacity
 * *cap, realloc'ed as needed; caller frees); *out_len gets the length. Returns 0 or
 * STRATA_ENOMEM (then *out stays a valid buffer). */
int unicode_nfc(char **out, size_t *out_len, size_t *cap, const char *s, size_t len);

#endif
