/* schema_gbnf_object.c - objects and arrays for the JSON Schema compiler: properties in
 * their declared order, required and optional members, additionalProperties, prefixItems (or
 * the draft 4 items array), items and minItems / maxItems. Each object and array is one rule,
 * written after the subschemas of its members or elements, which it compiles through
 * sg_schema (schema_gbnf.c). Entering one counts in sg.containers: that is how a $ref that
 * comes back to itself before any object or array (a rule that can never end) is told apart
 * from recursion the grammar can end. */
#include <stdlib.h>
#include <string.h>

#include "server/schema_gbnf_internal.h"

typedef struct sg_prop {
    const char *key;
    const json_t *schema;
    int req;
    size_t off, end; /* its `"key" ws ":" ws value` in kvs */
} sg_prop;

/* The member list from prop i on (T_i): each declared member, optional ones in ( )?, then
 * any number of extra members; one rule per position so the grammar stays linear. */
static int sg_tails(sg *c, const sg_prop *p, int n, const strbuf *kvs, const char *akv, int *t) {
    strbuf body = {0}, name = {0};
    int rc = 0;
    t[n] = 0;
    for (int j = n; j >= (n ? 1 : 0) && !rc; j--) {
        strbuf_reset(&body);
        strbuf_reset(&name);
        if (j == n && !akv) continue;
        if (j == n)
            sg_put(c, &body, "( "), sg_prim(c, &body, P_WS), sg_put(c, &body, " \",\" "),
                sg_prim(c, &body, P_WS), sg_putf(c, &body, " %s )*", akv);
        else {
            sg_put(c, &body, p[j].req ? "" : "( ");
            sg_prim(c, &body, P_WS);
            sg_put(c, &body, " \",\" ");
            sg_prim(c, &body, P_WS);
            sg_put(c, &body, " ");
            if (strbuf_add(&body, kvs->p + p[j].off, p[j].end - p[j].off)) c->oom = 1;
            sg_put(c, &body, p[j].req ? "" : " )?");
            if (t[j + 1]) sg_putf(c, &body, " %s-%d", c->name, t[j + 1]);
        }
        rc = sg_rule(c, &name, &body);
        t[j] = c->n_aux;
    }
    strbuf_free(&body);
    strbuf_free(&name);
    return rc;
}

/* Compiles every property's value; unmatchable optional ones are dropped (*n shrinks), an
 * unmatchable required one makes the object unmatchable (returns 0). */
static int sg_members(sg *c, sg_prop *p, int *n, strbuf *kvs) {
    int m = 0;
    for (int j = 0; j < *n; j++) {
        size_t at = sg_push(c, p[j].req < 0 ? "required" : "properties");
        sg_push(c, p[j].key);
        size_t off = kvs->len;
        sg_put_jstr(c, kvs, p[j].key, strlen(p[j].key));
        strbuf lit = {0};
        sg_put_lit(c, &lit, kvs->p + off, kvs->len - off);
        kvs->len = off;
        sg_put(c, kvs, lit.p ? lit.p : "");
        strbuf_free(&lit);
        sg_put(c, kvs, " ");
        sg_prim(c, kvs, P_WS);
        sg_put(c, kvs, " \":\" ");
        sg_prim(c, kvs, P_WS);
        sg_put(c, kvs, " ");
        int rc = sg_schema(c, p[j].schema, kvs);
        sg_pop(c, at);
        if (rc < 0) return rc;
        if (!rc && p[j].req) return 0;
        if (!rc) {
            kvs->len = off;
            continue;
        }
        p[m] = p[j];
        p[m].req = p[j].req != 0;
        p[m].off = off, p[m].end = kvs->len, m++;
    }
    *n = m;
    return c->oom ? sg_nomem(c) : 1;
}

