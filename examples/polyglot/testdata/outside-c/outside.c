/*
 * The C SDK's fixture of the http, media and ai wrappers (built as C++ too,
 * by ../outside-cpp), with the same commands as every language's outside-*
 * fixture, driven by examples/polyglot's TestSDKOutside. Each action
 * answers what the SDK read back as JSON, written with moat_json_writer.
 */
#include "moat.h"

static void hex(moat_json_writer *w, const uint8_t *p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    moat_buf s = MOAT_BUF_INIT;
    moat_buf_reset(&s);
    for (size_t i = 0; i < n; i++) {
        moat_buf_putc(&s, digits[p[i] >> 4]);
        moat_buf_putc(&s, digits[p[i] & 15]);
    }
    moat_jw_string_n(w, (const char *)s.data, s.len);
    moat_buf_free(&s);
}

static moat_error *out_json(moat_json_writer *w, moat_buf *out) {
    const char *text = moat_jw_text(w);
    moat_error *err = text ? NULL : moat_errorf(MOAT_INTERNAL, "the fixture wrote bad JSON");
    if (text) moat_buf_puts(out, text);
    return err;
}

/* http: POST the URL in the input with a header and a binary body. */
static moat_error *http(moat_bytes input, moat_buf *out) {
    static const uint8_t body[] = {0, 0xff, 'h', 'i'};
    moat_http_header hdrs[] = {{"X-Test", "sdk"}};
    moat_http_request req = {"POST", (const char *)input.data, hdrs, 1, body, sizeof body, 5000, 65536};
    moat_http_response resp = MOAT_HTTP_RESPONSE_INIT;
    moat_json_writer w = MOAT_JSON_WRITER_INIT;
    moat_buf echo = MOAT_BUF_INIT;
    moat_error *err = moat_http_fetch(&req, &resp);
    if (!err) {
        moat_http_response_header(&resp, "X-Echo", &echo);
        moat_jw_object(&w);
        moat_jw_key(&w, "status");
        moat_jw_int(&w, resp.status);
        moat_jw_key(&w, "url");
        moat_jw_string_n(&w, resp.url.len ? (const char *)resp.url.data : "", resp.url.len);
        moat_jw_key(&w, "echo");
        moat_jw_string_n(&w, echo.len ? (const char *)echo.data : "", echo.len);
        moat_jw_key(&w, "body");
        hex(&w, resp.body.data, resp.body.len);
        moat_jw_end(&w);
        err = out_json(&w, out);
    }
    moat_buf_free(&echo);
    moat_jw_free(&w);
    moat_http_response_free(&resp);
    return err;
}

static void item_json(moat_json_writer *w, const char *key, const moat_media_item *m) {
    moat_jw_key(w, key);
    moat_jw_object(w);
    moat_jw_key(w, "id");
    moat_jw_string(w, (const char *)m->id.data);
    moat_jw_key(w, "type");
    moat_jw_string(w, (const char *)m->type.data);
    moat_jw_key(w, "size");
    moat_jw_int(w, m->size);
    moat_jw_key(w, "width");
    moat_jw_int(w, m->width);
    moat_jw_key(w, "height");
    moat_jw_int(w, m->height);
    moat_jw_end(w);
}

/* media: keep the input (or fetch "fetch URL"), thumbnail it, describe the
 * thumbnail, read the item back. */
static moat_error *media(moat_bytes input, moat_buf *out) {
    moat_media_item item = MOAT_MEDIA_ITEM_INIT, thumb = MOAT_MEDIA_ITEM_INIT, info = MOAT_MEDIA_ITEM_INIT, got = MOAT_MEDIA_ITEM_INIT;
    moat_buf data = MOAT_BUF_INIT;
    moat_json_writer w = MOAT_JSON_WRITER_INIT;
    moat_error *err;
    if (input.len > 6 && memcmp(input.data, "fetch ", 6) == 0) err = moat_media_fetch((const char *)input.data + 6, &item);
    else err = moat_media_put(input.data, input.len, "image/png", &item);
    if (!err) err = moat_media_thumbnail((const char *)item.id.data, 16, 16, MOAT_FIT_COVER, &thumb);
    if (!err) err = moat_media_info((const char *)thumb.id.data, &info);
    if (!err) err = moat_media_get((const char *)item.id.data, &got, &data);
    if (!err) {
        moat_jw_object(&w);
        item_json(&w, "item", &item);
        item_json(&w, "thumb", &thumb);
        item_json(&w, "info", &info);
        moat_jw_key(&w, "got");
        moat_jw_object(&w);
        moat_jw_key(&w, "id");
        moat_jw_string(&w, (const char *)got.id.data);
        moat_jw_key(&w, "len");
        moat_jw_int(&w, (int64_t)data.len);
        moat_jw_key(&w, "head");
        hex(&w, data.data, data.len < 8 ? data.len : 8);
        moat_jw_end(&w);
        moat_jw_end(&w);
        err = out_json(&w, out);
    }
    moat_jw_free(&w);
    moat_buf_free(&data);
    moat_media_item_free(&item);
    moat_media_item_free(&thumb);
    moat_media_item_free(&info);
    moat_media_item_free(&got);
    return err;
}

