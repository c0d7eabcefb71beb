/* chat_template.c - loading a checkpoint's chat template and rendering it the way
 * transformers' apply_chat_template does (see chat_template.h).
 *
 * This file is the door to the Jinja interpreter (engine/jinja_*.c): it finds the
 * template and the special token strings on disk, converts the request's JSON
 * into template values with transformers' message preparation, sets up the
 * environment's variables and limits, and copies the rendered text out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/template/chat_template.h"
#include "engine/template/jinja_internal.h"

/* The special tokens transformers puts in the template's variables (special_tokens_map). */
static const char *const special_names[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                            "pad_token", "cls_token", "mask_token"};
#define NSPECIAL (sizeof special_names / sizeof special_names[0])

struct chat_template {
    jarena *arena;    /* the AST, source copies and strings below */
    jnodes body;      /* the default template */
    jnodes tool_body; /* the "tool_use" template of a named list; n == 0: none */
    int has_tool_body;
    const char *src, *tool_src; /* the sources of body and tool_body (arena copies) */
    const char *special[NSPECIAL];
    chat_template_limits lim;
};

void chat_template_limits_default(chat_template_limits *lim) {
    lim->max_output = 16u << 20;
    lim->max_memory = 256u << 20;
    lim->max_iterations = 1000000;
    lim->max_depth = 200;
    lim->fail_alloc_at = 0;
}

void chat_template_free(chat_template *ct) {
    if (!ct) return;
    jinja_arena_destroy(ct->arena);
}

void chat_template_set_limits(chat_template *ct, const chat_template_limits *lim) {
    ct->lim = *lim;
}

const char *chat_template_bos(const chat_template *ct) { return ct->special[0]; }

const char *chat_template_eos(const chat_template *ct) { return ct->special[1]; }

const char *chat_template_source(const chat_template *ct) {
    return ct->tool_src ? ct->tool_src : ct->src;
}

static int parse_into(chat_template *ct, jnodes *body, const char *src, size_t len,
                      strata_err *err) {
    if (jinja_utf8_valid_prefix(src, len) != len)
        return strata_err_set(err, STRATA_EFORMAT, "chat template is not valid UTF-8 (byte %zu)",
                              jinja_utf8_valid_prefix(src, len));
    int rc = jinja_parse_template(body, ct->arena, src, len, ct->lim.max_depth, err);
    if (rc == STRATA_ENOMEM && jinja_arena_over_budget(ct->arena))
        return strata_err_set(err, STRATA_ERANGE, "chat template too large to parse");
    if (rc) return rc;
    const char *copy = jinja_arena_strndup(ct->arena, src, len);
    if (!copy) return strata_err_set(err, STRATA_ENOMEM, "out of memory loading the chat template");
    if (body == &ct->tool_body) ct->tool_src = copy;
    else ct->src = copy;
    return 0;
}

static int ct_new(chat_template **out, const chat_template_limits *lim, strata_err *err) {
    chat_template_limits l;
    if (!lim) chat_template_limits_default(&l);
    else l = *lim;
    jarena *a = jinja_arena_create(l.max_memory, l.fail_alloc_at);
    chat_template *ct = a ? jinja_arena_alloc(a, sizeof *ct) : NULL;
    if (!ct) {
        jinja_arena_destroy(a);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory loading the chat template");
    }
    memset(ct, 0, sizeof *ct);
    ct->arena = a;
    ct->lim = l;
    *out = ct;
    return 0;
}

static int set_special(chat_template *ct, size_t i, const char *s, strata_err *err) {
    if (!s) return 0;
    ct->special[i] = jinja_arena_strndup(ct->arena, s, strlen(s));
    if (!ct->special[i])
        return strata_err_set(err, STRATA_ENOMEM, "out of memory loading the chat template");
    return 0;
}

int chat_template_parse_ex(chat_template **out, const char *source, size_t len, const char *bos,
                           const char *eos, const chat_template_limits *lim, strata_err *err) {
    strata_err scratch; /* the parser reads back its own errors */
    if (!err) err = &scratch;
    chat_template *ct = NULL;
    int rc = ct_new(&ct, lim, err);
    if (rc < 0) return rc;
    if ((rc = set_special(ct, 0, bos, err)) < 0 || (rc = set_special(ct, 1, eos, err)) < 0 ||
        (rc = parse_into(ct, &ct->body, source, len, err)) < 0)
        goto fail;
    *out = ct;
    return 0;
fail:
    chat_template_free(ct);
    return rc;
}

