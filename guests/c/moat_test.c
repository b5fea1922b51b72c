/*
 * Unit tests of moat.h's parts that need no WebAssembly: JSON (reading,
 * writing, validating), base64 and the op wrappers' requests and replies
 * against a fake host. Built natively (the exports and the
 * input path are covered end to end by examples/polyglot):
 *
 *     clang-19 -Wall -Wextra -Werror -Wno-unknown-attributes -o moat_test moat_test.c && ./moat_test
 */
#include "moat.h"

static int failures;

#define CHECK(cond, ...)                                        \
    do {                                                        \
        if (!(cond)) {                                          \
            failures++;                                         \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                       \
            fputc('\n', stderr);                                \
        }                                                       \
    } while (0)

/* ---- the fake host: one reply per op, kept when it does not fit ------- */

static char last_op[64], last_req[4096];
static const char *next_reply;
static const char *(*reply_fn)(void); /* when set, computes the reply from last_req */
static uint32_t next_status;
static const char *pending;
static uint32_t pending_status;
static int crossings;

uint64_t moat__host_call(const char *op, uint32_t op_len, const void *req, uint32_t req_len, void *resp, uint32_t resp_cap) {
    crossings++;
    const char *reply;
    uint32_t status;
    if (op_len == 0) {
        if (!pending) abort();
        reply = pending;
        status = pending_status;
        pending = NULL;
    } else {
        snprintf(last_op, sizeof last_op, "%.*s", (int)op_len, op);
        snprintf(last_req, sizeof last_req, "%.*s", (int)req_len, (const char *)req);
        reply = reply_fn ? reply_fn() : next_reply;
        status = next_status;
    }
    uint32_t n = (uint32_t)strlen(reply);
    if (n > resp_cap) {
        pending = reply;
        pending_status = status;
        return (uint64_t)MOAT__STATUS_TOO_SMALL << 32 | n;
    }
    memcpy(resp, reply, n);
    return (uint64_t)status << 32 | n;
}

static void reply(uint32_t status, const char *body) {
    next_status = status;
    next_reply = body;
}

/* ---- tests ------------------------------------------------------------- */

static void test_json_strings(void) {
    const char *cases[] = {"", "plain", "quote \" back \\ slash", "nl\nt\tcr\r\x01\x1f", "\xc3\xbc \xe2\x82\xac \xf0\x9f\x98\x80"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moat_buf lit = MOAT_BUF_INIT, back = MOAT_BUF_INIT;
        moat_json_string(&lit, cases[i], strlen(cases[i]));
        moat_json j = {(const char *)lit.data, (const char *)lit.data + lit.len};
        CHECK(moat_json_read_string(&j, &back) && back.len == strlen(cases[i]) && memcmp(back.data, cases[i], back.len) == 0,
              "round trip of %s", (char *)lit.data);
        moat_buf_free(&lit);
        moat_buf_free(&back);
    }
    struct { const char *lit, *want; } esc[] = {
        {"\"\\u00e9\\/\"", "\xc3\xa9/"},
        {"\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80"},
        {"\"\\ud83d x\"", "\xef\xbf\xbd x"},
        {"\"\\q\"", NULL},
        {"\"raw\nnewline\"", NULL},
        {"\"unterminated", NULL},
        {"\"\\u12\"", NULL},
    };
    for (size_t i = 0; i < sizeof esc / sizeof esc[0]; i++) {
        moat_buf out = MOAT_BUF_INIT;
        moat_json j = {esc[i].lit, esc[i].lit + strlen(esc[i].lit)};
        bool ok = moat_json_read_string(&j, &out);
        if (esc[i].want) CHECK(ok && strcmp((char *)out.data, esc[i].want) == 0, "%s", esc[i].lit);
        else CHECK(!ok, "%s should be refused", esc[i].lit);
        moat_buf_free(&out);
    }
}

static void test_json_find(void) {
    const char *body = " {\"skip\": {\"a\": [1, -2.5e3, true, null, {\"b\": \"}\"}]}, \"value\": \"v\\\"1\", \"found\": true} ";
    moat_buf v = MOAT_BUF_INIT;
    CHECK(moat_json_get_string(body, strlen(body), "value", &v) && strcmp((char *)v.data, "v\"1") == 0, "value");
    CHECK(moat_json_get_bool(body, strlen(body), "found"), "found");
    CHECK(!moat_json_get_bool(body, strlen(body), "missing"), "missing");
    CHECK(!moat_json_get_string(body, strlen(body), "found", &v), "found is not a string");
    const char *bad[] = {"{", "[]", "{\"a\":}", "{\"a\" 1}", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!moat_json_get_bool(bad[i], strlen(bad[i]), "a"), "%s", bad[i]);
    moat_buf deep = MOAT_BUF_INIT;
    moat_buf_puts(&deep, "{\"a\":");
    for (int i = 0; i < 100; i++) moat_buf_putc(&deep, '[');
    for (int i = 0; i < 100; i++) moat_buf_putc(&deep, ']');
    moat_buf_puts(&deep, ",\"b\":true}");
    CHECK(!moat_json_get_bool((char *)deep.data, deep.len, "b"), "nesting past the bound is refused");
    moat_buf_free(&deep);
    moat_buf_free(&v);
}

static void test_base64(void) {
    for (size_t n = 0; n < 10; n++) {
        uint8_t in[10];
        for (size_t i = 0; i < n; i++) in[i] = (uint8_t)(i * 37 + 200);
        moat_buf enc = MOAT_BUF_INIT, dec = MOAT_BUF_INIT;
        moat__b64encode(&enc, in, n);
        CHECK(moat__b64decode(enc.data, enc.len, &dec) && dec.len == n && (n == 0 || memcmp(dec.data, in, n) == 0), "n=%zu", n);
        moat_buf_free(&enc);
        moat_buf_free(&dec);
    }
    const char *bad[] = {"aGVsbG8", "aGV=bG8=", "a===", "!!!!"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        moat_buf dec = MOAT_BUF_INIT;
        CHECK(!moat__b64decode((const uint8_t *)bad[i], strlen(bad[i]), &dec), "%s", bad[i]);
        moat_buf_free(&dec);
    }
}