static void usage_json(moat_json_writer *w, int64_t in, int64_t out, const moat_buf *id) {
    moat_jw_key(w, "input_tokens");
    moat_jw_int(w, in);
    moat_jw_key(w, "output_tokens");
    moat_jw_int(w, out);
    moat_jw_key(w, "model_call_id");
    moat_jw_string(w, (const char *)id->data);
}

/* ai: "complete MODEL PROMPT", "json MODEL PROMPT", "embed MODEL TEXT". */
static moat_error *ai(moat_bytes input, moat_buf *out) {
    moat_buf store = MOAT_BUF_INIT;
    moat_buf_append(&store, input.data, input.len);
    char *cmd = (char *)store.data, *model = strchr(cmd, ' '), *text = model ? strchr(model + 1, ' ') : NULL;
    moat_json_writer w = MOAT_JSON_WRITER_INIT;
    moat_error *err = NULL;
    if (!text) {
        err = moat_errorf(MOAT_INVALID_ARGUMENT, "want CMD MODEL TEXT");
    } else {
        *model++ = 0;
        *text++ = 0;
        if (strcmp(cmd, "complete") == 0 || strcmp(cmd, "json") == 0) {
            bool plain = strcmp(cmd, "complete") == 0;
            moat_ai_message msgs[] = {{MOAT_ROLE_SYSTEM, "Answer briefly."}, {MOAT_ROLE_USER, text}};
            double temp = 0.25;
            moat_json_writer schema = MOAT_JSON_WRITER_INIT;
            moat_jw_object(&schema);
            moat_jw_key(&schema, "type");
            moat_jw_string(&schema, "object");
            moat_jw_key(&schema, "properties");
            moat_jw_object(&schema);
            moat_jw_key(&schema, "answer");
            moat_jw_object(&schema);
            moat_jw_key(&schema, "type");
            moat_jw_string(&schema, "string");
            moat_jw_end(&schema);
            moat_jw_end(&schema);
            moat_jw_key(&schema, "required");
            moat_jw_array(&schema);
            moat_jw_string(&schema, "answer");
            moat_jw_end(&schema);
            moat_jw_end(&schema);
            moat_ai_complete_opts opts = {64, &temp, NULL};
            moat_ai_complete_opts json_opts = {0, NULL, moat_jw_text(&schema)};
            moat_ai_completion c = MOAT_AI_COMPLETION_INIT;
            err = plain ? moat_ai_complete(model, msgs, 2, &opts, &c) : moat_ai_complete(model, msgs + 1, 1, &json_opts, &c);
            if (!err) {
                moat_jw_object(&w);
                moat_jw_key(&w, "text");
                moat_jw_string_n(&w, (const char *)c.text.data, c.text.len);
                usage_json(&w, c.input_tokens, c.output_tokens, &c.model_call_id);
                moat_jw_end(&w);
                err = out_json(&w, out);
            }
            moat_ai_completion_free(&c);
            moat_jw_free(&schema);
        } else if (strcmp(cmd, "embed") == 0) {
            const char *inputs[] = {text, "moat", NULL};
            moat_ai_embedding e = MOAT_AI_EMBEDDING_INIT;
            if (!(err = moat_ai_embed(model, inputs, &e))) {
                moat_jw_object(&w);
                moat_jw_key(&w, "vectors");
                moat_jw_array(&w);
                for (size_t i = 0; i < e.len; i++) {
                    moat_jw_array(&w);
                    for (size_t j = 0; j < e.dim; j++) moat_jw_number(&w, e.vectors[i * e.dim + j]);
                    moat_jw_end(&w);
                }
                moat_jw_end(&w);
                usage_json(&w, e.input_tokens, e.output_tokens, &e.model_call_id);
                moat_jw_end(&w);
                err = out_json(&w, out);
            }
            moat_ai_embedding_free(&e);
        } else {
            err = moat_errorf(MOAT_INVALID_ARGUMENT, "unknown ai command %s", cmd);
        }
    }
    moat_jw_free(&w);
    moat_buf_free(&store);
    return err;
}

/* caller: who the invocation runs for (moat_caller), whatever the input
 * says: {"user","org","roles","correlation_id","admin"}. */
static moat_error *caller(moat_bytes input, moat_buf *out) {
    (void)input;
    moat_principal p = MOAT_PRINCIPAL_INIT;
    moat_error *err = moat_caller(&p);
    if (!err) {
        moat_json_writer w = MOAT_JSON_WRITER_INIT;
        moat_jw_object(&w);
        moat_jw_key(&w, "user");
        moat_jw_string(&w, (const char *)p.user.data);
        moat_jw_key(&w, "org");
        moat_jw_string(&w, (const char *)p.org.data);
        moat_jw_key(&w, "roles");
        moat_jw_array(&w);
        for (size_t i = 0; i < p.nroles; i++) moat_jw_string(&w, (const char *)p.roles[i].data);
        moat_jw_end(&w);
        moat_jw_key(&w, "correlation_id");
        moat_jw_string(&w, (const char *)p.correlation_id.data);
        moat_jw_key(&w, "admin");
        moat_jw_bool(&w, moat_principal_has_role(&p, "admin"));
        moat_jw_end(&w);
        err = out_json(&w, out);
    }
    moat_principal_free(&p);
    return err;
}

static const moat_action actions[] = {{"http", http}, {"media", media}, {"ai", ai}, {"caller", caller}};

MOAT_ACTIONS(actions)
