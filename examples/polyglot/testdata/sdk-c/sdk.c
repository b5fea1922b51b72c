/* The C SDK's conformance fixture: one action per part of the SDK, driven
 * by examples/polyglot's TestSDK with the same table as the Rust and
 * AssemblyScript fixtures. */
#include "moat.h"

/* word splits "first rest" at the first space. */
static const char *word(const char *in, char *first, size_t cap) {
    const char *sp = strchr(in, ' ');
    size_t n = sp ? (size_t)(sp - in) : strlen(in);
    snprintf(first, cap, "%.*s", (int)(n < cap ? n : cap - 1), in);
    return sp ? sp + 1 : "";
}

/* kv: "put KEY VALUE", "get KEY", "del KEY", "list PREFIX". */
static bool add_key(const char *key, void *ctx) {
    moat_buf *out = (moat_buf *)ctx;
    if (out->len) moat_buf_putc(out, '\n');
    moat_buf_puts(out, key);
    return true;
}

static moat_error *kv(moat_bytes input, moat_buf *out) {
    char cmd[8], key[600];
    const char *rest = word((const char *)input.data, cmd, sizeof cmd);
    const char *value = word(rest, key, sizeof key);
    moat_error *err = NULL;
    if (strcmp(cmd, "put") == 0) {
        if (!(err = moat_kv_put(key, value, strlen(value)))) moat_buf_puts(out, "ok");
    } else if (strcmp(cmd, "get") == 0) {
        moat_buf v = MOAT_BUF_INIT;
        bool found;
        if (!(err = moat_kv_get(key, &v, &found))) {
            if (found) moat_buf_append(out, v.data, v.len);
            else moat_buf_puts(out, "<not found>");
        }
        moat_buf_free(&v);
    } else if (strcmp(cmd, "del") == 0) {
        bool deleted;
        if (!(err = moat_kv_delete(key, &deleted))) moat_buf_puts(out, deleted ? "deleted" : "<not found>");
    } else if (strcmp(cmd, "list") == 0) {
        err = moat_kv_list(rest, add_key, out);
    } else {
        err = moat_errorf(MOAT_INVALID_ARGUMENT, "unknown kv command %s", cmd);
    }
    return err;
}

/* log: "LEVEL message" logs with the field k=v. */
static moat_error *log_action(moat_bytes input, moat_buf *out) {
    char level[16];
    const char *msg = word((const char *)input.data, level, sizeof level);
    moat_error *err = moat_log_fields(level, msg, "k", "v", (const char *)NULL);
    if (!err) moat_buf_puts(out, "ok");
    return err;
}

/* config: the value of the key in the input, or not_found. */
static moat_error *config(moat_bytes input, moat_buf *out) {
    moat_buf v = MOAT_BUF_INIT;
    bool found;
    moat_error *err = moat_config_get((const char *)input.data, &v, &found);
    if (!err && !found) err = moat_errorf(MOAT_NOT_FOUND, "no config key %s", (const char *)input.data);
    if (!err) moat_buf_append(out, v.data, v.len);
    moat_buf_free(&v);
    return err;
}

/* call: "OP JSON" runs any op and returns its raw reply. */
static moat_error *call(moat_bytes input, moat_buf *out) {
    char op[64];
    const char *req = word((const char *)input.data, op, sizeof op);
    moat_bytes reply;
    moat_error *err = moat_call(op, req, strlen(req), &reply);
    if (!err) moat_buf_append(out, reply.data, reply.len);
    return err;
}

/* fail: "CODE message" fails with that code. */
static moat_error *fail(moat_bytes input, moat_buf *out) {
    (void)out;
    char code[40];
    const char *msg = word((const char *)input.data, code, sizeof code);
    return moat_errorf(code, "%s", msg);
}

/* echo: the input, byte for byte. */
static moat_error *echo(moat_bytes input, moat_buf *out) {
    moat_buf_append(out, input.data, input.len);
    return NULL;
}

/* trap: the input goes to stderr, then the instance aborts. */
static moat_error *trap(moat_bytes input, moat_buf *out) {
    (void)out;
    fprintf(stderr, "%s\n", (const char *)input.data);
    abort();
}

/* ---- db, knowledge, task: the same commands in every fixture ----------- */

/* words splits the input into n words at spaces, the last taking the rest;
 * it returns how many it found. */