static bool collect(const char *key, void *ctx) {
    moat_buf *b = (moat_buf *)ctx;
    moat_buf_puts(b, key);
    moat_buf_putc(b, ';');
    return true;
}

/* kv.list pages: the fake host answers by the request's "after". */
static const char *list_page(void) {
    return strstr(last_req, "\"after\"") ? "{\"keys\":[\"c\"],\"more\":false}" : "{\"keys\":[\"a\",\"b\\n\"],\"more\":true}";
}

static void test_ops(void) {
    moat_buf v = MOAT_BUF_INIT;
    bool found = true;

    reply(MOAT__STATUS_OK, "{\"value\":\"\",\"found\":false}");
    CHECK(moat_config_get("greeting", &v, &found) == NULL && !found, "config miss");
    CHECK(strcmp(last_op, "config.get") == 0 && strcmp(last_req, "{\"key\":\"greeting\"}") == 0, "request %s %s", last_op, last_req);

    /* A reply larger than the first buffer: StatusTooSmall, then a fetch. */
    moat_buf big = MOAT_BUF_INIT;
    moat_buf_puts(&big, "{\"value\":\"");
    for (int i = 0; i < 20000; i++) moat_buf_putc(&big, 'x');
    moat_buf_puts(&big, "\",\"found\":true}");
    reply(MOAT__STATUS_OK, (char *)big.data);
    crossings = 0;
    CHECK(moat_config_get("greeting", &v, &found) == NULL && found && v.len == 20000 && crossings == 2, "large reply: len %zu, %d crossings", v.len, crossings);
    reply(MOAT__STATUS_OK, "{\"value\":\"small\",\"found\":true}");
    crossings = 0;
    CHECK(moat_config_get("k", &v, &found) == NULL && strcmp((char *)v.data, "small") == 0 && crossings == 1, "the buffer grew");

    reply(MOAT__STATUS_ERROR, "{\"code\":\"denied\",\"message\":\"op kv.get: no \\\"kv\\\"\"}");
    moat_error *e = moat_kv_get("count", &v, &found);
    CHECK(moat_error_is(e, MOAT_DENIED) && strcmp(e->message, "op kv.get: no \"kv\"") == 0, "denied: %s", e ? e->message : "NULL");
    reply(MOAT__STATUS_ERROR, "garbage");
    CHECK(moat_error_is(moat_kv_delete("k", NULL), MOAT_INTERNAL), "undecodable error reply");

    reply(MOAT__STATUS_OK, "{\"value\":\"aGVsbG8=\",\"found\":true}");
    CHECK(moat_kv_get("count", &v, &found) == NULL && found && v.len == 5 && strcmp((char *)v.data, "hello") == 0, "kv.get");
    reply(MOAT__STATUS_OK, "{\"found\":true}");
    CHECK(moat_kv_get("empty", &v, &found) == NULL && found && v.len == 0 && v.data && v.data[0] == 0, "empty value");
    reply(MOAT__STATUS_OK, "{\"value\":\"!!!!\",\"found\":true}");
    CHECK(moat_error_is(moat_kv_get("bad", &v, &found), MOAT_INTERNAL), "bad base64");

    reply(MOAT__STATUS_OK, "{}");
    CHECK(moat_kv_put("k\"", "hi", 2) == NULL && strcmp(last_req, "{\"key\":\"k\\\"\",\"value\":\"aGk=\"}") == 0, "kv.put %s", last_req);
    reply(MOAT__STATUS_OK, "{\"deleted\":true}");
    bool deleted = false;
    CHECK(moat_kv_delete("k", &deleted) == NULL && deleted, "kv.delete");

    reply(MOAT__STATUS_OK, "{}");
    CHECK(moat_log_fields(MOAT_LEVEL_WARN, "hi", "name", "W\"o", "none", (const char *)NULL, (const char *)NULL) == NULL, "log");
    CHECK(strcmp(last_req, "{\"level\":\"warn\",\"message\":\"hi\",\"fields\":{\"name\":\"W\\\"o\",\"none\":null}}") == 0, "log %s", last_req);
    moat_log_info("plain");
    CHECK(strcmp(last_req, "{\"level\":\"info\",\"message\":\"plain\"}") == 0, "log %s", last_req);
    moat_log_error("odd", "a", "1", "dangling");
    CHECK(strcmp(last_req, "{\"level\":\"error\",\"message\":\"odd\",\"fields\":{\"a\":\"1\",\"dangling\":null}}") == 0, "log %s", last_req);

    moat_buf keys = MOAT_BUF_INIT;
    next_status = MOAT__STATUS_OK;
    reply_fn = list_page;
    crossings = 0;
    moat_error *le = moat_kv_list("", collect, &keys);
    reply_fn = NULL;
    CHECK(le == NULL && strcmp((char *)keys.data, "a;b\n;c;") == 0 && crossings == 2, "kv.list: %s %s", le ? le->message : "", (char *)keys.data);
    CHECK(strcmp(last_req, "{\"prefix\":\"\",\"after\":\"b\\n\"}") == 0, "second page request %s", last_req);
    moat_buf_free(&keys);
    moat_buf_free(&big);
    moat_buf_free(&v);
}

