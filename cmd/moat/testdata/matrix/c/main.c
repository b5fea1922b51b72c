/*
 * The acceptance matrix's C plugin (see ../README.md): action all tries
 * every op family through guests/c/moat.h and prints one line per family,
 * "<family> ok <value>" or "<family> err <code>: <message>"; action noop
 * returns its input. moat build writes the binary's moat.h beside this
 * file.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "moat.h"

/* A family's attempt: it appends its value to val, or returns the error
 * that the line reports. */
typedef moat_error *(*family_fn)(const char *input, moat_buf *val);

/* config reads key into value; a key the configuration lacks is an error
 * here, since every value this plugin reads is in its moat.yaml. */
static moat_error *config(const char *key, moat_buf *value) {
    bool found = false;
    moat_error *err = moat_config_get(key, value, &found);
    if (!err && !found) err = moat_errorf(MOAT_NOT_FOUND, "config has no %s", key);
    return err;
}

static moat_error *try_log(const char *input, moat_buf *val) {
    (void)val;
    return moat_log_fields(MOAT_LEVEL_INFO, "matrix", "input", input, (const char *)NULL);
}

static moat_error *try_config(const char *input, moat_buf *val) {
    (void)input;
    bool found = false;
    moat_error *err = moat_config_get("greeting", val, &found);
    if (!err && !found) moat_buf_puts(val, "-");
    return err;
}

static moat_error *try_kv(const char *input, moat_buf *val) {
    bool found = false;
    moat_error *err = moat_kv_get("matrix", val, &found);
    if (err) return err;
    if (!found) moat_buf_puts(val, "-");
    return moat_kv_put("matrix", input, strlen(input));
}

static moat_error *try_db(const char *input, moat_buf *val) {
    int64_t n = 0;
    moat_error *err = moat_db_count("notes", NULL, &n);
    if (err) return err;
    moat_json_writer doc = MOAT_JSON_WRITER_INIT;
    moat_jw_object(&doc);
    moat_jw_key(&doc, "title");
    moat_jw_string(&doc, input);
    moat_jw_end(&doc);
    moat_buf id = MOAT_BUF_INIT;
    err = moat_db_insert("notes", moat_jw_text(&doc), &id, NULL);
    moat_buf_free(&id);
    moat_jw_free(&doc);
    if (!err) moat_buf_printf(val, "%lld", (long long)n);
    return err;
}

static moat_error *try_knowledge(const char *input, moat_buf *val) {
    moat_knowledge_hits hits = MOAT_KNOWLEDGE_HITS_INIT;
    moat_error *err = moat_knowledge_search("docs", "matrix", NULL, &hits);
    size_t n = hits.len;
    moat_knowledge_hits_free(&hits);
    if (err) return err;
    moat_buf text = MOAT_BUF_INIT;
    moat_buf_printf(&text, "matrix %s", input);
    err = moat_knowledge_add("docs", input, (const char *)text.data, NULL, NULL);
    moat_buf_free(&text);
    if (!err) moat_buf_printf(val, "%zu", n);
    return err;
}

static moat_error *try_tasks(const char *input, moat_buf *val) {
    moat_task_opts opts = {.delay = "1h"};
    moat_buf id = MOAT_BUF_INIT;
    moat_task_info info = MOAT_TASK_INFO_INIT;
    moat_error *err = moat_task_enqueue("noop", input, strlen(input), &opts, &id, NULL);
    if (!err) err = moat_task_status((const char *)id.data, &info);
    if (!err) moat_buf_append(val, info.state.data, info.state.len);
    moat_task_info_free(&info);
    moat_buf_free(&id);
    return err;
}