static int words(const char *in, char **out, int n, moat_buf *store) {
    moat_buf_reset(store);
    moat_buf_puts(store, in);
    char *p = (char *)store->data;
    int i = 0;
    for (; i < n && p; i++) {
        out[i] = p;
        char *sp = i < n - 1 ? strchr(p, ' ') : NULL;
        if (sp) *sp++ = 0;
        p = sp;
    }
    return i;
}

/* out_json appends what w wrote to out, or fails if the writer did. */
static moat_error *out_json(moat_json_writer *w, moat_buf *out) {
    const char *text = moat_jw_text(w);
    moat_error *err = text ? NULL : moat_errorf(MOAT_INTERNAL, "the fixture wrote bad JSON");
    if (text) moat_buf_puts(out, text);
    moat_jw_free(w);
    return err;
}

/* note_doc builds {"title":TITLE,"n":N,"tags":[TAGS...],"done":false,"body":"b"}. */
static void note_doc(moat_json_writer *w, const char *title, int64_t n, char *tags) {
    moat_jw_object(w);
    moat_jw_key(w, "title");
    moat_jw_string(w, title);
    moat_jw_key(w, "n");
    moat_jw_int(w, n);
    moat_jw_key(w, "tags");
    moat_jw_array(w);
    for (char *t = strtok(tags, ","); t; t = strtok(NULL, ",")) moat_jw_string(w, t);
    moat_jw_end(w);
    moat_jw_key(w, "done");
    moat_jw_bool(w, false);
    moat_jw_key(w, "body");
    moat_jw_string(w, "b");
    moat_jw_end(w);
}

/* db: "insert MODEL N TAGS TITLE", "get MODEL ID", "query MODEL TAG",
 * "update MODEL ID VERSION TITLE", "stale MODEL ID", "hostile MODEL",
 * "delete MODEL ID VERSION". */