int chat_template_parse(chat_template **out, const char *source, const char *bos_token,
                        const char *eos_token, strata_err *err) {
    return chat_template_parse_ex(out, source, strlen(source), bos_token, eos_token, NULL, err);
}

/* ---- loading from a checkpoint directory ----------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* A token given as a string or as an AddedToken dict {"content": ...}. */
static const char *token_text(json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

int chat_template_load(chat_template **out, const char *dir, strata_err *err) {
    strata_err scratch;
    if (!err) err = &scratch;
    char path[4096];
    char *jinja = NULL;
    size_t jinja_len = 0;
    json_t *cfg = NULL, *tjson = NULL;
    chat_template *ct = NULL;
    json_error_t jerr;
    int rc;

    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    jinja = read_file(path, &jinja_len);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *probe = fopen(path, "rb");
    if (probe) {
        fclose(probe);
        cfg = json_load_file(path, JSON_ALLOW_NUL, &jerr);
        if (!cfg || !json_is_object(cfg)) {
            rc = strata_err_set(err, STRATA_EFORMAT, "%s: %s (line %d)", path,
                                cfg ? "not a JSON object" : jerr.text, jerr.line);
            goto fail;
        }
    }
    if ((rc = ct_new(&ct, NULL, err)) < 0) goto fail;
    for (size_t i = 0; cfg && i < NSPECIAL; i++)
        if ((rc = set_special(ct, i, token_text(json_object_get(cfg, special_names[i])), err)) < 0)
            goto fail;

    json_t *tmpl = cfg ? json_object_get(cfg, "chat_template") : NULL;
    if (jinja) {
        rc = parse_into(ct, &ct->body, jinja, jinja_len, err);
        if (rc < 0) {
            strata_err_wrap(err, "%s/chat_template.jinja: ", dir);
            goto fail;
        }
        tmpl = NULL;
    }
    if (!tmpl && !jinja) { /* processor-style chat_template.json */
        snprintf(path, sizeof path, "%s/chat_template.json", dir);
        if ((probe = fopen(path, "rb"))) {
            fclose(probe);
            tjson = json_load_file(path, 0, &jerr);
            tmpl = tjson ? json_object_get(tjson, "chat_template") : NULL;
        }
    }
    if (jinja) {
        rc = 0;
    } else if (json_is_string(tmpl)) {
        rc = parse_into(ct, &ct->body, json_string_value(tmpl), json_string_length(tmpl), err);
    } else if (json_is_array(tmpl)) {
        size_t i;
        json_t *item;
        int found = 0;
        rc = 0;
        json_array_foreach(tmpl, i, item) {
            const char *name = json_string_value(json_object_get(item, "name"));
            json_t *src = json_object_get(item, "template");
            if (!name || !json_is_string(src)) continue;
            if (!strcmp(name, "default")) {
                rc =
                    parse_into(ct, &ct->body, json_string_value(src), json_string_length(src), err);
                found = 1;
            } else if (!strcmp(name, "tool_use")) {
                rc = parse_into(ct, &ct->tool_body, json_string_value(src), json_string_length(src),
                                err);
                ct->has_tool_body = 1;
            }
            if (rc < 0) break;
        }
        if (rc == 0 && !found) {
            if (ct->has_tool_body) { /* only tool_use: transformers then needs tools to pick it */
                ct->body = ct->tool_body;
            } else {
                rc = strata_err_set(err, STRATA_ENOTFOUND,
                                    "%s: no \"default\" chat template in the list", dir);
            }
        }
    } else {
        rc = strata_err_set(err, STRATA_ENOTFOUND,
                            "%s: no chat template (chat_template.jinja or tokenizer_config.json)",
                            dir);
    }
    if (rc < 0) {
        if (rc == STRATA_EFORMAT) strata_err_wrap(err, "%s/tokenizer_config.json: ", dir);
        goto fail;
    }
    *out = ct;
    ct = NULL;
    rc = 0;
fail:
    chat_template_free(ct);
    json_decref(cfg);
    json_decref(tjson);
    free(jinja);
    return rc;
}

/* ---- rendering -------------------------------------------------------------------------- */

static int from_json(jctx *c, json_t *j, jv *out) {
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jinja_none(); return 0;
    case JSON_TRUE: *out = jinja_bool(1); return 0;
    case JSON_FALSE: *out = jinja_bool(0); return 0;
    case JSON_INTEGER: *out = jinja_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jinja_float(json_real_value(j)); return 0;
    case JSON_STRING: {
        const char *s = json_string_value(j);
        size_t n = json_string_length(j);
        if (jinja_utf8_valid_prefix(s, n) != n)
            return jinja_ctx_fail(c, STRATA_EINVALID, 0, "input text is not valid UTF-8");
        *out = jinja_str(c, s, n);
        return jinja_is_oom(*out) ? jinja_ctx_nomem(c, 0) : 0;
    }
    case JSON_ARRAY: {
        *out = jinja_list(c, json_array_size(j));
        if (jinja_is_oom(*out)) return jinja_ctx_nomem(c, 0);
        for (size_t i = 0; i < json_array_size(j); i++)
            JTRY(from_json(c, json_array_get(j, i), &out->u.l->v[out->u.l->n++]));
        return 0;
    }
    case JSON_OBJECT: {
        *out = jinja_dict(c, json_object_size(j));
        if (jinja_is_oom(*out)) return jinja_ctx_nomem(c, 0);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            jv key = jinja_strz(c, k), val;
            if (jinja_is_oom(key)) return jinja_ctx_nomem(c, 0);
            JTRY(from_json(c, v, &val));
            if (jinja_dict_set(c, out->u.d, key, val) < 0) return jinja_ctx_nomem(c, 0);
        }
        return 0;
    }
    }
    return jinja_ctx_fail(c, STRATA_EINVALID, 0, "unsupported JSON value");
}

