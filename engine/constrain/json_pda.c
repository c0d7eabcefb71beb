/* json_pda.c - one JSON object (RFC 8259) recognized a byte at a time, and the mask walk
 * that runs it down the token trie.
 *
 * The recognizer is a pushdown automaton whose whole state is a json_pda (a 64-entry bit
 * stack of open containers plus a few bytes), so the walk can copy it at every trie node.
 * Beyond the RFC it refuses what would make the output useless or unreadable by jansson:
 * a top-level value other than an object, anything after that object closes (the end of
 * the sequence is the only continuation), nesting past 64, whitespace runs past
 * JSON_PDA_MAX_WS, numbers past JSON_PDA_MAX_INT_DIGITS / JSON_PDA_MAX_EXP_DIGITS, \u0000,
 * and \u escapes that are lone surrogates. Strings must be valid UTF-8, checked a byte at a
 * time (no overlongs, no surrogates, nothing past U+10FFFF) since a token may end inside a
 * character. */
#include "engine/constrain/constrain_internal.h"

/* The letters after the first one of true, false and null; a 0 ends each. */
static const char json_pda_lits[] = "rue\0alse\0ull";
enum { LIT_TRUE = 0, LIT_FALSE = 4, LIT_NULL = 9 };

void json_pda_init(json_pda *s) {
    *s = (json_pda){0};
    s->mode = JSON_PDA_START;
}

static inline int hexval(uint8_t b) {
    if (b >= '0' && b <= '9') return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return -1;
}

static inline int top_is_object(const json_pda *s) { return (int)(s->stack >> (s->depth - 1)) & 1; }

static inline int push(json_pda *s, int object) {
    if (s->depth == JSON_PDA_MAX_DEPTH) return -1;
    uint64_t bit = (uint64_t)1 << s->depth;
    s->stack = object ? s->stack | bit : s->stack & ~bit;
    s->depth++;
    s->mode = object ? JSON_PDA_OBJ : JSON_PDA_ARR;
    return 0;
}

static inline void pop(json_pda *s) {
    s->depth--;
    s->mode = s->depth ? JSON_PDA_AFTER : JSON_PDA_DONE;
}

/* The first byte of a value (whitespace already handled). */
static inline int value_start(json_pda *s, uint8_t b) {
    switch (b) {
    case '{': return push(s, 1);
    case '[': return push(s, 0);
    case '"': s->mode = JSON_PDA_STR, s->key = 0; return 0;
    case '-': s->mode = JSON_PDA_NEG; return 0;
    case '0': s->mode = JSON_PDA_ZERO; return 0;
    case 't': s->mode = JSON_PDA_LIT, s->aux = LIT_TRUE; return 0;
    case 'f': s->mode = JSON_PDA_LIT, s->aux = LIT_FALSE; return 0;
    case 'n': s->mode = JSON_PDA_LIT, s->aux = LIT_NULL; return 0;
    default:
        if (b < '1' || b > '9') return -1;
        s->mode = JSON_PDA_INT, s->aux = 1;
        return 0;
    }
}

/* A byte between JSON tokens: whitespace or the next structural byte / value. */
static inline int between(json_pda *s, uint8_t b) {
    if (b == ' ' || b == '\n' || b == '\r' || b == '\t') {
        if (s->ws == JSON_PDA_MAX_WS) return -1;
        s->ws++;
        return 0;
    }
    s->ws = 0;
    switch (s->mode) {
    case JSON_PDA_START: return b == '{' ? push(s, 1) : -1;
    case JSON_PDA_OBJ:
        if (b == '}') return pop(s), 0;
        /* fall through */
    case JSON_PDA_KEY:
        if (b != '"') return -1;
        s->mode = JSON_PDA_STR, s->key = 1;
        return 0;
    case JSON_PDA_COLON:
        if (b != ':') return -1;
        s->mode = JSON_PDA_VALUE;
        return 0;
    case JSON_PDA_ARR:
        if (b == ']') return pop(s), 0;
        return value_start(s, b);
    case JSON_PDA_VALUE: return value_start(s, b);
    case JSON_PDA_AFTER:
        if (b == ',') {
            s->mode = top_is_object(s) ? JSON_PDA_KEY : JSON_PDA_VALUE;
            return 0;
        }
        if (b != (top_is_object(s) ? '}' : ']')) return -1;
        pop(s);
        return 0;
    default: return -1; /* JSON_PDA_DONE */
    }
}