static moat_error *db(moat_bytes input, moat_buf *out) {
    moat_buf store = MOAT_BUF_INIT;
    moat_json_writer w = MOAT_JSON_WRITER_INIT;
    char *a[5] = {0};
    int n = words((const char *)input.data, a, 5, &store);
    moat_error *err = NULL;
    if (n < 2) {
        err = moat_errorf(MOAT_INVALID_ARGUMENT, "want CMD MODEL ...");
    } else if (strcmp(a[0], "insert") == 0 && n == 5) {
        moat_json_writer doc = MOAT_JSON_WRITER_INIT;
        note_doc(&doc, a[4], atoll(a[2]), a[3]);
        moat_buf id = MOAT_BUF_INIT;
        int64_t version = 0;
        if (!(err = moat_db_insert(a[1], moat_jw_text(&doc), &id, &version))) {
            moat_jw_object(&w);
            moat_jw_key(&w, "id");
            moat_jw_string(&w, (const char *)id.data);
            moat_jw_key(&w, "version");
            moat_jw_int(&w, version);
            moat_jw_end(&w);
            err = out_json(&w, out);
        }
        moat_buf_free(&id);
        moat_jw_free(&doc);
    } else if (strcmp(a[0], "get") == 0 && n >= 3) {
        moat_db_doc d = MOAT_DB_DOC_INIT;
        bool found = false;
        if (!(err = moat_db_get(a[1], a[2], &d, &found))) {
            moat_buf title = MOAT_BUF_INIT;
            moat_jw_object(&w);
            moat_jw_key(&w, "found");
            moat_jw_bool(&w, found);
            if (found) {
                moat_json_get_string((const char *)d.doc.data, d.doc.len, "title", &title);
                moat_jw_key(&w, "id");
                moat_jw_string(&w, (const char *)d.id.data);
                moat_jw_key(&w, "version");
                moat_jw_int(&w, d.version);
                moat_jw_key(&w, "owner");
                moat_jw_string(&w, (const char *)d.owner.data);
                moat_jw_key(&w, "created");
                moat_jw_string(&w, (const char *)d.created.data);
                moat_jw_key(&w, "updated");
                moat_jw_string(&w, (const char *)d.updated.data);
                moat_jw_key(&w, "title");
                moat_jw_string(&w, (const char *)title.data);
                moat_jw_key(&w, "doc");
                moat_jw_raw(&w, (const char *)d.doc.data);
            }
            moat_jw_end(&w);
            err = out_json(&w, out);
            moat_buf_free(&title);
        }
        moat_db_doc_free(&d);
    } else if (strcmp(a[0], "query") == 0 && n >= 3) {
        moat_db_where where = MOAT_DB_WHERE_INIT;
        moat_db_where_string(&where, "tags", "contains", a[2]);
        moat_db_where_bool(&where, "done", "=", false);
        moat_db_where_json(&where, "n", "in", "[1,2,3,5,8]");
        static const char *const order[] = {"-n", NULL};
        moat_db_page page = MOAT_DB_PAGE_INIT;
        moat_buf after = MOAT_BUF_INIT, title = MOAT_BUF_INIT;
        int pages = 0;
        moat_jw_object(&w);
        moat_jw_key(&w, "titles");
        moat_jw_array(&w);
        do {
            moat_db_query_opts q = {&where, order, 2, (const char *)after.data};
            if ((err = moat_db_query(a[1], &q, &page))) break;
            pages++;
            for (size_t i = 0; i < page.len; i++) {
                moat_json_get_string((const char *)page.docs[i].doc.data, page.docs[i].doc.len, "title", &title);
                moat_jw_string(&w, (const char *)title.data);
            }
            moat_buf_reset(&after);
            moat_buf_append(&after, page.next.data, page.next.len);
        } while (after.len);
        int64_t count = 0;
        if (!err) err = moat_db_count(a[1], &where, &count);
        if (!err) {
            moat_jw_end(&w);
            moat_jw_key(&w, "pages");
            moat_jw_int(&w, pages);
            moat_jw_key(&w, "count");
            moat_jw_int(&w, count);
            moat_jw_end(&w);
            err = out_json(&w, out);
        }
        moat_db_page_free(&page);
        moat_db_where_free(&where);
        moat_buf_free(&after);
        moat_buf_free(&title);
    } else if (strcmp(a[0], "update") == 0 && n == 5) {
        moat_json_writer set = MOAT_JSON_WRITER_INIT;
        moat_jw_object(&set);
        moat_jw_key(&set, "title");
        moat_jw_string(&set, a[4]);
        moat_jw_key(&set, "done");
        moat_jw_bool(&set, true);
        moat_jw_end(&set);
        static const char *const unset[] = {"body", NULL};
        moat_db_change change = {moat_jw_text(&set), unset, atoll(a[3])};
        int64_t version = 0;
        if (!(err = moat_db_update(a[1], a[2], &change, &version))) {
            moat_jw_object(&w);
            moat_jw_key(&w, "version");
            moat_jw_int(&w, version);
            moat_jw_end(&w);
            err = out_json(&w, out);
        }
        moat_jw_free(&set);
    } else if (strcmp(a[0], "stale") == 0 && n >= 3) {
        /* Read, write back with the version read, then write again with
         * that (now stale) version: the host refuses with conflict, which
         * reaches this code as the error's code. */
        moat_db_doc d = MOAT_DB_DOC_INIT;
        bool found = false;
        int64_t nv = 0, v1 = 0;
        if (!(err = moat_db_get(a[1], a[2], &d, &found)) && !found) err = moat_errorf(MOAT_NOT_FOUND, "no document %s", a[2]);
        if (!err && !moat_json_get_int((const char *)d.doc.data, d.doc.len, "n", &nv)) err = moat_errorf(MOAT_INTERNAL, "the document has no int n");
        char set[64];
        if (!err) {
            snprintf(set, sizeof set, "{\"n\":%lld}", (long long)(nv + 1));
            moat_db_change change = {set, NULL, d.version};
            err = moat_db_update(a[1], a[2], &change, &v1);
        }
        if (!err) {
            moat_db_change change = {set, NULL, d.version};
            moat_error *stale = moat_db_update(a[1], a[2], &change, NULL);
            if (!stale) err = moat_errorf(MOAT_GUEST_ERROR, "an update at stale version %lld was accepted", (long long)d.version);
            else if (!moat_error_is(stale, MOAT_CONFLICT)) err = stale;
            else {
                moat_jw_object(&w);
                moat_jw_key(&w, "code");
                moat_jw_string(&w, stale->code);
                moat_jw_key(&w, "version");
                moat_jw_int(&w, v1);
                moat_jw_end(&w);
                err = out_json(&w, out);
            }
        }
        moat_db_doc_free(&d);
    } else if (strcmp(a[0], "hostile") == 0 && n >= 2) {
        /* JSON the SDK must refuse before anything is sent: a number
         * with no JSON form (the writer fails, its text is NULL) and text
         * that would add members to the request around the document. */
        moat_json_writer doc = MOAT_JSON_WRITER_INIT;
        moat_jw_object(&doc);
        moat_jw_key(&doc, "n");
        moat_jw_number(&doc, 0.0 / 0.0);
        moat_jw_end(&doc);
        moat_error *nan = moat_db_insert(a[1], moat_jw_text(&doc), NULL, NULL);
        moat_jw_free(&doc);
        moat_jw_object(&w);
        moat_jw_key(&w, "nan");
        moat_jw_string(&w, nan ? nan->code : "accepted");
        moat_error *smuggled = moat_db_insert(a[1], "{\"title\":\"x\"}, \"model\": \"secrets\"", NULL, NULL);
        moat_jw_key(&w, "smuggled");
        moat_jw_string(&w, smuggled ? smuggled->code : "accepted");
        moat_jw_end(&w);
        err = out_json(&w, out);
    } else if (strcmp(a[0], "delete") == 0 && n == 4) {
        bool deleted = false;
        if (!(err = moat_db_delete(a[1], a[2], atoll(a[3]), &deleted))) moat_buf_puts(out, deleted ? "{\"deleted\":true}" : "{\"deleted\":false}");
    } else {
        err = moat_errorf(MOAT_INVALID_ARGUMENT, "unknown db command %s", (const char *)input.data);
    }
    moat_jw_free(&w);
    moat_buf_free(&store);
    return err;
}