/* transformers: drop None-valued keys, then alias the reasoning fields
 * ({"thinking": r, **message, "reasoning_content": r}). */
static int prepare_message(jctx *c, json_t *m, jv *out) {
    static const char *const reasoning_keys[] = {"reasoning_content", "thinking", "reasoning"};
    if (!json_is_object(m))
        return jinja_ctx_fail(c, STRATA_EINVALID, 0, "chat messages should be objects");
    json_t *reasoning = NULL;
    for (int i = 0; i < 3 && !reasoning; i++) {
        json_t *r = json_object_get(m, reasoning_keys[i]);
        if (r && !json_is_null(r)) reasoning = r;
    }
    jv d = jinja_dict(c, json_object_size(m) + 2), rv = jinja_none();
    if (jinja_is_oom(d)) return jinja_ctx_nomem(c, 0);
    if (reasoning) {
        JTRY(from_json(c, reasoning, &rv));
        jv key = jinja_strz(c, "thinking");
        if (jinja_is_oom(key) || jinja_dict_set(c, d.u.d, key, rv) < 0)
            return jinja_ctx_nomem(c, 0);
    }
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (json_is_null(v)) continue;
        jv key = jinja_strz(c, k), val;
        if (jinja_is_oom(key)) return jinja_ctx_nomem(c, 0);
        JTRY(from_json(c, v, &val));
        if (jinja_dict_set(c, d.u.d, key, val) < 0) return jinja_ctx_nomem(c, 0);
    }
    if (reasoning) {
        jv key = jinja_strz(c, "reasoning_content");
        if (jinja_is_oom(key) || jinja_dict_set(c, d.u.d, key, rv) < 0)
            return jinja_ctx_nomem(c, 0);
    }
    *out = d;
    return 0;
}

static int set_var(jctx *c, const char *name, jv v) {
    jv key = jinja_strz(c, name);
    if (jinja_is_oom(key) || jinja_dict_set(c, c->render_vars, key, v) < 0)
        return jinja_ctx_nomem(c, 0);
    return 0;
}

