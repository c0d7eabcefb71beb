/* hub_sha256.c - SHA-256 of LFS downloads, checked against the sha256 the hub uses as
 * their etag, by libcrypto (OpenSSL, already in the process through libcurl), which
 * picks the CPU's SHA extensions itself. */
#include "engine/hub/hub_internal.h"

#include <openssl/evp.h>
#include <stdio.h>

int hub_sha256_init(hub_sha256 *s) {
    if (!s->ctx && !(s->ctx = EVP_MD_CTX_new())) return STRATA_ENOMEM;
    return EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) == 1 ? 0 : STRATA_ENOMEM;
}

void hub_sha256_update(hub_sha256 *s, const void *data, size_t n) {
    if (n) EVP_DigestUpdate(s->ctx, data, n);
}

void hub_sha256_hex(hub_sha256 *s, char out[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    out[0] = 0;
    if (EVP_DigestFinal_ex(s->ctx, md, &n) != 1 || n != 32) return; /* matches no etag */
    for (unsigned i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

void hub_sha256_free(hub_sha256 *s) {
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
}