static void test_json_valid(void) {
    struct { const char *text; bool object, want; } cases[] = {
        {"{}", true, true},
        {" {\"a\": [1, -2.5e3, true, null, {\"b\": \"}\"}]} ", true, true},
        {"[1,2]", false, true},
        {"[1,2]", true, false},
        {"\"s\"", false, true},
        {"-0.5E+2", false, true},
        {"{}, \"model\": \"other\"", true, false}, /* members smuggled into the request */
        {"{\"a\":1}}", true, false},
        {"{\"a\":tru}", true, false},
        {"{\"a\":truex}", true, false},
        {"{\"a\":01}", true, false},
        {"{\"a\":1.}", true, false},
        {"{\"a\":-}", true, false},
        {"{\"a\":1e}", true, false},
        {"{\"a\":+1}", true, false},
        {"{\"a\":NaN}", true, false},
        {"{\"a\" 1}", true, false},
        {"", false, false},
        {"1 2", false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(moat_json_valid(cases[i].text, strlen(cases[i].text), cases[i].object) == cases[i].want, "valid(%s, %d)", cases[i].text, cases[i].object);
    CHECK(!moat_json_valid(NULL, 0, false), "NULL");
}

static void test_json_numbers(void) {
    const char *body = "{\"i\":9007199254740993,\"neg\":-5,\"f\":1.5,\"e\":1e3,\"s\":\"7\",\"big\":99999999999999999999,\"t\":true}";
    size_t n = strlen(body);
    int64_t v = 0;
    double d = 0;
    CHECK(moat_json_get_int(body, n, "i", &v) && v == 9007199254740993LL, "i = %lld", (long long)v);
    CHECK(moat_json_get_int(body, n, "neg", &v) && v == -5, "neg");
    CHECK(!moat_json_get_int(body, n, "f", &v) && !moat_json_get_int(body, n, "e", &v), "a fraction or an exponent is not an int");
    CHECK(!moat_json_get_int(body, n, "s", &v) && !moat_json_get_int(body, n, "t", &v) && !moat_json_get_int(body, n, "none", &v), "not numbers");
    CHECK(!moat_json_get_int(body, n, "big", &v), "an int past 64 bits is refused, not clamped");
    CHECK(moat_json_get_number(body, n, "f", &d) && d == 1.5, "f");
    CHECK(moat_json_get_number(body, n, "e", &d) && d == 1000, "e");
    CHECK(!moat_json_get_number(body, n, "s", &d), "s");
    moat_bytes raw;
    CHECK(moat_json_get_raw(body, n, "s", &raw) && raw.len == 3 && memcmp(raw.data, "\"7\"", 3) == 0, "raw");
}

static void test_json_writer(void) {
    moat_json_writer w = MOAT_JSON_WRITER_INIT;
    moat_jw_object(&w);
    moat_jw_key(&w, "t\"");
    moat_jw_string(&w, "a\\b\n\x01 \xc3\xbc");
    moat_jw_key(&w, "n");
    moat_jw_int(&w, -9007199254740991LL);
    moat_jw_key(&w, "f");
    moat_jw_number(&w, 0.5);
    moat_jw_key(&w, "g");
    moat_jw_number(&w, 0.1);
    moat_jw_key(&w, "h");
    moat_jw_number(&w, 1.0 / 3.0);
    moat_jw_key(&w, "l");
    moat_jw_array(&w);
    moat_jw_bool(&w, true);
    moat_jw_null(&w);
    moat_jw_array(&w);
    moat_jw_end(&w);
    moat_jw_raw(&w, " {\"x\":[1]} ");
    moat_jw_end(&w);
    moat_jw_key(&w, "o");
    moat_jw_object(&w);
    moat_jw_end(&w);
    moat_jw_end(&w);
    const char *want = "{\"t\\\"\":\"a\\\\b\\n\\u0001 \xc3\xbc\",\"n\":-9007199254740991,\"f\":0.5,\"g\":0.1,\"h\":0.3333333333333333,\"l\":[true,null,[], {\"x\":[1]} ],\"o\":{}}";
    CHECK(moat_jw_text(&w) && strcmp(moat_jw_text(&w), want) == 0, "wrote %s", moat_jw_text(&w) ? moat_jw_text(&w) : "NULL");
    CHECK(moat_json_valid(moat_jw_text(&w), strlen(moat_jw_text(&w)), true), "what it wrote is valid");
    moat_jw_free(&w);

    /* Misuse fails the writer: its text is NULL, never bad JSON. */
    moat_jw_array(&w);
    moat_jw_key(&w, "k"); /* a key in an array */
    CHECK(!moat_jw_text(&w), "key in an array");
    moat_jw_reset(&w);
    moat_jw_object(&w);
    moat_jw_int(&w, 1); /* a value without its key */
    moat_jw_end(&w);
    CHECK(!moat_jw_text(&w), "value without a key");
    moat_jw_reset(&w);
    moat_jw_object(&w);
    moat_jw_key(&w, "a");
    moat_jw_end(&w); /* a key without its value */
    CHECK(!moat_jw_text(&w), "key without a value");
    moat_jw_reset(&w);
    moat_jw_object(&w);
    CHECK(!moat_jw_text(&w), "unclosed");
    moat_jw_reset(&w);
    moat_jw_int(&w, 1);
    moat_jw_int(&w, 2);
    CHECK(!moat_jw_text(&w), "two top-level values");
    moat_jw_reset(&w);
    moat_jw_number(&w, 0.0 / 0.0);
    CHECK(!moat_jw_text(&w), "NaN");
    moat_jw_reset(&w);
    moat_jw_array(&w);
    moat_jw_raw(&w, "1, 2");
    moat_jw_end(&w);
    CHECK(!moat_jw_text(&w), "raw that is two values");
    moat_jw_reset(&w);
    for (int i = 0; i < 40; i++) moat_jw_array(&w);
    for (int i = 0; i < 40; i++) moat_jw_end(&w);
    CHECK(!moat_jw_text(&w), "nesting past 32");
    moat_jw_reset(&w);
    moat_jw_end(&w);
    CHECK(!moat_jw_text(&w), "end of nothing");
    moat_jw_free(&w);
    CHECK(!moat_jw_text(&w), "empty");
}

static void test_db_ops(void) {
    moat_buf id = MOAT_BUF_INIT;
    int64_t version = 0;
    reply(MOAT__STATUS_OK, "{\"id\":\"0123456789abcdef0123456789ab\",\"version\":1}");
    CHECK(moat_db_insert("notes", "{\"title\":\"x\"}", &id, &version) == NULL && version == 1 && strcmp((char *)id.data, "0123456789abcdef0123456789ab") == 0, "insert");
    CHECK(strcmp(last_op, "db.insert") == 0 && strcmp(last_req, "{\"model\":\"notes\",\"doc\":{\"title\":\"x\"}}") == 0, "insert request %s", last_req);

    /* JSON that would add members to the request never reaches the host. */
    crossings = 0;
    moat_error *e = moat_db_insert("notes", "{}, \"model\": \"secrets\"", &id, &version);
    CHECK(moat_error_is(e, MOAT_INVALID_ARGUMENT) && crossings == 0, "a smuggled member: %s", e ? e->message : "NULL");
    moat_db_change bad_set = {"{\"a\":1}, \"id\":\"x\"", NULL, 0};
    CHECK(moat_error_is(moat_db_update("notes", "i", &bad_set, NULL), MOAT_INVALID_ARGUMENT) && crossings == 0, "update with a smuggled member");
    CHECK(moat_error_is(moat_db_insert(NULL, "{}", &id, NULL), MOAT_INVALID_ARGUMENT) && crossings == 0, "NULL model");
    CHECK(moat_error_is(moat_db_insert("notes", "[1]", &id, NULL), MOAT_INVALID_ARGUMENT) && crossings == 0, "a document that is not an object");

    moat_db_where where = MOAT_DB_WHERE_INIT;
    moat_db_where_string(&where, "tags", "contains", "h\"o");
    moat_db_where_int(&where, "n", ">=", -3);
    moat_db_where_number(&where, "f", "<", 0.25);
    moat_db_where_bool(&where, "done", "=", false);
    moat_db_where_json(&where, "n", "in", "[1,2]");
    static const char *const order[] = {"-n", "title", NULL};
    moat_db_query_opts q = {&where, order, 2, "cursor"};
    moat_db_page page = MOAT_DB_PAGE_INIT;
    reply(MOAT__STATUS_OK,
          "{\"docs\":[{\"id\":\"a\",\"version\":2,\"doc\":{\"t\":\"x\"},\"owner\":\"ann\",\"created\":\"c\",\"updated\":\"u\"},"
          "{\"id\":\"b\",\"version\":1,\"doc\":{},\"owner\":\"bob\",\"created\":\"c2\",\"updated\":\"u2\"}],\"next\":\"n1\"}");
    CHECK(moat_db_query("notes", &q, &page) == NULL && page.len == 2 && strcmp((char *)page.next.data, "n1") == 0, "query");
    CHECK(strcmp(last_req, "{\"model\":\"notes\",\"where\":[[\"tags\",\"contains\",\"h\\\"o\"],[\"n\",\">=\",-3],[\"f\",\"<\",0.25],"
                           "[\"done\",\"=\",false],[\"n\",\"in\",[1,2]]],\"order\":[\"-n\",\"title\"],\"limit\":2,\"after\":\"cursor\"}") == 0,
          "query request %s", last_req);
    CHECK(page.len == 2 && strcmp((char *)page.docs[0].id.data, "a") == 0 && page.docs[0].version == 2 && strcmp((char *)page.docs[0].doc.data, "{\"t\":\"x\"}") == 0 &&
              strcmp((char *)page.docs[1].owner.data, "bob") == 0 && strcmp((char *)page.docs[1].updated.data, "u2") == 0,
          "the page's documents");
    reply(MOAT__STATUS_OK, "{\"docs\":[]}");
    CHECK(moat_db_query("notes", NULL, &page) == NULL && page.len == 0 && page.next.len == 0, "an empty last page replaces the last");
    CHECK(strcmp(last_req, "{\"model\":\"notes\"}") == 0, "bare query %s", last_req);
    reply(MOAT__STATUS_OK, "{\"docs\":[{\"id\":\"a\"}]}");
    CHECK(moat_error_is(moat_db_query("notes", NULL, &page), MOAT_INTERNAL), "a document without its version");
    moat_db_page_free(&page);

    moat_db_where bad = MOAT_DB_WHERE_INIT;
    moat_db_where_json(&bad, "n", "in", "[1], [\"x\"");
    moat_db_where_number(&bad, "f", "=", 1.0 / 0.0);
    int64_t count = -1;
    crossings = 0;
    CHECK(moat_error_is(moat_db_count("notes", &bad, &count), MOAT_INVALID_ARGUMENT) && crossings == 0 && bad.n == 0, "a bad condition is refused");
    moat_db_where_free(&bad);
    reply(MOAT__STATUS_OK, "{\"count\":7}");
    CHECK(moat_db_count("notes", &where, &count) == NULL && count == 7, "count");
    moat_db_where_free(&where);

    static const char *const unset[] = {"body", NULL};
    moat_db_change change = {"{\"done\":true}", unset, 3};
    reply(MOAT__STATUS_OK, "{\"version\":4}");
    CHECK(moat_db_update("notes", "a", &change, &version) == NULL && version == 4, "update");
    CHECK(strcmp(last_req, "{\"model\":\"notes\",\"id\":\"a\",\"set\":{\"done\":true},\"unset\":[\"body\"],\"version\":3}") == 0, "update request %s", last_req);
    reply(MOAT__STATUS_ERROR, "{\"code\":\"conflict\",\"message\":\"document a is at version 4, not 3\"}");
    e = moat_db_update("notes", "a", &change, &version);
    CHECK(moat_error_is(e, MOAT_CONFLICT) && strstr(e->message, "version 4"), "conflict keeps its code");

    moat_db_doc d = MOAT_DB_DOC_INIT;
    bool found = true;
    reply(MOAT__STATUS_OK, "{\"found\":false}");
    CHECK(moat_db_get("notes", "z", &d, &found) == NULL && !found, "get miss");
    reply(MOAT__STATUS_OK, "{\"found\":true,\"id\":\"a\",\"version\":4,\"doc\":{\"n\":1},\"owner\":\"ann\",\"created\":\"c\",\"updated\":\"u\"}");
    CHECK(moat_db_get("notes", "a", &d, &found) == NULL && found && d.version == 4 && strcmp((char *)d.doc.data, "{\"n\":1}") == 0, "get");
    bool deleted = false;
    reply(MOAT__STATUS_OK, "{\"deleted\":true}");
    CHECK(moat_db_delete("notes", "a", 4, &deleted) == NULL && deleted && strcmp(last_req, "{\"model\":\"notes\",\"id\":\"a\",\"version\":4}") == 0, "delete %s", last_req);
    moat_db_doc_free(&d);
    moat_buf_free(&id);
}

static void test_knowledge_and_task_ops(void) {
    bool replaced = true;
    reply(MOAT__STATUS_OK, "{\"replaced\":false}");
    CHECK(moat_knowledge_add("docs", "k1", "the \"text\"", "{\"lang\":\"en\"}", &replaced) == NULL && !replaced, "add");
    CHECK(strcmp(last_req, "{\"collection\":\"docs\",\"id\":\"k1\",\"text\":\"the \\\"text\\\"\",\"meta\":{\"lang\":\"en\"}}") == 0, "add request %s", last_req);
    crossings = 0;
    CHECK(moat_error_is(moat_knowledge_add("docs", "k1", "t", "{}, \"collection\":\"private\"", NULL), MOAT_INVALID_ARGUMENT) && crossings == 0, "smuggled meta");
    moat_knowledge_search_opts opts = {5, "{}, \"collection\":\"private\""};
    moat_knowledge_hits hits = MOAT_KNOWLEDGE_HITS_INIT;
    CHECK(moat_error_is(moat_knowledge_search("docs", "q", &opts, &hits), MOAT_INVALID_ARGUMENT) && crossings == 0, "smuggled filter");
    opts.filter = "{\"lang\":\"en\"}";
    reply(MOAT__STATUS_OK, "{\"hits\":[{\"id\":\"k1\",\"score\":1.25,\"snippet\":\"\\u2026the text\",\"meta\":{\"lang\":\"en\"}},{\"id\":\"k2\",\"score\":0.5,\"snippet\":\"s\",\"meta\":{}}]}");
    CHECK(moat_knowledge_search("docs", "text", &opts, &hits) == NULL && hits.len == 2 && hits.hits[0].score == 1.25 &&
              strcmp((char *)hits.hits[0].snippet.data, "\xe2\x80\xa6the text") == 0 && strcmp((char *)hits.hits[0].meta.data, "{\"lang\":\"en\"}") == 0 &&
              strcmp((char *)hits.hits[1].id.data, "k2") == 0,
          "search");
    CHECK(strcmp(last_req, "{\"collection\":\"docs\",\"query\":\"text\",\"limit\":5,\"filter\":{\"lang\":\"en\"}}") == 0, "search request %s", last_req);
    reply(MOAT__STATUS_OK, "{\"hits\":[{\"id\":\"k1\"}]}");
    CHECK(moat_error_is(moat_knowledge_search("docs", "text", NULL, &hits), MOAT_INTERNAL), "a hit without its score");
    moat_knowledge_hits_free(&hits);

    moat_buf id = MOAT_BUF_INIT, state = MOAT_BUF_INIT;
    bool existing = true, cancelled = false;
    moat_task_opts topts = {"90s", NULL, 2, "k\"1"};
    reply(MOAT__STATUS_OK, "{\"id\":\"t1\"}");
    CHECK(moat_task_enqueue("work", "hi", 2, &topts, &id, &existing) == NULL && !existing && strcmp((char *)id.data, "t1") == 0, "enqueue");
    CHECK(strcmp(last_req, "{\"action\":\"work\",\"input\":\"aGk=\",\"delay\":\"90s\",\"max_attempts\":2,\"key\":\"k\\\"1\"}") == 0, "enqueue request %s", last_req);
    moat_task_info info = MOAT_TASK_INFO_INIT;
    reply(MOAT__STATUS_OK, "{\"state\":\"done\",\"attempts\":1,\"max_attempts\":2,\"result\":\"aGk=\"}");
    CHECK(moat_task_status("t1", &info) == NULL && strcmp((char *)info.state.data, MOAT_TASK_DONE) == 0 && info.attempts == 1 && info.max_attempts == 2 &&
              info.result.len == 2 && memcmp(info.result.data, "hi", 2) == 0,
          "status");
    reply(MOAT__STATUS_OK, "{\"state\":\"failed\",\"attempts\":2,\"max_attempts\":2,\"error\":\"boom\",\"code\":\"guest_error\"}");
    CHECK(moat_task_status("t1", &info) == NULL && info.result.len == 0 && strcmp((char *)info.error.data, "boom") == 0 && strcmp((char *)info.code.data, "guest_error") == 0,
          "a failed task's status replaces the last");
    reply(MOAT__STATUS_ERROR, "{\"code\":\"not_found\",\"message\":\"no task x\"}");
    CHECK(moat_error_is(moat_task_status("x", &info), MOAT_NOT_FOUND), "not_found");
    reply(MOAT__STATUS_OK, "{\"cancelled\":true,\"state\":\"cancelled\"}");
    CHECK(moat_task_cancel("t1", &cancelled, &state) == NULL && cancelled && strcmp((char *)state.data, "cancelled") == 0, "cancel");
    moat_task_info_free(&info);
    moat_buf_free(&id);
    moat_buf_free(&state);
}

static void test_http_media_ai_ops(void) {
    /* http.fetch: bytes out as base64, bytes back; headers by any case. */
    moat_http_header hdrs[] = {{"X-Test", "s\"dk"}, {"Accept", "*/*"}};
    moat_http_request req = {"POST", "https://api.example.com/echo", hdrs, 2, "\0\xffhi", 4, 1500, 4096};
    moat_http_response resp = MOAT_HTTP_RESPONSE_INIT;
    reply(MOAT__STATUS_OK, "{\"status\":201,\"headers\":{\"body\":\"Zm9v\",\"content-type\":\"application/octet-stream\"},\"body\":\"Z290OgD/aGk=\",\"url\":\"https://api.example.com/echo?final\"}");
    CHECK(moat_http_fetch(&req, &resp) == NULL && resp.status == 201 && resp.body.len == 8 && memcmp(resp.body.data, "got:\0\xffhi", 8) == 0 &&
              strcmp((char *)resp.url.data, "https://api.example.com/echo?final") == 0,
          "fetch: status %d, %zu body bytes", resp.status, resp.body.len);
    CHECK(strcmp(last_op, "http.fetch") == 0 && strcmp(last_req, "{\"url\":\"https://api.example.com/echo\",\"method\":\"POST\",\"headers\":{\"X-Test\":\"s\\\"dk\",\"Accept\":\"*/*\"},"
                                                        "\"body\":\"AP9oaQ==\",\"timeout_ms\":1500,\"max_bytes\":4096}") == 0,
          "fetch request %s", last_req);
    moat_buf v = MOAT_BUF_INIT;
    CHECK(moat_http_response_header(&resp, "Content-Type", &v) && strcmp((char *)v.data, "application/octet-stream") == 0, "a header by another case");
    CHECK(!moat_http_response_header(&resp, "X-None", &v), "a header the response lacks");
    /* A reply larger than the first buffer (StatusTooSmall, then a fetch),
     * and an empty, status-only reply replacing it. */
    moat_buf big = MOAT_BUF_INIT, raw = MOAT_BUF_INIT;
    for (size_t i = 0; i < 60000; i++) moat_buf_putc(&raw, (char)(i * 7));
    moat_buf_puts(&big, "{\"status\":200,\"body\":\"");
    moat__b64encode(&big, raw.data, raw.len);
    moat_buf_puts(&big, "\"}");
    reply(MOAT__STATUS_OK, (const char *)big.data);
    moat_http_request get = {NULL, "https://api.example.com/big", NULL, 0, NULL, 0, 0, 0};
    CHECK(moat_http_fetch(&get, &resp) == NULL && resp.body.len == raw.len && memcmp(resp.body.data, raw.data, raw.len) == 0, "a large body");
    CHECK(strcmp(last_req, "{\"url\":\"https://api.example.com/big\"}") == 0, "a bare GET %s", last_req);
    reply(MOAT__STATUS_OK, "{\"status\":500}");
    CHECK(moat_http_fetch(&get, &resp) == NULL && resp.status == 500 && resp.body.len == 0 && resp.url.len == 0 && !moat_http_response_header(&resp, "content-type", &v),
          "a 500 with nothing else replaces the last response");
    reply(MOAT__STATUS_ERROR, "{\"code\":\"denied\",\"message\":\"no http grant covers https://api.example.com/private\"}");
    CHECK(moat_error_is(moat_http_fetch(&get, &resp), MOAT_DENIED), "denied keeps its code");
    reply(MOAT__STATUS_OK, "{\"status\":200,\"body\":\"not base64!\"}");
    CHECK(moat_error_is(moat_http_fetch(&get, &resp), MOAT_INTERNAL), "a body that is not base64");
    crossings = 0;
    moat_http_header bad_hdr[] = {{"X", NULL}};
    moat_http_request bad = {NULL, "https://x/", bad_hdr, 1, NULL, 0, 0, 0};
    CHECK(moat_error_is(moat_http_fetch(&bad, &resp), MOAT_INVALID_ARGUMENT) && crossings == 0, "a NULL header value");
    bad.headers_len = 0;
    bad.body_len = 3;
    CHECK(moat_error_is(moat_http_fetch(&bad, &resp), MOAT_INVALID_ARGUMENT) && crossings == 0, "a NULL body with a length");
    moat_http_response_free(&resp);
    moat_buf_free(&big);
    moat_buf_free(&raw);

    /* media */
    moat_media_item item = MOAT_MEDIA_ITEM_INIT;
    const char *info = "{\"id\":\"ab12\",\"type\":\"image/png\",\"size\":3,\"width\":64,\"height\":48}";
    reply(MOAT__STATUS_OK, info);
    CHECK(moat_media_put("\x01\x02\xff", 3, "image/png", &item) == NULL && strcmp((char *)item.id.data, "ab12") == 0 && strcmp((char *)item.type.data, "image/png") == 0 &&
              item.size == 3 && item.width == 64 && item.height == 48,
          "put");
    CHECK(strcmp(last_req, "{\"data\":\"AQL/\",\"type\":\"image/png\"}") == 0, "put request %s", last_req);
    CHECK(moat_media_put(NULL, 0, NULL, NULL) == NULL && strcmp(last_req, "{\"data\":\"\"}") == 0, "empty put %s", last_req);
    CHECK(moat_media_fetch("https://img.example.com/a.png", &item) == NULL && strcmp(last_req, "{\"url\":\"https://img.example.com/a.png\"}") == 0, "fetch %s", last_req);
    CHECK(moat_media_info("ab12", &item) == NULL && strcmp(last_op, "media.info") == 0 && strcmp(last_req, "{\"id\":\"ab12\"}") == 0, "info %s", last_req);
    reply(MOAT__STATUS_OK, "{\"id\":\"cd34\",\"type\":\"application/pdf\",\"size\":9}");
    CHECK(moat_media_thumbnail("ab12", 16, 12, MOAT_FIT_COVER, &item) == NULL && strcmp((char *)item.id.data, "cd34") == 0 && item.width == 0 && item.height == 0,
          "thumbnail (an item without width and height)");
    CHECK(strcmp(last_req, "{\"id\":\"ab12\",\"width\":16,\"height\":12,\"fit\":\"cover\"}") == 0, "thumbnail request %s", last_req);
    moat_buf data = MOAT_BUF_INIT;
    reply(MOAT__STATUS_OK, "{\"id\":\"ab12\",\"type\":\"image/png\",\"size\":3,\"width\":64,\"height\":48,\"data\":\"AQL/\"}");
    CHECK(moat_media_get("ab12", &item, &data) == NULL && data.len == 3 && memcmp(data.data, "\x01\x02\xff", 3) == 0 && item.width == 64, "get");
    reply(MOAT__STATUS_OK, "{\"type\":\"image/png\",\"size\":3}");
    CHECK(moat_error_is(moat_media_info("ab12", &item), MOAT_INTERNAL), "an item without its id");
    reply(MOAT__STATUS_ERROR, "{\"code\":\"not_found\",\"message\":\"no media item gone\"}");
    CHECK(moat_error_is(moat_media_get("gone", NULL, &data), MOAT_NOT_FOUND), "not_found keeps its code");
    moat_media_item_free(&item);
    moat_buf_free(&data);

    /* ai */
    moat_ai_message msgs[] = {{MOAT_ROLE_SYSTEM, "Be brief."}, {MOAT_ROLE_USER, "hi \"there\""}};
    double temp = 0.25, zero = 0;
    moat_ai_complete_opts opts = {64, &temp, NULL};
    moat_ai_completion c = MOAT_AI_COMPLETION_INIT;
    reply(MOAT__STATUS_OK, "{\"text\":\"hello \\u00fc\",\"usage\":{\"input_tokens\":12,\"output_tokens\":3},\"model_call_id\":\"mc-1\"}");
    CHECK(moat_ai_complete("small-chat", msgs, 2, &opts, &c) == NULL && strcmp((char *)c.text.data, "hello \xc3\xbc") == 0 && c.input_tokens == 12 &&
              c.output_tokens == 3 && strcmp((char *)c.model_call_id.data, "mc-1") == 0,
          "complete");
    CHECK(strcmp(last_req, "{\"model\":\"small-chat\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\"}],"
                           "\"max_tokens\":64,\"temperature\":0.25}") == 0,
          "complete request %s", last_req);
    moat_ai_complete_opts schema = {0, &zero, "{\"type\":\"object\"}"};
    CHECK(moat_ai_complete("small-chat", NULL, 0, &schema, &c) == NULL &&
              strcmp(last_req, "{\"model\":\"small-chat\",\"messages\":[],\"temperature\":0,\"json_schema\":{\"type\":\"object\"}}") == 0,
          "a zero temperature is sent, and the schema: %s", last_req);
    crossings = 0;
    moat_ai_complete_opts smuggled = {0, NULL, "{}, \"model\":\"big-chat\""};
    CHECK(moat_error_is(moat_ai_complete("small-chat", msgs, 2, &smuggled, &c), MOAT_INVALID_ARGUMENT) && crossings == 0, "a smuggled schema");
    double nan = 0.0 / 0.0;
    moat_ai_complete_opts bad_temp = {0, &nan, NULL};
    CHECK(moat_error_is(moat_ai_complete("small-chat", msgs, 2, &bad_temp, &c), MOAT_INVALID_ARGUMENT) && crossings == 0, "a NaN temperature");
    moat_ai_message null_msg[] = {{MOAT_ROLE_USER, NULL}};
    CHECK(moat_error_is(moat_ai_complete("small-chat", null_msg, 1, NULL, &c), MOAT_INVALID_ARGUMENT) && crossings == 0, "a NULL content");
    reply(MOAT__STATUS_ERROR, "{\"code\":\"denied\",\"message\":\"the token budget of organization acme for today is spent\"}");
    CHECK(moat_error_is(moat_ai_complete("small-chat", msgs, 2, NULL, &c), MOAT_DENIED), "over budget keeps its code");
    reply(MOAT__STATUS_OK, "{\"text\":\"x\",\"usage\":{}}");
    CHECK(moat_error_is(moat_ai_complete("small-chat", msgs, 2, NULL, &c), MOAT_INTERNAL), "a reply without its model call id");
    moat_ai_completion_free(&c);

    static const char *const input[] = {"a", "b \"c\"", NULL};
    moat_ai_embedding emb = MOAT_AI_EMBEDDING_INIT;
    reply(MOAT__STATUS_OK, "{\"vectors\":[[0.5,-0.25,1e-3],[1,2,3]],\"usage\":{\"input_tokens\":4,\"output_tokens\":0},\"model_call_id\":\"mc-2\"}");
    CHECK(moat_ai_embed("small-embed", input, &emb) == NULL && emb.len == 2 && emb.dim == 3 && emb.vectors[0] == 0.5f && emb.vectors[1] == -0.25f &&
              emb.vectors[2] == 1e-3f && emb.vectors[3] == 1 && emb.vectors[5] == 3 && emb.input_tokens == 4 && strcmp((char *)emb.model_call_id.data, "mc-2") == 0,
          "embed");
    CHECK(strcmp(last_req, "{\"model\":\"small-embed\",\"input\":[\"a\",\"b \\\"c\\\"\"]}") == 0, "embed request %s", last_req);
    reply(MOAT__STATUS_OK, "{\"vectors\":[[0.5,1],[1]],\"model_call_id\":\"m\"}");
    CHECK(moat_error_is(moat_ai_embed("small-embed", input, &emb), MOAT_INTERNAL), "vectors of different lengths");
    reply(MOAT__STATUS_OK, "{\"vectors\":[[0.5]],\"model_call_id\":\"m\"}");
    CHECK(moat_error_is(moat_ai_embed("small-embed", input, &emb), MOAT_INTERNAL), "fewer vectors than inputs");
    reply(MOAT__STATUS_OK, "{\"vectors\":[[\"x\"],[1]],\"model_call_id\":\"m\"}");
    CHECK(moat_error_is(moat_ai_embed("small-embed", input, &emb), MOAT_INTERNAL), "a vector of strings");
    /* Many vectors: the float array grows past its first allocation. */
    moat_buf many = MOAT_BUF_INIT;
    static const char *inputs200[201];
    moat_buf_puts(&many, "{\"vectors\":[");
    for (int i = 0; i < 200; i++) {
        inputs200[i] = "x";
        moat_buf_printf(&many, "%s[%d,%d,%d]", i ? "," : "", i, -i, i * 2);
    }
    moat_buf_puts(&many, "],\"model_call_id\":\"m3\"}");
    reply(MOAT__STATUS_OK, (const char *)many.data);
    CHECK(moat_ai_embed("small-embed", inputs200, &emb) == NULL && emb.len == 200 && emb.dim == 3 && emb.vectors[199 * 3 + 2] == 398 && emb.vectors[150 * 3 + 1] == -150,
          "200 vectors");
    moat_buf_free(&many);
    moat_ai_embedding_free(&emb);
    moat_buf_free(&v);
}

static void test_caller(void) {
    moat_principal p = MOAT_PRINCIPAL_INIT;
    reply(MOAT__STATUS_OK, "{\"user\":\"ann\",\"org\":\"acme\",\"roles\":[\"admin\",\"vi\\\"ewer\"],\"correlation_id\":\"c-1\"}");
    CHECK(moat_caller(&p) == NULL, "caller");
    CHECK(strcmp(last_op, "moat.caller") == 0 && strcmp(last_req, "{}") == 0, "request %s %s", last_op, last_req);
    CHECK(strcmp((char *)p.user.data, "ann") == 0 && strcmp((char *)p.org.data, "acme") == 0 && strcmp((char *)p.correlation_id.data, "c-1") == 0,
          "principal %s %s %s", (char *)p.user.data, (char *)p.org.data, (char *)p.correlation_id.data);
    CHECK(p.nroles == 2 && moat_principal_has_role(&p, "admin") && moat_principal_has_role(&p, "vi\"ewer") && !moat_principal_has_role(&p, "adm"),
          "roles %zu", p.nroles);
    /* Reused: the second reply replaces the first, roles included. */
    reply(MOAT__STATUS_OK, "{\"user\":\"bob\",\"org\":\"acme\",\"roles\":[],\"correlation_id\":\"c-2\"}");
    CHECK(moat_caller(&p) == NULL && strcmp((char *)p.user.data, "bob") == 0 && p.nroles == 0 && !moat_principal_has_role(&p, "admin"), "reused");
    reply(MOAT__STATUS_OK, "{\"org\":\"acme\"}");
    CHECK(moat_error_is(moat_caller(&p), MOAT_INTERNAL), "a reply without a user");
    reply(MOAT__STATUS_OK, "{\"user\":\"a\",\"org\":\"b\",\"roles\":[1]}");
    CHECK(moat_error_is(moat_caller(&p), MOAT_INTERNAL), "a role that is not a string");
    moat_principal_free(&p);
}

static void test_route(void) {
    const char *in = "{\"moat\":\"http.request\",\"route\":\"GET /items/{id}\",\"auth\":\"public\",\"method\":\"GET\",\"path\":\"/items/7\","
                     "\"params\":{\"id\":\"7\"},\"query\":{\"q\":[\"a\",\"b\"]},\"headers\":{\"accept\":\"text/html\"},\"body_base64\":\"AP8=\"}";
    moat_bytes input = {(const uint8_t *)in, strlen(in)};
    moat_buf v = MOAT_BUF_INIT;
    CHECK(moat_route_is_request(input), "a route's request");
    CHECK(moat_route_param(input, "id", &v) && strcmp((char *)v.data, "7") == 0, "param id");
    CHECK(!moat_route_param(input, "none", &v), "no param none");
    CHECK(moat_route_query(input, "q", &v) && strcmp((char *)v.data, "a") == 0, "query q");
    CHECK(!moat_route_query(input, "none", &v), "no query none");
    CHECK(moat_route_header(input, "accept", &v) && strcmp((char *)v.data, "text/html") == 0, "header accept");
    CHECK(moat_route_field(input, "method", &v) && strcmp((char *)v.data, "GET") == 0, "method");
    CHECK(moat_route_body(input, &v) && v.len == 2 && memcmp(v.data, "\0\xff", 2) == 0, "binary body");
    const char *text = "{\"moat\":\"http.request\",\"body\":\"hi\"}";
    CHECK(moat_route_body((moat_bytes){(const uint8_t *)text, strlen(text)}, &v) && strcmp((char *)v.data, "hi") == 0, "text body");
    const char *plain = "plain";
    CHECK(!moat_route_is_request((moat_bytes){(const uint8_t *)plain, 5}), "plain input is not a request");
    const char *hdrs[] = {"Location", "items/7", NULL};
    moat_route_response(&v, 201, "application/json", hdrs, "{\"id\":\"7\"}", 10);
    CHECK(strcmp((char *)v.data, "{\"moat\":\"http.response\",\"status\":201,\"content_type\":\"application/json\",\"headers\":{\"Location\":\"items/7\"},\"body\":\"{\\\"id\\\":\\\"7\\\"}\"}") == 0,
          "response %s", (char *)v.data);
    moat_route_response(&v, 0, NULL, NULL, "\x89\xff", 2);
    CHECK(strcmp((char *)v.data, "{\"moat\":\"http.response\",\"body_base64\":\"if8=\"}") == 0, "binary response %s", (char *)v.data);
    moat_buf_free(&v);
}

int main(void) {
    test_json_strings();
    test_caller();
    test_json_find();
    test_base64();
    test_ops();
    test_json_valid();
    test_json_numbers();
    test_json_writer();
    test_db_ops();
    test_knowledge_and_task_ops();
    test_http_media_ai_ops();
    test_route();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    puts("ok");
    return 0;
}
