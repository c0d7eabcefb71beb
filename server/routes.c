/* routes.c - the small routes: health, models, metrics, tokenize, detokenize,
 * openapi.json; and the chat template rendering they share with gen.c.
 * Thread: MHD threads. */
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

enum MHD_Result route_health(srv *S, struct MHD_Connection *c) {
    openai_error e;
    switch (atomic_load(&S->state)) {
    case SRV_READY: return http_respond_json(c, 200, json_pack("{s:s}", "status", "ok"));
    case SRV_LOADING:
        openai_error_set(&e, 503, "unavailable_error", NULL, NULL, "Loading model");
        break;
    case SRV_DRAINING:
        openai_error_set(&e, 503, "unavailable_error", NULL, NULL, "The server is shutting down");
        break;
    default:
        openai_error_set(&e, 503, "unavailable_error", NULL, NULL,
                         "The model failed to load: %.400s", S->load_error);
        break;
    }
    return http_respond_error(c, &e);
}

static json_t *route_model_card(const srv *S) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:i}", "id", S->model_name, "object", "model",
                     "created", (json_int_t)S->created, "owned_by", "strata", "root",
                     S->cfg->model ? S->cfg->model : S->model_name, "parent", "max_model_len",
                     S->ctx);
}

enum MHD_Result route_models(srv *S, struct MHD_Connection *c, const char *id) {
    if (!id)
        return http_respond_json(
            c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", route_model_card(S)));
    if (strcmp(id, S->model_name)) {
        openai_error e;
        openai_error_set(&e, 404, "not_found_error", "model", "model_not_found",
                         "The model '%.200s' does not exist", id);
        return http_respond_error(c, &e);
    }
    return http_respond_json(c, 200, route_model_card(S));
}

enum MHD_Result route_metrics(srv *S, struct MHD_Connection *c) {
    metrics_gauges g = {0};
    g.waiting = atomic_load(&S->n_waiting);
    g.ready = atomic_load(&S->state) == SRV_READY;
    g.preparing = atomic_load(&S->n_preparing);
    g.head_timeouts = atomic_load(&S->n_head_timeouts);
    pthread_mutex_lock(&S->guard_mu);
    g.connections = S->n_conns;
    pthread_mutex_unlock(&S->guard_mu);
    if (atomic_load(&S->state) != SRV_LOADING && S->eng) {
        engine_stats st;
        engine_get_stats(S->eng, &st);
        g.running = st.active;
        g.kv_usage = st.kv_blocks ? (double)st.kv_blocks_used / (double)st.kv_blocks : 0.0;
        g.kv_blocks = st.kv_blocks;
        g.kv_blocks_used = st.kv_blocks_used;
        g.kv_blocks_peak = st.kv_blocks_peak;
        g.kv_evictions = st.kv_evictions;
        g.prefix_queries = st.prefix_queries;
        g.prefix_hits = st.prefix_hits;
        g.prefix_query_tokens = st.prefix_query_tokens;
        g.prefix_hit_tokens = st.prefix_hit_tokens;
        g.prefix_blocks = st.prefix_blocks;
        g.prefix_snapshots = st.prefix_snapshots;
        g.prompt_tokens = st.prompt_tokens;
        g.generation_tokens = st.generated_tokens;
        g.graph_replays = st.graph_replays;
        g.graph_captures = st.graph_captures;
        g.eager_decode_steps = st.eager_decode_steps;
        g.sampled_device = st.sampled_device;
        g.sampled_host = st.sampled_host;
        g.chained_decode_steps = st.chained_decode_steps;
        g.pad_rows = st.pad_rows;
    }
    strbuf o = {0};
    int rc = metrics_render(S->met, &g, &o);
    enum MHD_Result r = rc ? MHD_NO
                           : http_respond_text(c, 200, "text/plain; version=0.0.4; charset=utf-8",
                                               o.p ? o.p : "", o.len);
    strbuf_free(&o);
    return r;
}

enum MHD_Result route_openapi(srv *S, struct MHD_Connection *c) {
    return http_respond_text(c, 200, "application/json", S->openapi, S->openapi_len);
}

int route_tokenize_json(srv *S, const char *body, size_t len, json_t **answer, openai_error *e) {
    json_t *root = NULL, *out = NULL;
    openai_request r;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int has_r = 0, rc = -1;
    strata_err err = {0};
    memset(&r, 0, sizeof r);
    if (openai_parse_json(&root, body, len, e)) goto done;
    if (!S->tok) {
        openai_error_set(e, 400, "invalid_request_error", NULL, NULL,
                         "This model has no tokenizer");
        goto done;
    }
    json_t *v = json_object_get(root, "add_special_tokens"),
           *strs = json_object_get(root, "return_token_strs");
    if ((v && !json_is_boolean(v)) || (strs && !json_is_boolean(strs) && !json_is_null(strs))) {
        openai_error_set(e, 400, "invalid_request_error",
                         v && !json_is_boolean(v) ? "add_special_tokens" : "return_token_strs",
                         NULL, "must be a boolean");
        goto done;
    }
    if (json_object_get(root, "messages")) {
        if (!S->tmpl) {
            openai_error_set(e, 400, "invalid_request_error", "messages", NULL,
                             "This model has no chat template");
            goto done;
        }
        if (openai_request_parse(&r, OPENAI_CHAT, body, len,
                                 &(openai_limits){S->vocab, S->max_seqs}, e))
            goto done;
        has_r = 1;
        if (chat_prompt_render(S, &r, &text, e)) goto done;
        if (tok_encode(S->tok, text, strlen(text), v && json_is_true(v), &ids, &n, &err))
            goto tok_fail;
    } else {
        json_t *p = json_object_get(root, "prompt");
        if (!json_is_string(p)) {
            openai_error_set(e, 400, "invalid_request_error", "prompt", NULL,
                             "'prompt' (a string) or 'messages' is required");
            goto done;
        }
        if (tok_encode(S->tok, json_string_value(p), json_string_length(p), !v || json_is_true(v),
                       &ids, &n, &err))
            goto tok_fail;
    }
    json_t *arr = json_array();
    out = json_pack("{s:i, s:i}", "count", (int)n, "max_model_len", S->ctx);
    if (!arr || !out || json_object_set_new(out, "tokens", arr)) goto nomem;
    for (size_t i = 0; i < n; i++)
        if (json_array_append_new(arr, json_integer(ids[i]))) goto nomem;
    if (json_is_true(strs)) {
        json_t *ts = json_array();
        if (!ts || json_object_set_new(out, "token_strs", ts)) goto nomem;
        for (size_t i = 0; i < n; i++) {
            const char *piece = tok_id_to_piece(S->tok, ids[i]);
            json_t *s = piece ? json_string(piece) : NULL;
            if (json_array_append_new(ts, s ? s : json_string(""))) goto nomem;
        }
    }
    *answer = out;
    out = NULL;
    rc = 0;
    goto done;
nomem:
    openai_error_set(e, 503, "server_error", NULL, NULL, "out of memory");
    goto done;
tok_fail:
    openai_error_from_strata(e, &err, NULL);
done:
    json_decref(out);
    free(ids);
    free(text);
    json_decref(root);
    if (has_r) openai_request_free(&r);
    return rc;
}

int route_detokenize_json(srv *S, const char *body, size_t len, json_t **answer, openai_error *e) {
    json_t *root = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    size_t tl = 0;
    int rc = -1;
    strata_err err = {0};
    if (openai_parse_json(&root, body, len, e)) goto done;
    json_t *t = json_object_get(root, "tokens");
    if (!json_is_array(t)) {
        openai_error_set(e, 400, "invalid_request_error", "tokens", NULL,
                         "'tokens' must be a list of token ids");
        goto done;
    }
    size_t n = json_array_size(t);
    if (!(ids = malloc((n ? n : 1) * sizeof *ids))) {
        openai_error_set(e, 503, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    int limit = S->tok ? tok_vocab_size(S->tok) : S->vocab;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(t, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= limit) {
            openai_error_set(e, 400, "invalid_request_error", "tokens", NULL,
                             "'tokens' must hold integers in [0, %d)", limit);
            goto done;
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    if (!S->tok) {
        openai_error_set(e, 400, "invalid_request_error", NULL, NULL,
                         "This model has no tokenizer");
        goto done;
    }
    if (tok_decode(S->tok, ids, n, 0, &text, &tl, &err)) {
        openai_error_from_strata(e, &err, "tokens");
        goto done;
    }
    json_t *s = json_stringn(text, tl);
    /* a decode that ends inside a UTF-8 sequence: the replacement character */
    if (!(*answer = json_pack("{s:o}", "prompt", s ? s : json_string("\xef\xbf\xbd")))) {
        openai_error_set(e, 503, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    rc = 0;
done:
    free(text);
    free(ids);
    json_decref(root);
    return rc;
}