static int build_vars(jctx *c, const chat_template *ct, json_t *messages, json_t *tools,
                      int add_generation_prompt, json_t *kwargs) {
    if (!json_is_array(messages))
        return jinja_ctx_fail(c, STRATA_EINVALID, 0, "messages must be a JSON array");
    if (json_array_size(messages) == 0)
        return jinja_ctx_fail(c, STRATA_EINVALID, 0,
                              "Cannot apply chat template to an empty conversation.");
    jv msgs = jinja_list(c, json_array_size(messages)), v;
    if (jinja_is_oom(msgs)) return jinja_ctx_nomem(c, 0);
    for (size_t i = 0; i < json_array_size(messages); i++)
        JTRY(prepare_message(c, json_array_get(messages, i), &msgs.u.l->v[msgs.u.l->n++]));
    for (size_t i = 0; i < NSPECIAL; i++) {
        if (!ct->special[i]) continue;
        v = jinja_strz(c, ct->special[i]);
        if (jinja_is_oom(v)) return jinja_ctx_nomem(c, 0);
        JTRY(set_var(c, special_names[i], v));
    }
    if (kwargs && !json_is_null(kwargs)) {
        if (!json_is_object(kwargs))
            return jinja_ctx_fail(c, STRATA_EINVALID, 0, "template kwargs must be a JSON object");
        const char *k;
        json_t *kv;
        json_object_foreach(kwargs, k, kv) {
            if (!strcmp(k, "messages") || !strcmp(k, "tools") || !strcmp(k, "documents") ||
                !strcmp(k, "add_generation_prompt"))
                return jinja_ctx_fail(c, STRATA_EINVALID, 0,
                                      "template kwarg '%s' would replace a reserved variable", k);
            JTRY(from_json(c, kv, &v));
            JTRY(set_var(c, k, v));
        }
    }
    JTRY(set_var(c, "messages", msgs));
    if (tools && !json_is_null(tools)) JTRY(from_json(c, tools, &v));
    else v = jinja_none();
    JTRY(set_var(c, "tools", v));
    JTRY(set_var(c, "documents", jinja_none()));
    return set_var(c, "add_generation_prompt", jinja_bool(add_generation_prompt));
}

int chat_template_render(const chat_template *ct, json_t *messages, json_t *tools,
                         int add_generation_prompt, json_t *kwargs, char **out, strata_err *err) {
    strata_err scratch;
    if (!err) err = &scratch;
    const chat_template_limits *lim = &ct->lim;
    jarena *a = jinja_arena_create(lim->max_memory, lim->fail_alloc_at);
    if (!a) return strata_err_set(err, STRATA_ENOMEM, "out of memory rendering the chat template");
    jctx c = {0};
    strbuf buf;
    int rc;
    jdict *vars = jinja_arena_alloc(a, sizeof *vars);
    c.a = a;
    c.err = err;
    c.max_depth = lim->max_depth;
    c.max_iterations = lim->max_iterations;
    c.max_output = lim->max_output;
    c.now = (int64_t)time(NULL);
    c.filter_input = jinja_undef();
    jinja_buf_init(&buf, a, lim->max_output);
    c.out = &buf;
    if (!vars || !(c.root = jinja_scope_new(&c, NULL))) {
        rc = jinja_ctx_nomem(&c, 0);
        goto done;
    }
    memset(vars, 0, sizeof *vars);
    c.render_vars = vars;
    if ((rc = build_vars(&c, ct, messages, tools, add_generation_prompt, kwargs)) < 0) goto done;
    const jnodes *body =
        ct->has_tool_body && tools && !json_is_null(tools) ? &ct->tool_body : &ct->body;
    if ((rc = jinja_exec_body(&c, c.root, body)) < 0) goto done;
    char *s = malloc(buf.len + 1);
    if (!s) {
        rc = strata_err_set(err, STRATA_ENOMEM, "out of memory rendering the chat template");
        goto done;
    }
    if (buf.len) memcpy(s, buf.p, buf.len);
    s[buf.len] = 0;
    *out = s;
    rc = 0;
done:
    if (rc < 0 && !c.err_set) strata_err_set(err, rc, "chat template: %s", strata_err_name(rc));
    jinja_arena_destroy(a);
    return rc;
}