/* knowledge: "add COLL ID LANG TEXT", "search COLL LANG QUERY" (LANG - for
 * no filter), "delete COLL ID". */
static moat_error *knowledge(moat_bytes input, moat_buf *out) {
    moat_buf store = MOAT_BUF_INIT;
    moat_json_writer w = MOAT_JSON_WRITER_INIT, meta = MOAT_JSON_WRITER_INIT;
    char *a[5] = {0};
    /* A query is the rest of the input, spaces and all. */
    int n = words((const char *)input.data, a, strncmp((const char *)input.data, "search ", 7) == 0 ? 4 : 5, &store);
    moat_error *err = NULL;
    if (n == 5 && strcmp(a[0], "add") == 0) {
        moat_jw_object(&meta);
        moat_jw_key(&meta, "lang");
        moat_jw_string(&meta, a[3]);
        moat_jw_key(&meta, "len");
        moat_jw_int(&meta, (int64_t)strlen(a[4]));
        moat_jw_end(&meta);
        bool replaced = false;
        if (!(err = moat_knowledge_add(a[1], a[2], a[4], moat_jw_text(&meta), &replaced)))
            moat_buf_puts(out, replaced ? "{\"replaced\":true}" : "{\"replaced\":false}");
    } else if (n == 4 && strcmp(a[0], "search") == 0) {
        moat_knowledge_search_opts opts = {5, NULL};
        if (strcmp(a[2], "-") != 0) {
            moat_jw_object(&meta);
            moat_jw_key(&meta, "lang");
            moat_jw_string(&meta, a[2]);
            moat_jw_end(&meta);
            opts.filter = moat_jw_text(&meta);
        }
        moat_knowledge_hits hits = MOAT_KNOWLEDGE_HITS_INIT;
        if (!(err = moat_knowledge_search(a[1], a[3], &opts, &hits))) {
            moat_buf lang = MOAT_BUF_INIT;
            moat_jw_object(&w);
            moat_jw_key(&w, "hits");
            moat_jw_array(&w);
            for (size_t i = 0; i < hits.len; i++) {
                moat_json_get_string((const char *)hits.hits[i].meta.data, hits.hits[i].meta.len, "lang", &lang);
                moat_jw_object(&w);
                moat_jw_key(&w, "id");
                moat_jw_string(&w, (const char *)hits.hits[i].id.data);
                moat_jw_key(&w, "lang");
                moat_jw_string(&w, (const char *)lang.data);
                moat_jw_key(&w, "snippet");
                moat_jw_string(&w, (const char *)hits.hits[i].snippet.data);
                moat_jw_key(&w, "scored");
                moat_jw_bool(&w, hits.hits[i].score > 0);
                moat_jw_end(&w);
            }
            moat_jw_end(&w);
            moat_jw_end(&w);
            err = out_json(&w, out);
            moat_buf_free(&lang);
        }
        moat_knowledge_hits_free(&hits);
    } else if (n >= 3 && strcmp(a[0], "delete") == 0) {
        bool deleted = false;
        if (!(err = moat_knowledge_delete(a[1], a[2], &deleted))) moat_buf_puts(out, deleted ? "{\"deleted\":true}" : "{\"deleted\":false}");
    } else {
        err = moat_errorf(MOAT_INVALID_ARGUMENT, "unknown knowledge command %s", (const char *)input.data);
    }
    moat_jw_free(&w);
    moat_jw_free(&meta);
    moat_buf_free(&store);
    return err;
}

