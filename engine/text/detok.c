/* detok.c - streaming detokenizer (spec section 5): ids -> text increments that never
 * split a UTF-8 character and concatenate to exactly tok_decode(all ids), then stop
 * strings (held back while they may still match, never emitted) and the reasoning split.
 *
 * Three decoding modes, chosen from the tokenizer's decoder chain at create:
 *  BYTES   ByteLevel decoders: token bytes accumulate; every complete character is
 *          emitted at once and an invalid byte becomes U+FFFD as soon as it is known
 *          to be invalid (Rust from_utf8_lossy is left-to-right and prefix-stable).
 *  PIECES  per-token Replace/Strip/Metaspace steps, optionally ByteFallback and Fuse
 *          (Gemma): a run of <0xHH> tokens is held whole until it ends, because HF turns
 *          every byte of an invalid run into U+FFFD.
 *  WINDOW  anything else (and tokenizer.model / clean-up): like HF's DecodeStream,
 *          the text the new ids add to the decode of a window of recent ids, whose
 *          start is chosen so that decoders treating their input's start specially
 *          stay exact (see window_step).
 * Thread: one owner. */
#include "engine/text/detok.h"

#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_internal.h"
#include "engine/base/utf8.h"

enum { MODE_BYTES, MODE_PIECES, MODE_WINDOW };

#define DETOK_MAX_PRE 16

struct detok {
    const tokenizer *t;
    int mode, skip_special, join_space, fallback;
    const tok_step *pre[DETOK_MAX_PRE]; /* per-token decoder steps, in order */
    int n_pre;
    size_t n_kept; /* tokens decoded so far (after skipping) */
    strbuf pend;   /* BYTES: bytes of an incomplete character */
    strbuf run;    /* PIECES: the current run of fallback bytes */
    strbuf tmp, tmp2;
    tok_ids ids;       /* WINDOW: the ids of the window */
    tok_decode_ws dws; /* WINDOW: decodes of the window, buffers kept */
    strbuf prev;       /* WINDOW: the text of ids[0..read) when prev_ok */
    int prev_ok;
    size_t read; /* WINDOW: ids[0..read) already emitted */
    OnigRegion *rg;
    char **stop; /* stop strings */
    size_t *stop_len;
    int n_stop, stopped;
    strbuf held; /* decoded text not yet cleared by the stop check */
    int split, in_reasoning;
    char *tag[2]; /* open, close */
    size_t tag_len[2];
    int32_t tag_id[2]; /* special added token spelling a tag, -1 */
    strbuf rheld;      /* text that may be the start of a tag */
    strbuf step;       /* the text one push or finish decoded, before the stages */
    strbuf out_text, out_reason;
};

static int flatten(const tok_step *s, const tok_step **list, int *n) {
    if (s->type != TOK_STEP_SEQUENCE) {
        if (*n >= 64) return -1;
        list[(*n)++] = s;
        return 0;
    }
    for (int i = 0; i < s->n_sub; i++)
        if (flatten(&s->sub[i], list, n)) return -1;
    return 0;
}

static void classify(detok *d) {
    const tokenizer *t = d->t;
    d->mode = MODE_WINDOW;
    if (t->sp || t->cleanup) return;
    if (!t->dec.type) {
        d->mode = MODE_PIECES;
        d->join_space = 1; /* HF joins token strings with spaces when there is no decoder */
        return;
    }
    const tok_step *l[64];
    int n = 0, i = 0;
    if (flatten(&t->dec, l, &n)) return;
    while (i < n && (l[i]->type == TOK_STEP_REPLACE || l[i]->type == TOK_STEP_STRIP ||
                     l[i]->type == TOK_STEP_METASPACE)) {
        if (d->n_pre == DETOK_MAX_PRE) return;
        d->pre[d->n_pre++] = l[i++];
    }
    int mode = MODE_PIECES;
    if (i < n && l[i]->type == TOK_STEP_BYTELEVEL) mode = MODE_BYTES, i++;
    else if (i < n && l[i]->type == TOK_STEP_BYTEFALLBACK) d->fallback = 1, i++;
    while (i < n && l[i]->type == TOK_STEP_FUSE) i++;
    if (i == n) d->mode = mode;
}

static int copy_str(const char *s, char **out, size_t *len, strata_err *err) {
    size_t n = strlen(s);
    if (!n || !unicode_utf8_valid(s, n))
        return strata_err_set(err, STRATA_EINVALID,
                              "stop strings and reasoning delimiters must be "
                              "non-empty valid UTF-8");
    /* malloc, not strdup: ASan's strdup allocates past the failure hook of
     * tests/unit/test_tokenizer_alloc.c */
    if (!(*out = malloc(n + 1))) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    memcpy(*out, s, n + 1);
    *len = n;
    return 0;
}