/* A byte inside a string; the string modes never touch the rest of the state. */
static inline int in_string(json_pda *s, uint8_t b) {
    int h;
    switch (s->mode) {
    case JSON_PDA_STR:
        if (b == '"') {
            s->mode = s->key ? JSON_PDA_COLON : JSON_PDA_AFTER;
            return 0;
        }
        if (b == '\\') s->mode = JSON_PDA_ESC;
        else if (b < 0x20) return -1;
        else if (b < 0x80) return 0;
        else if (b < 0xC2) return -1; /* a stray continuation byte or an overlong lead */
        else if (b < 0xE0) s->mode = JSON_PDA_C1;
        else if (b == 0xE0) s->mode = JSON_PDA_E0;
        else if (b == 0xED) s->mode = JSON_PDA_ED;
        else if (b < 0xF0) s->mode = JSON_PDA_C2;
        else if (b == 0xF0) s->mode = JSON_PDA_F0;
        else if (b < 0xF4) s->mode = JSON_PDA_C3;
        else if (b == 0xF4) s->mode = JSON_PDA_F4;
        else return -1;
        return 0;
    case JSON_PDA_C1: s->mode = JSON_PDA_STR; return (b & 0xC0) == 0x80 ? 0 : -1;
    case JSON_PDA_C2: s->mode = JSON_PDA_C1; return (b & 0xC0) == 0x80 ? 0 : -1;
    case JSON_PDA_C3: s->mode = JSON_PDA_C2; return (b & 0xC0) == 0x80 ? 0 : -1;
    case JSON_PDA_E0: s->mode = JSON_PDA_C1; return b >= 0xA0 && b <= 0xBF ? 0 : -1;
    case JSON_PDA_ED: s->mode = JSON_PDA_C1; return b >= 0x80 && b <= 0x9F ? 0 : -1;
    case JSON_PDA_F0: s->mode = JSON_PDA_C2; return b >= 0x90 && b <= 0xBF ? 0 : -1;
    case JSON_PDA_F4: s->mode = JSON_PDA_C2; return b >= 0x80 && b <= 0x8F ? 0 : -1;
    case JSON_PDA_ESC:
        switch (b) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't': s->mode = JSON_PDA_STR; return 0;
        case 'u': s->mode = JSON_PDA_U1; return 0;
        default: return -1;
        }
    case JSON_PDA_U1:
        if ((h = hexval(b)) < 0) return -1;
        s->mode = h == 0xD ? JSON_PDA_U2D : JSON_PDA_U2;
        s->aux = h == 0;
        return 0;
    case JSON_PDA_U2:
    case JSON_PDA_U3:
        if ((h = hexval(b)) < 0) return -1;
        s->mode++;
        s->aux &= h == 0;
        return 0;
    case JSON_PDA_U4:
        /* \u0000 is valid JSON, but jansson (and every C consumer) refuses it */
        if ((h = hexval(b)) < 0 || (s->aux && h == 0)) return -1;
        s->mode = JSON_PDA_STR;
        return 0;
    case JSON_PDA_U2D:
        if ((h = hexval(b)) < 0 || h >= 0xC) return -1; /* a lone low surrogate */
        s->mode = h < 8 ? JSON_PDA_U3 : JSON_PDA_H3;
        s->aux = 0;
        return 0;
    case JSON_PDA_H3:
    case JSON_PDA_H4:
        if (hexval(b) < 0) return -1;
        s->mode++;
        return 0;
    case JSON_PDA_LBS: s->mode = JSON_PDA_LU; return b == '\\' ? 0 : -1;
    case JSON_PDA_LU: s->mode = JSON_PDA_L1; return b == 'u' ? 0 : -1;
    case JSON_PDA_L1: s->mode = JSON_PDA_L2; return b == 'd' || b == 'D' ? 0 : -1;
    case JSON_PDA_L2:
        if (hexval(b) < 0xC) return -1;
        s->mode = JSON_PDA_U3, s->aux = 0;
        return 0;
    default: return -1;
    }
}