/* Collects the declared properties in order, then required names properties lacks. */
static int sg_props(sg *c, const json_t *s, const json_t *extra, sg_prop **out, int *n) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    if (props && !json_is_object(props))
        return sg_fail(c, STRATA_EINVALID, "\"properties\" must be an object");
    if (req && !json_is_array(req))
        return sg_fail(c, STRATA_EINVALID, "\"required\" must be an array of strings");
    size_t cap = json_object_size(props) + json_array_size(req);
    sg_prop *p = calloc(cap ? cap : 1, sizeof *p);
    if (!p) return sg_nomem(c);
    int k = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)props, key, v) p[k++] = (sg_prop){.key = key, .schema = v};
    int declared = k;
    for (size_t i = 0; i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            free(p);
            return sg_fail(c, STRATA_EINVALID, "\"required\" must be an array of strings");
        }
        int j = 0;
        while (j < k && strcmp(p[j].key, json_string_value(r))) j++;
        if (j == k) p[k++] = (sg_prop){.key = json_string_value(r), .schema = extra, .req = -1};
        else if (j < declared) p[j].req = 1;
    }
    *out = p;
    *n = k;
    return 0;
}

static int sg_object_body(sg *c, const sg_prop *p, int n, const strbuf *kvs, const char *akv,
                          strbuf *term) {
    int *t = malloc(((size_t)n + 1) * sizeof *t);
    strbuf body = {0};
    if (!t) return sg_nomem(c);
    int rc = sg_tails(c, p, n, kvs, akv, t);
    int r = 0; /* the first required member: no member before it can start the list */
    while (r < n && !p[r].req) r++;
    for (int j = 0; !rc && j <= r && j < n; j++) {
        sg_put(c, &body, j ? " | " : "");
        if (strbuf_add(&body, kvs->p + p[j].off, p[j].end - p[j].off)) c->oom = 1;
        if (t[j + 1]) sg_putf(c, &body, " %s-%d", c->name, t[j + 1]);
    }
    if (!rc && r == n && akv) {
        sg_put(c, &body, n ? " | " : "");
        sg_putf(c, &body, "%s %s-%d", akv, c->name, t[n]);
    }
    if (!rc) {
        strbuf obj = {0};
        sg_put(c, &obj, "\"{\" ");
        sg_prim(c, &obj, P_WS);
        if (body.len) {
            sg_put(c, &obj, r < n ? " ( " : " ( ( ");
            sg_put(c, &obj, body.p);
            sg_put(c, &obj, " ) ");
            sg_prim(c, &obj, P_WS);
            sg_put(c, &obj, r < n ? "" : " )?");
        }
        sg_put(c, &obj, " \"}\"");
        rc = sg_rule(c, term, &obj);
        strbuf_free(&obj);
    }
    strbuf_free(&body);
    free(t);
    return rc ? rc : 1;
}

int sg_object(sg *c, const json_t *s, strbuf *term) {
    const json_t *ap = json_object_get(s, "additionalProperties");
    if (!ap && !json_object_get(s, "properties") && !json_object_get(s, "required"))
        ap = json_true(); /* a free-form object (json_true is a static singleton) */
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return sg_fail(c, STRATA_EINVALID, "\"additionalProperties\" must be a schema");
    const json_t *extra = ap && !json_is_false(ap) ? ap : json_true();
    sg_prop *p = NULL;
    strbuf kvs = {0}, akv = {0};
    int n = 0, rc = sg_props(c, s, extra, &p, &n);
    if (rc) return rc;
    c->containers++;
    rc = sg_members(c, p, &n, &kvs);
    if (rc > 0 && ap && !json_is_false(ap)) {
        size_t at = sg_push(c, "additionalProperties");
        sg_prim(c, &akv, P_STR);
        sg_put(c, &akv, " ");
        sg_prim(c, &akv, P_WS);
        sg_put(c, &akv, " \":\" ");
        sg_prim(c, &akv, P_WS);
        sg_put(c, &akv, " ");
        int x = sg_schema(c, ap, &akv);
        sg_pop(c, at);
        if (x < 0) rc = x;
        if (!x) strbuf_free(&akv);
    }
    c->containers--;
    if (rc > 0) rc = sg_object_body(c, p, n, &kvs, akv.len ? akv.p : NULL, term);
    strbuf_free(&kvs);
    strbuf_free(&akv);
    free(p);
    return rc;
}

