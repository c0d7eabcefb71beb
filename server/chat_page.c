/* chat_page.c - the chat page at GET / (server/chat.html: one file of HTML, CSS and
 * vanilla JS, no external resource), embedded by the assembler as openapi_doc.c
 * embeds openapi.json, so the binary needs no file at run time.
 *
 * The Content-Security-Policy lets the page run only its own inline <script> and
 * <style> (named by their SHA-256, computed here once from the embedded bytes, so an
 * edit of chat.html can never leave a stale hash) and talk only to its own origin:
 * were model text ever to reach the DOM as markup, no script of it would run and no
 * request could leave for another host. Thread: MHD threads. */
#include "server/chat_page.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "server/server_internal.h"

extern const char chat_page_start[];
extern const char chat_page_end[];

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".global chat_page_start\n"
        "chat_page_start:\n"
        ".incbin \"server/chat.html\"\n"
        ".global chat_page_end\n"
        "chat_page_end:\n"
        ".byte 0\n"
        ".previous\n");

/* 'sha256-' + 44 base64 characters + quote + NUL */
#define CHAT_HASH_MAX 56
static char chat_csp[256 + 2 * CHAT_HASH_MAX];
static int chat_csp_ok;
static pthread_once_t chat_once = PTHREAD_ONCE_INIT;

/* The CSP source of the text between the first open tag and its close tag; 0 or -1
 * (a page without that element, or no digest). */
static int chat_hash(const char *page, const char *open, const char *close, char *out) {
    const char *a = strstr(page, open), *b;
    if (!a || !(b = strstr(a += strlen(open), close))) return -1;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (EVP_Digest(a, (size_t)(b - a), md, &n, EVP_sha256(), NULL) != 1 || n != 32) return -1;
    memcpy(out, "'sha256-", 8);
    int k = EVP_EncodeBlock((unsigned char *)out + 8, md, (int)n);
    if (k != 44) return -1;
    memcpy(out + 8 + k, "'", 2);
    return 0;
}

static void chat_csp_build(void) {
    char script[CHAT_HASH_MAX], style[CHAT_HASH_MAX];
    if (chat_hash(chat_page_start, "<script>", "</script>", script) ||
        chat_hash(chat_page_start, "<style>", "</style>", style))
        return;
    int n = snprintf(chat_csp, sizeof chat_csp,
                     "default-src 'none'; script-src %s; style-src %s; connect-src 'self'; "
                     "img-src 'self'; base-uri 'none'; form-action 'none'; "
                     "frame-ancestors 'none'",
                     script, style);
    chat_csp_ok = n > 0 && (size_t)n < sizeof chat_csp;
}

enum MHD_Result route_chat_page(struct MHD_Connection *c) {
    pthread_once(&chat_once, chat_csp_build);
    if (!chat_csp_ok)
        return http_respond_error_close(c, 500, "server_error", NULL,
                                        "The chat page has no script or style to hash");
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        (size_t)(chat_page_end - chat_page_start), (void *)chat_page_start, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(resp, "Content-Security-Policy", chat_csp);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    cors_add_headers(c, resp);
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return rc;
}