static inline int is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

/* A byte inside a number or a literal. A number ends at the first byte that cannot extend
 * it, which is then read as the byte after a value (a number is never the top level). */
static inline int in_number(json_pda *s, uint8_t b) {
    switch (s->mode) {
    case JSON_PDA_NEG:
        if (b == '0') s->mode = JSON_PDA_ZERO;
        else if (is_digit(b)) s->mode = JSON_PDA_INT, s->aux = 1;
        else return -1;
        return 0;
    case JSON_PDA_INT:
        if (is_digit(b)) return s->aux == JSON_PDA_MAX_INT_DIGITS ? -1 : (s->aux++, 0);
        /* fall through */
    case JSON_PDA_ZERO:
        if (b == '.') s->mode = JSON_PDA_FRAC0;
        else if (b == 'e' || b == 'E') s->mode = JSON_PDA_EXP0;
        else break;
        return 0;
    case JSON_PDA_FRAC0:
        if (!is_digit(b)) return -1;
        s->mode = JSON_PDA_FRAC;
        return 0;
    case JSON_PDA_FRAC:
        if (is_digit(b)) return 0;
        if (b != 'e' && b != 'E') break;
        s->mode = JSON_PDA_EXP0;
        return 0;
    case JSON_PDA_EXP0:
        if (b == '+' || b == '-') {
            s->mode = JSON_PDA_EXPS;
            return 0;
        }
        /* fall through */
    case JSON_PDA_EXPS:
        if (!is_digit(b)) return -1;
        s->mode = JSON_PDA_EXP, s->aux = 1;
        return 0;
    case JSON_PDA_EXP:
        if (is_digit(b)) return s->aux == JSON_PDA_MAX_EXP_DIGITS ? -1 : (s->aux++, 0);
        break;
    case JSON_PDA_LIT:
        if (b != (uint8_t)json_pda_lits[s->aux]) return -1;
        if (!json_pda_lits[++s->aux]) s->mode = JSON_PDA_AFTER;
        return 0;
    default: return -1;
    }
    s->mode = JSON_PDA_AFTER;
    return between(s, b);
}

/* Moves s past byte b: 0, or -1 when b does not fit (s is then left half-moved: callers
 * step a copy). */
static inline int json_pda_step(json_pda *s, uint8_t b) {
    if (s->mode <= JSON_PDA_LAST_STR) return in_string(s, b);
    if (s->mode < JSON_PDA_NEG) return between(s, b);
    if (s->mode < JSON_PDA_DONE) return in_number(s, b);
    return -1;
}

int json_pda_feed(json_pda *s, const uint8_t *b, size_t n) {
    json_pda t = *s;
    for (size_t i = 0; i < n; i++)
        if (json_pda_step(&t, b[i])) return -1;
    *s = t;
    return 0;
}

int json_pda_string_safe(const uint8_t *b, size_t n) {
    json_pda t = {.mode = JSON_PDA_STR};
    for (size_t i = 0; i < n; i++)
        if ((t.mode == JSON_PDA_STR && b[i] == '"') || in_string(&t, b[i])) return 0;
    return 1;
}

/* Preorder over the trie: a node whose byte is refused skips its whole subtree; a node
 * reached inside a string whose subtree is string-safe allows every token below it without
 * looking at them, which is what makes the common case (most of the vocabulary fits inside
 * a string) cheap. states[d] is the state after the first d bytes of the current path. */
int json_pda_mask_walk(const json_pda *s, const struct constrain_vocab *v, json_pda *states,
                       uint8_t *allow, int n) {
    const constrain_node *nodes = v->nodes;
    int count = 0;
    states[0] = *s;
    for (uint32_t i = 1; i < v->n_nodes;) {
        const constrain_node *nd = &nodes[i];
        json_pda t = states[nd->depth - 1];
        if (json_pda_step(&t, nd->byte)) {
            i = nd->end;
            continue;
        }
        int whole = (nd->safe & CONSTRAIN_NODE_JSTR) && t.mode == JSON_PDA_STR;
        if (!whole) states[nd->depth] = t;
        i = constrain_walk_accept(v, i, whole, allow, n, &count);
    }
    return count;
}