int detok_create(detok **out, const tokenizer *t, const detok_opts *o, strata_err *err) {
    detok *d = calloc(1, sizeof *d);
    int r = 0;
    if (!d) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    d->t = t;
    d->skip_special = o && o->skip_special;
    d->tag_id[0] = d->tag_id[1] = -1;
    classify(d);
    if (!(d->rg = tok_region_new())) {
        r = strata_err_set(err, STRATA_ENOMEM, "out of memory");
        goto fail;
    }
    if (o && o->n_stop > 0) {
        d->stop = calloc((size_t)o->n_stop, sizeof *d->stop);
        d->stop_len = calloc((size_t)o->n_stop, sizeof *d->stop_len);
        if (!d->stop || !d->stop_len) {
            r = strata_err_set(err, STRATA_ENOMEM, "out of memory");
            goto fail;
        }
        for (int i = 0; i < o->n_stop; i++, d->n_stop++)
            if ((r = copy_str(o->stop[i] ? o->stop[i] : "", &d->stop[i], &d->stop_len[i], err)))
                goto fail;
    }
    if (o && o->split_reasoning) {
        d->split = 1;
        d->in_reasoning = o->start_in_reasoning;
        const char *tags[2] = {o->reasoning_open ? o->reasoning_open : "<think>",
                               o->reasoning_close ? o->reasoning_close : "</think>"};
        for (int i = 0; i < 2; i++) {
            if ((r = copy_str(tags[i], &d->tag[i], &d->tag_len[i], err))) goto fail;
            int32_t id = tok_piece_to_id(t, tags[i]);
            if (id >= 0 && tok_is_special(t, id)) d->tag_id[i] = id;
        }
    }
    *out = d;
    return 0;
fail:
    detok_free(d);
    return r;
}

void detok_free(detok *d) {
    if (!d) return;
    for (int i = 0; i < d->n_stop; i++) free(d->stop[i]);
    free(d->stop);
    free(d->stop_len);
    free(d->tag[0]);
    free(d->tag[1]);
    if (d->rg) onig_region_free(d->rg, 1);
    strbuf_free(&d->pend);
    strbuf_free(&d->run);
    strbuf_free(&d->tmp);
    strbuf_free(&d->tmp2);
    tok_ids_free(&d->ids);
    tok_decode_ws_free(&d->dws);
    strbuf_free(&d->prev);
    strbuf_free(&d->held);
    strbuf_free(&d->rheld);
    strbuf_free(&d->step);
    strbuf_free(&d->out_text);
    strbuf_free(&d->out_reason);
    free(d);
}

/* ---- decoding: ids -> valid UTF-8 increments ------------------------------------------ */

/* BYTES: moves every decidable prefix of pend to out; at the end, an incomplete tail is
 * one maximal subpart, hence one U+FFFD. */
static int drain_bytes(detok *d, strbuf *out, int final) {
    size_t used;
    int r = unicode_utf8_lossy_part(out, d->pend.p ? d->pend.p : "", d->pend.len, final, &used);
    if (!r && used) {
        memmove(d->pend.p, d->pend.p + used, d->pend.len - used);
        d->pend.len -= used;
    }
    return r;
}

static int flush_run(detok *d, strbuf *out) {
    int r = 0;
    if (!d->run.len) return 0;
    if (unicode_utf8_valid(d->run.p, d->run.len)) r = strbuf_add(out, d->run.p, d->run.len);
    else
        for (size_t i = 0; i < d->run.len && !r; i++) r = strbuf_add(out, "\xEF\xBF\xBD", 3);
    d->run.len = 0;
    return r;
}

/* Decodes ids[a..b) of the window into *out, through d's reusable decode workspace. */
static int window_decode(detok *d, size_t a, size_t b, strbuf *out, strata_err *err) {
    int r = tok_decode_into(d->t, d->ids.p + a, b - a, d->skip_special, &d->dws, err);
    if (r) return r;
    out->len = 0;
    return strbuf_add(out, d->dws.out.p, d->dws.out.len);
}

/* WINDOW: emits what the newest ids add to the text of ids[0..read).
 *
 * Decoders may treat the start of their input specially (Strip after Fuse, clean-up,
 * sentencepiece's leading space), so a window may only start where that cannot matter:
 * where the window's own text begins with a non-space byte and equals the tail of the
 * text so far (a run of spaces at a window start was lost otherwise; fuzz_tokenizer).
 * Such a start is looked for once the window is long, so a step costs a bounded decode. */
