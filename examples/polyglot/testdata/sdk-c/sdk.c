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

static const moat_action actions[] = {
    {"kv", kv}, {"log", log_action}, {"config", config}, {"call", call}, {"fail", fail}, {"echo", echo}, {"trap", trap},
};

MOAT_ACTIONS(actions)