/* The array's elements: prefix terms in pre (offsets off[0..np]), then items (NULL: none). */
static int sg_array_body(sg *c, const strbuf *pre, const size_t *off, int np, const char *item,
                         long long lo, long long hi, strbuf *term) {
    strbuf el = {0}, b = {0}, sep = {0};
    sg_prim(c, &sep, P_WS);
    sg_put(c, &sep, " \",\" ");
    sg_prim(c, &sep, P_WS);
    sg_put(c, &sep, " ");
    int open = 0;
    for (int i = 0; i < np; i++) {
        if (i >= lo && i > 0) sg_put(c, &el, "( "), open++;
        if (i) sg_put(c, &el, sep.p);
        if (strbuf_add(&el, pre->p + off[i], off[i + 1] - off[i])) c->oom = 1;
        sg_put(c, &el, " ");
    }
    if (item && (hi < 0 || hi > np)) {
        long long kmin = lo > np ? lo - np : 0, kmax = hi < 0 ? -1 : hi - np;
        if (np == 0) {
            sg_putf(c, &el, "%s ", item);
            kmin = kmin > 0 ? kmin - 1 : 0;
            kmax = kmax < 0 ? -1 : kmax - 1;
        }
        if (kmax != 0) {
            sg_putf(c, &el, "( %s%s )", sep.p, item);
            sg_put_rep(c, &el, (long)kmin, (long)kmax);
        }
    }
    while (open--) sg_put(c, &el, ")? ");
    sg_put(c, &b, "\"[\" ");
    sg_prim(c, &b, P_WS);
    if (el.len) {
        sg_put(c, &b, lo == 0 ? " ( " : " ");
        sg_put(c, &b, el.p);
        sg_put(c, &b, " ");
        sg_prim(c, &b, P_WS);
        sg_put(c, &b, lo == 0 ? " )?" : "");
    }
    sg_put(c, &b, " \"]\"");
    int rc = sg_rule(c, term, &b);
    strbuf_free(&el);
    strbuf_free(&b);
    strbuf_free(&sep);
    return rc ? rc : 1;
}

int sg_array(sg *c, const json_t *s, strbuf *term) {
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const char *prefix_key = "prefixItems", *items_key = "items";
    if (json_is_array(items)) { /* draft 4 tuples */
        if (prefix) return sg_fail(c, STRATA_EINVALID, "both prefixItems and an items array");
        prefix = items, prefix_key = "items";
        items = json_object_get(s, "additionalItems"), items_key = "additionalItems";
    }
    if (prefix && !json_is_array(prefix))
        return sg_fail(c, STRATA_EINVALID, "\"%s\" must be an array of schemas", prefix_key);
    long long lo, hi;
    int rc;
    if ((rc = sg_count(c, s, "minItems", 0, &lo)) || (rc = sg_count(c, s, "maxItems", -1, &hi)))
        return rc;
    if (lo > SG_MAX_ITEMS || hi > SG_MAX_ITEMS)
        return sg_fail(c, STRATA_EUNSUPPORTED, "minItems/maxItems above %d", SG_MAX_ITEMS);
    size_t np = json_array_size(prefix);
    if (np > SG_MAX_ITEMS)
        return sg_fail(c, STRATA_EUNSUPPORTED, "more than %d prefixItems", SG_MAX_ITEMS);
    size_t off[SG_MAX_ITEMS + 2];
    strbuf pre = {0}, item = {0};
    int n = 0, has_item = 0;
    c->containers++;
    for (rc = 1; rc > 0 && (size_t)n < np && (hi < 0 || n < hi); n++) {
        size_t at = sg_push_i(c, prefix_key, (size_t)n);
        off[n] = pre.len;
        rc = sg_schema(c, json_array_get(prefix, (size_t)n), &pre);
        sg_pop(c, at);
    }
    if (rc == 0) n--; /* an unmatchable element ends the array before it */
    off[n] = pre.len;
    if (rc > 0 && (size_t)n == np && (hi < 0 || hi > n)) {
        size_t at = sg_push(c, items_key);
        rc = sg_schema(c, items ? items : json_true(), &item);
        sg_pop(c, at);
        has_item = rc > 0;
        if (rc == 0) rc = 1;
    }
    c->containers--;
    if (rc >= 0) {
        long long most = has_item ? hi : n;
        rc = lo > n && !has_item ? 0 : (hi >= 0 && lo > hi) || (most >= 0 && lo > most) ? 0 : 1;
        if (rc) rc = sg_array_body(c, &pre, off, n, has_item ? item.p : NULL, lo, hi, term);
    }
    strbuf_free(&pre);
    strbuf_free(&item);
    return rc;
}
