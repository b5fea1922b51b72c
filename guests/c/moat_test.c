/*
 * Unit tests of moat.h's parts that need no WebAssembly: JSON, base64 and
 * the op wrappers against a fake host. Built natively (the exports and the
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

int main(void) {
    test_json_strings();
    test_json_find();
    test_base64();
    test_ops();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    puts("ok");
    return 0;
}