enum { WINDOW_TRIM = 64, WINDOW_KEEP = 8 };
/* dst = src; copied, not swapped, so that each buffer grows to its own high-water mark. */
static int buf_copy(strbuf *dst, const strbuf *src) {
    dst->len = 0;
    return strbuf_add(dst, src->p, src->len);
}

static int window_step(detok *d, strbuf *out, int final, strata_err *err) {
    if (d->read >= d->ids.len) return 0;
    /* A <0xHH> run may still turn invalid (then every byte becomes U+FFFD): never end a
     * window inside one, so no run straddles a window start either. */
    size_t n;
    const char *last = tok_token_str(d->t, d->ids.p[d->ids.len - 1], &n);
    if (!final && last && tok_byte_token(last, n) >= 0) return 0;
    /* The text of ids[0..read) is kept from the step that set read (a decode is a pure
     * function of its ids), so a step decodes the window once, not twice. */
    int r = 0;
    if (!d->prev_ok && !(r = window_decode(d, 0, d->read, &d->prev, err))) d->prev_ok = 1;
    if (!r) r = window_decode(d, 0, d->ids.len, &d->tmp2, err);
    if (r) return r;
    const strbuf *a = &d->prev, *b = &d->tmp2;
    int ends_bad = b->len >= 3 && !memcmp(b->p + b->len - 3, "\xEF\xBF\xBD", 3);
    if (!(b->len > a->len && !memcmp(a->p, b->p, a->len) && (final || !ends_bad))) return 0;
    if ((r = strbuf_add(out, b->p + a->len, b->len - a->len))) return r;
    d->read = d->ids.len;
    d->prev_ok = 0; /* prev: the text of the new ids[0..read) */
    if ((r = buf_copy(&d->prev, b))) return r;
    d->prev_ok = 1;
    if (d->read <= WINDOW_TRIM) return 0;
    size_t start = d->read - WINDOW_KEEP;
    if ((r = window_decode(d, start, d->read, &d->tmp, err))) return r;
    const strbuf *c = &d->tmp;
    if (c->len && c->len <= b->len && c->p[0] != ' ' && c->p[0] != '\t' && c->p[0] != '\n' &&
        !memcmp(b->p + b->len - c->len, c->p, c->len)) {
        memmove(d->ids.p, d->ids.p + start, (d->ids.len - start) * sizeof *d->ids.p);
        d->ids.len -= start;
        d->read -= start;
        d->prev_ok = 0; /* the window's text is now c */
        if ((r = buf_copy(&d->prev, c))) return r;
        d->prev_ok = 1;
    }
    return 0;
}

static int decode_id(detok *d, int32_t id, strbuf *out, strata_err *err) {
    if (d->mode == MODE_WINDOW) {
        if (tok_ids_push(&d->ids, id)) return STRATA_ENOMEM;
        return window_step(d, out, 0, err);
    }
    size_t n;
    const char *s = tok_token_str(d->t, id, &n);
    int r = 0;
    for (int i = 0; i < d->n_pre && !r; i++) {
        strbuf *dst = s == d->tmp.p ? &d->tmp2 : &d->tmp;
        dst->len = 0;
        if (!(r = tok_decode_token_step(d->pre[i], s, n, d->n_kept, dst, d->rg, err))) {
            if (!dst->p && (r = strbuf_add(dst, "", 0))) break;
            s = dst->p;
            n = dst->len;
        }
    }
    if (r) return r;
    if (d->mode == MODE_BYTES) {
        d->n_kept++;
        if ((r = tok_bytelevel_token(&d->pend, s, n))) return r;
        return drain_bytes(d, out, 0);
    }
    int b = d->fallback ? tok_byte_token(s, n) : -1;
    if (b >= 0) {
        uint8_t c = (uint8_t)b;
        d->n_kept++;
        return strbuf_add(&d->run, &c, 1);
    }
    if ((r = flush_run(d, out))) return r;
    if (d->join_space && d->n_kept && (r = strbuf_add(out, " ", 1))) return r;
    d->n_kept++;
    return strbuf_add(out, s, n);
}

/* ---- text stages: stop strings, then the reasoning split ------------------------------ */

/* Length of the longest suffix of s[0..n) that is a proper prefix of p[0..pn). */
static size_t partial_suffix(const char *s, size_t n, const char *p, size_t pn) {
    for (size_t k = pn - 1 < n ? pn - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, p, k)) return k;
    return 0;
}

static int route(detok *d, const char *s, size_t n) {
    return strbuf_add(d->split && d->in_reasoning ? &d->out_reason : &d->out_text, s, n);
}