static moat_error *try_http(const char *input, moat_buf *val) {
    (void)input;
    moat_buf url = MOAT_BUF_INIT;
    moat_http_response resp = MOAT_HTTP_RESPONSE_INIT;
    moat_error *err = config("url", &url);
    if (!err) {
        moat_http_request req = {.url = (const char *)url.data, .timeout_ms = 5000};
        err = moat_http_fetch(&req, &resp);
    }
    if (!err) {
        moat_buf_printf(val, "%d ", resp.status);
        moat_buf_append(val, resp.body.data, resp.body.len);
    }
    moat_http_response_free(&resp);
    moat_buf_free(&url);
    return err;
}

static moat_error *try_media(const char *input, moat_buf *val) {
    (void)input;
    moat_buf pdf = MOAT_BUF_INIT;
    moat_media_item item = MOAT_MEDIA_ITEM_INIT, info = MOAT_MEDIA_ITEM_INIT;
    moat_error *err = config("pdf", &pdf);
    if (!err) err = moat_media_put(pdf.data, pdf.len, "application/pdf", &item);
    if (!err) err = moat_media_info((const char *)item.id.data, &info);
    if (!err) moat_buf_printf(val, "%s %lld", (const char *)info.type.data, (long long)info.size);
    moat_media_item_free(&info);
    moat_media_item_free(&item);
    moat_buf_free(&pdf);
    return err;
}

static moat_error *try_ai(const char *input, moat_buf *val) {
    (void)input;
    const moat_ai_message msgs[] = {{MOAT_ROLE_USER, "say matrix"}};
    moat_ai_completion c = MOAT_AI_COMPLETION_INIT;
    moat_error *err = moat_ai_complete("small-chat", msgs, 1, NULL, &c);
    if (!err) moat_buf_append(val, c.text.data, c.text.len);
    moat_ai_completion_free(&c);
    return err;
}

/* try_files reads the granted file with stdio: wasi-libc finds it under
 * the directory the host preopened for the grant. A failure is reported
 * as an "io" error with the C library's reason. */
static moat_error *try_files(const char *input, moat_buf *val) {
    (void)input;
    moat_buf path = MOAT_BUF_INIT;
    moat_error *err = config("file", &path);
    if (err) {
        moat_buf_free(&path);
        return err;
    }
    FILE *f = fopen((const char *)path.data, "r");
    if (!f) err = moat_errorf("io", "%s", strerror(errno));
    else {
        char chunk[512];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) moat_buf_append(val, chunk, n);
        if (ferror(f)) err = moat_errorf("io", "%s", strerror(errno));
        fclose(f);
    }
    moat_buf_free(&path);
    return err;
}

static const struct {
    const char *name;
    family_fn fn;
} families[] = {
    {"log", try_log},         {"config", try_config}, {"kv", try_kv},       {"db", try_db},   {"knowledge", try_knowledge},
    {"tasks", try_tasks},     {"http", try_http},     {"media", try_media}, {"ai", try_ai},   {"files", try_files},
};

/* line appends "<family> ok <value>" without trailing white space, or
 * "<family> err <code>: <message>". */
static void line(moat_buf *out, const char *family, const moat_error *err, moat_buf *val) {
    if (err) {
        moat_buf_printf(out, "%s err %s", family, err->code);
        if (err->message[0]) moat_buf_printf(out, ": %s", err->message);
    } else {
        while (val->len && strchr(" \t\r\n", val->data[val->len - 1])) val->data[--val->len] = 0;
        moat_buf_printf(out, "%s ok", family);
        if (val->len) moat_buf_printf(out, " %s", (const char *)val->data);
    }
    moat_buf_putc(out, '\n');
}

static moat_error *all(moat_bytes input, moat_buf *out) {
    moat_buf val = MOAT_BUF_INIT;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        moat_buf_reset(&val);
        moat_error *err = families[i].fn((const char *)input.data, &val);
        line(out, families[i].name, err, &val);
    }
    moat_buf_free(&val);
    return NULL;
}

static moat_error *noop(moat_bytes input, moat_buf *out) {
    moat_buf_append(out, input.data, input.len);
    return NULL;
}

static const moat_action actions[] = {
    {"all", all},
    {"noop", noop},
};

MOAT_ACTIONS(actions)
