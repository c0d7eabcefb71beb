/* gbnf_text.c - writing GBNF text: literals and "anything up to this tag" rules. */
#include <string.h>

#include "server/gbnf_text.h"

int gbnf_literal(strbuf *out, const char *s, size_t n) {
    int rc = strbuf_addc(out, '"');
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') rc = strbuf_addc(out, '\\') || strbuf_addc(out, (char)c);
        else if (c < 0x20 || c == 0x7F) rc = strbuf_addf(out, "\\x%02X", c);
        else rc = strbuf_addc(out, (char)c);
    }
    return rc || strbuf_addc(out, '"') ? -1 : 0;
}

/* One byte as a class member: escaped when the class syntax would read it otherwise. */
static int class_byte(strbuf *out, unsigned char c) {
    if (c < 0x20 || c >= 0x7F || c == ']' || c == '[' || c == '\\' || c == '^' || c == '-' ||
        c == '"')
        return strbuf_addf(out, "\\x%02X", c);
    return strbuf_addc(out, (char)c);
}

/* text-without-end end, as: ( [^e0] | e0 [^e1 e0] | e0 e1 [^e2 e0] | ... )* end. A piece
 * that has read a prefix of end and then a byte that is neither the next byte of end nor
 * end's first byte leaves the match attempt behind; excluding e0 there keeps every piece
 * from swallowing the start of end. */
int gbnf_until(strbuf *out, const char *name, const char *end) {
    size_t n = strlen(end);
    int rc = strbuf_addf(out, "%s ::= (", name);
    for (size_t k = 0; k < n && !rc; k++) {
        if (k) rc = strbuf_adds(out, " | ");
        if (k && !rc) rc = gbnf_literal(out, end, k);
        if (!rc) rc = strbuf_adds(out, k ? " [^" : "[^");
        if (!rc) rc = class_byte(out, (unsigned char)end[k]);
        if (!rc && k && end[k] != end[0]) rc = class_byte(out, (unsigned char)end[0]);
        if (!rc) rc = strbuf_addc(out, ']');
    }
    if (!rc) rc = strbuf_adds(out, ")* ");
    if (!rc) rc = gbnf_literal(out, end, n);
    if (!rc) rc = strbuf_addc(out, '\n');
    return rc ? -1 : 0;
}