static int reasoning_stage(detok *d, const char *s, size_t n, int final) {
    if (!d->split) return route(d, s, n);
    if (strbuf_add(&d->rheld, s, n)) return STRATA_ENOMEM;
    for (;;) {
        int which = d->in_reasoning;
        const char *tag = d->tag[which];
        size_t tl = d->tag_len[which], len = d->rheld.len;
        const char *hit = len >= tl ? memmem(d->rheld.p, len, tag, tl) : NULL;
        size_t emit = hit ? (size_t)(hit - d->rheld.p)
                          : len - (final ? 0 : partial_suffix(d->rheld.p, len, tag, tl));
        if (emit && route(d, d->rheld.p, emit)) return STRATA_ENOMEM;
        size_t drop = emit + (hit ? tl : 0);
        if (drop) memmove(d->rheld.p, d->rheld.p + drop, len - drop);
        d->rheld.len = len - drop;
        if (!hit) return 0;
        d->in_reasoning = !d->in_reasoning;
    }
}

static int stop_stage(detok *d, const char *s, size_t n, int final) {
    if (!d->n_stop) return reasoning_stage(d, s, n, final);
    if (strbuf_add(&d->held, s, n)) return STRATA_ENOMEM;
    size_t len = d->held.len, first = len + 1;
    for (int i = 0; i < d->n_stop; i++) {
        const char *hit =
            len >= d->stop_len[i] ? memmem(d->held.p, len, d->stop[i], d->stop_len[i]) : NULL;
        if (hit && (size_t)(hit - d->held.p) < first) first = (size_t)(hit - d->held.p);
    }
    if (first <= len) {
        d->stopped = 1;
        int r = reasoning_stage(d, d->held.p ? d->held.p : "", first, 1);
        d->held.len = 0;
        return r;
    }
    size_t keep = 0;
    for (int i = 0; i < d->n_stop && !final; i++) {
        size_t k = partial_suffix(d->held.p, len, d->stop[i], d->stop_len[i]);
        if (k > keep) keep = k;
    }
    int r = reasoning_stage(d, d->held.p ? d->held.p : "", len - keep, final);
    if (len > keep) memmove(d->held.p, d->held.p + len - keep, keep);
    d->held.len = keep;
    return r;
}

/* Every buffer a push touches lives in d and keeps its capacity, so once they have grown
 * to the longest token, window and stop string a push allocates nothing (WINDOW mode
 * decodes its window into d->dws; over tokenizer.model, libsentencepiece's Decode still
 * allocates inside itself, see engine/text/spm.h). */
static void out_begin(detok *d) {
    d->out_text.len = d->out_reason.len = 0;
    d->tmp.len = d->step.len = 0;
}

static int out_end(detok *d, detok_out *out, int r, strata_err *err) {
    /* the slices are never NULL: give the buffers storage on first use */
    if (!r && ((!d->out_text.p && strbuf_add(&d->out_text, "", 0)) ||
               (!d->out_reason.p && strbuf_add(&d->out_reason, "", 0))))
        r = strata_err_set(err, STRATA_ENOMEM, "detok: out of memory");
    if (out) {
        out->text = d->out_text.p;
        out->text_len = r ? 0 : d->out_text.len;
        out->reasoning = d->out_reason.p;
        out->reasoning_len = r ? 0 : d->out_reason.len;
        out->stopped = d->stopped;
    }
    return r;
}

int detok_push(detok *d, int32_t id, detok_out *out, strata_err *err) {
    out_begin(d);
    if (d->stopped) return out_end(d, out, 0, err);
    size_t n;
    if (id < 0 || id >= tok_vocab_size(d->t) || (!d->t->sp && !tok_token_str(d->t, id, &n)))
        return out_end(
            d, out, strata_err_set(err, STRATA_ERANGE, "token id %d is not in the vocabulary", id),
            err);
    int keep =
        !d->skip_special || !tok_is_special(d->t, id) || id == d->tag_id[0] || id == d->tag_id[1];
    int r = keep ? decode_id(d, id, &d->step, err) : 0;
    if (!r && d->step.len) r = stop_stage(d, d->step.p, d->step.len, 0);
    if (r == STRATA_ENOMEM) strata_err_set(err, r, "detok: out of memory");
    return out_end(d, out, r, err);
}

int detok_finish(detok *d, detok_out *out, strata_err *err) {
    out_begin(d);
    if (d->stopped) return out_end(d, out, 0, err);
    strbuf *text = &d->step;
    int r = 0;
    if (d->mode == MODE_WINDOW) r = window_step(d, text, 1, err);
    else if (d->mode == MODE_BYTES) r = drain_bytes(d, text, 1);
    else r = flush_run(d, text);
    if (!r) r = stop_stage(d, text->p ? text->p : "", text->len, 1);
    if (r == STRATA_ENOMEM) strata_err_set(err, r, "detok: out of memory");
    return out_end(d, out, r, err);
}