/* task: "enqueue ACTION KEY DELAY INPUT" (KEY, DELAY - for none; two
 * attempts), "status ID", "cancel ID". */
static moat_error *task(moat_bytes input, moat_buf *out) {
    moat_buf store = MOAT_BUF_INIT, id = MOAT_BUF_INIT;
    moat_json_writer w = MOAT_JSON_WRITER_INIT;
    char *a[5] = {0};
    int n = words((const char *)input.data, a, 5, &store);
    moat_error *err = NULL;
    if (n >= 4 && strcmp(a[0], "enqueue") == 0) {
        const char *in = n == 5 ? a[4] : "";
        moat_task_opts opts = {strcmp(a[3], "-") ? a[3] : NULL, NULL, 2, strcmp(a[2], "-") ? a[2] : NULL};
        bool existing = false;
        if (!(err = moat_task_enqueue(a[1], in, strlen(in), &opts, &id, &existing))) {
            moat_jw_object(&w);
            moat_jw_key(&w, "id");
            moat_jw_string(&w, (const char *)id.data);
            moat_jw_key(&w, "existing");
            moat_jw_bool(&w, existing);
            moat_jw_end(&w);
            err = out_json(&w, out);
        }
    } else if (n >= 2 && strcmp(a[0], "status") == 0) {
        moat_task_info info = MOAT_TASK_INFO_INIT;
        if (!(err = moat_task_status(a[1], &info))) {
            moat_jw_object(&w);
            moat_jw_key(&w, "state");
            moat_jw_string(&w, (const char *)info.state.data);
            moat_jw_key(&w, "attempts");
            moat_jw_int(&w, info.attempts);
            moat_jw_key(&w, "max_attempts");
            moat_jw_int(&w, info.max_attempts);
            moat_jw_key(&w, "result");
            moat_jw_string_n(&w, info.result.len ? (const char *)info.result.data : "", info.result.len);
            moat_jw_key(&w, "error");
            moat_jw_string(&w, info.error.len ? (const char *)info.error.data : "");
            moat_jw_key(&w, "code");
            moat_jw_string(&w, info.code.len ? (const char *)info.code.data : "");
            moat_jw_key(&w, "run_at");
            moat_jw_string(&w, info.run_at.len ? (const char *)info.run_at.data : "");
            moat_jw_end(&w);
            err = out_json(&w, out);
        }
        moat_task_info_free(&info);
    } else if (n >= 2 && strcmp(a[0], "cancel") == 0) {
        bool cancelled = false;
        moat_buf state = MOAT_BUF_INIT;
        if (!(err = moat_task_cancel(a[1], &cancelled, &state))) {
            moat_jw_object(&w);
            moat_jw_key(&w, "cancelled");
            moat_jw_bool(&w, cancelled);
            moat_jw_key(&w, "state");
            moat_jw_string(&w, state.len ? (const char *)state.data : "");
            moat_jw_end(&w);
            err = out_json(&w, out);
        }
        moat_buf_free(&state);
    } else {
        err = moat_errorf(MOAT_INVALID_ARGUMENT, "unknown task command %s", (const char *)input.data);
    }
    moat_jw_free(&w);
    moat_buf_free(&id);
    moat_buf_free(&store);
    return err;
}

static const moat_action actions[] = {
    {"kv", kv}, {"log", log_action}, {"config", config}, {"call", call}, {"fail", fail}, {"echo", echo}, {"trap", trap},
    {"db", db}, {"knowledge", knowledge}, {"task", task},
};

MOAT_ACTIONS(actions)
