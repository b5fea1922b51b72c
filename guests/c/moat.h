/*
 * moat.h — the moat guest SDK for C and C++ (header-only, ABI version 1).
 *
 * A plugin is a WebAssembly reactor that declares named actions; the moat
 * host invokes them with an input and returns their output. Inside an
 * action the plugin reaches the host through ops: its configuration
 * (moat_config_get), the structured log (moat_log_info...), a key-value
 * store (moat_kv_get/put/delete/list) and, for any other op, moat_call.
 *
 *     #include "moat.h"
 *
 *     static moat_error *greet(moat_bytes input, moat_buf *out) {
 *         moat_log_info("greeting", "name", (const char *)input.data);
 *         moat_buf_printf(out, "Hello, %s!", (const char *)input.data);
 *         return NULL;                      // success: out is the output
 *     }
 *
 *     static const moat_action actions[] = {{"greet", greet}};
 *     MOAT_ACTIONS(actions)
 *
 * Build (Debian clang-19 and wasi-libc):
 *
 *     clang-19 --target=wasm32-wasi -mexec-model=reactor -O2 -Wl,--strip-all \
 *         -I guests/c -o plugin.wasm plugin.c
 *
 * -mexec-model=reactor makes a module without _start: its _initialize
 * (which runs C constructors) is called once per instance, and the host
 * then calls the four exports MOAT_ACTIONS defines. The transport is the
 * one import moat.call (see abi/abi.go in the moat repository); requests
 * and replies are JSON, built and read by the small helpers at the end of
 * this file.
 *
 * Conventions
 *
 *   - Every op returns a moat_error *: NULL on success, otherwise a pointer
 *     to the SDK's one error record, valid until the next failing op or
 *     moat_errorf. A handler fails its invocation by returning such a
 *     pointer; the code ("not_found", "denied", ...) reaches the host's
 *     caller unchanged, so `return err;` propagates an op's failure.
 *   - Values come back in a moat_buf the caller owns (zero-initialize it,
 *     release it with moat_buf_free). The SDK keeps a NUL after the last
 *     byte, so a text value is also a C string.
 *   - The input is valid only during the call (its buffer is reused), and
 *     is NUL-terminated too. The output buffer belongs to the SDK.
 *   - Instances are reused between invocations (pooled isolation), one call
 *     at a time: static variables persist. Ops work only inside an action;
 *     calling one from a constructor is a guest fault.
 *   - Running out of memory calls abort(): the host reports memory_limit.
 *
 * The helpers are static: include this header in the one file that holds
 * MOAT_ACTIONS (or in several; each gets its own copy, but the error
 * record and buffers of the file with MOAT_ACTIONS are the ones the host
 * sees).
 */
#ifndef MOAT_H
#define MOAT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header implements; the host refuses other versions. */
#define MOAT_ABI_VERSION 1

/* Error codes (abi/errors.go). They cross the wire as strings. */
#define MOAT_INVALID_ARGUMENT "invalid_argument"
#define MOAT_NOT_FOUND "not_found"
#define MOAT_UNKNOWN_OP "unknown_op"
#define MOAT_DENIED "denied"
#define MOAT_TOO_LARGE "too_large"
#define MOAT_UNAVAILABLE "unavailable"
#define MOAT_INTERNAL "internal"
#define MOAT_GUEST_ERROR "guest_error"
#define MOAT_CONFIRMATION_REQUIRED "confirmation_required"

/* Log levels accepted by log.write. */
#define MOAT_LEVEL_DEBUG "debug"
#define MOAT_LEVEL_INFO "info"
#define MOAT_LEVEL_WARN "warn"
#define MOAT_LEVEL_ERROR "error"

/* Key-value limits the host enforces (abi/ops.go). */
#define MOAT_KV_MAX_KEY 512
#define MOAT_KV_MAX_VALUE (1 << 20)
#define MOAT_KV_LIST_LIMIT 1000

/* A read-only run of bytes: an action's input. data[len] is 0. */
typedef struct {
    const uint8_t *data;
    size_t len;
} moat_bytes;

/* A growable byte buffer. The zero value is an empty buffer. After any
 * moat_buf_* call that succeeds, data[len] is 0 (data may be NULL only
 * while cap is 0). */
typedef struct {
    uint8_t *data;
    size_t len, cap;
} moat_buf;

/* An empty moat_buf, for initializers (C can also write {0}). */
#define MOAT_BUF_INIT {NULL, 0, 0}

/* A failure: an abi code and a message. */
typedef struct {
    char code[40];
    char message[1024];
} moat_error;

/* An action's handler: read input, append the output to out, return NULL;
 * or return an error to fail the invocation (out is then discarded). */
typedef moat_error *(*moat_handler)(moat_bytes input, moat_buf *out);

/* One entry of the action table given to MOAT_ACTIONS. */
typedef struct {
    const char *name;
    moat_handler fn;
} moat_action;

/* ---- buffers ---------------------------------------------------------- */

/* moat_buf_reserve makes room for n more bytes (plus the NUL). */
static inline void moat_buf_reserve(moat_buf *b, size_t n) {
    if (n >= SIZE_MAX - b->len - 1) abort();
    size_t need = b->len + n + 1;
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = (uint8_t *)realloc(b->data, cap);
    if (!p) abort();
    b->data = p;
    b->cap = cap;
    b->data[b->len] = 0;
}

static inline void moat_buf_append(moat_buf *b, const void *p, size_t n) {
    moat_buf_reserve(b, n);
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

static inline void moat_buf_puts(moat_buf *b, const char *s) { moat_buf_append(b, s, strlen(s)); }

static inline void moat_buf_putc(moat_buf *b, char c) { moat_buf_append(b, &c, 1); }

static inline void moat_buf_vprintf(moat_buf *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return;
    moat_buf_reserve(b, (size_t)n);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

__attribute__((format(printf, 2, 3))) static inline void moat_buf_printf(moat_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    moat_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

/* moat_buf_reset empties b and keeps its memory. */
static inline void moat_buf_reset(moat_buf *b) {
    b->len = 0;
    moat_buf_reserve(b, 0);
    b->data[0] = 0;
}

static inline void moat_buf_free(moat_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- errors ----------------------------------------------------------- */

/* The one error record. Ops and moat_errorf fill it and return it. */
static moat_error moat__err;

/* moat_errorf fills the error record with code (one of the MOAT_* codes)
 * and a printf-style message, and returns it, for `return moat_errorf(...)`
 * in a handler. A message longer than the record is cut. */
__attribute__((format(printf, 2, 3))) static inline moat_error *moat_errorf(const char *code, const char *fmt, ...) {
    snprintf(moat__err.code, sizeof moat__err.code, "%s", code && *code ? code : MOAT_GUEST_ERROR);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(moat__err.message, sizeof moat__err.message, fmt, ap);
    va_end(ap);
    return &moat__err;
}

/* moat_error_is reports whether err is a failure with the given code. */
static inline bool moat_error_is(const moat_error *err, const char *code) {
    return err && strcmp(err->code, code) == 0;
}

/* ---- JSON ------------------------------------------------------------- */
/* Just enough JSON for the op payloads: writing strings, and finding a
 * member of a top-level object in a reply. Exposed for moat_call users. */

/* moat_json_string appends s (n bytes) to b as a JSON string literal. */
static inline void moat_json_string(moat_buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    moat_buf_reserve(b, n + 2);
    moat_buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *short_esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
        if (short_esc) {
            moat_buf_append(b, short_esc, 2);
        } else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            moat_buf_append(b, e, 6);
        } else {
            moat_buf_putc(b, (char)c);
        }
    }
    moat_buf_putc(b, '"');
}

/* A position in a JSON text. */
typedef struct {
    const char *p, *end;
} moat_json;

static inline void moat__ws(moat_json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static inline int moat__hex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
}

static inline void moat__utf8(moat_buf *b, uint32_t r) {
    char u[4];
    size_t n;
    if (r < 0x80) { u[0] = (char)r; n = 1; }
    else if (r < 0x800) { u[0] = (char)(0xC0 | r >> 6); u[1] = (char)(0x80 | (r & 0x3F)); n = 2; }
    else if (r < 0x10000) { u[0] = (char)(0xE0 | r >> 12); u[1] = (char)(0x80 | (r >> 6 & 0x3F)); u[2] = (char)(0x80 | (r & 0x3F)); n = 3; }
    else { u[0] = (char)(0xF0 | r >> 18); u[1] = (char)(0x80 | (r >> 12 & 0x3F)); u[2] = (char)(0x80 | (r >> 6 & 0x3F)); u[3] = (char)(0x80 | (r & 0x3F)); n = 4; }
    moat_buf_append(b, u, n);
}

/* moat_json_read_string reads the string literal at j into out (unescaped,
 * UTF-8), or skips it when out is NULL. It returns false on malformed
 * input. */
static inline bool moat_json_read_string(moat_json *j, moat_buf *out) {
    moat__ws(j);
    if (j->p >= j->end || *j->p != '"') return false;
    j->p++;
    while (j->p < j->end) {
        const char *run = j->p;
        while (j->p < j->end && *j->p != '"' && *j->p != '\\' && (unsigned char)*j->p >= 0x20) j->p++;
        if (out) moat_buf_append(out, run, (size_t)(j->p - run));
        if (j->p >= j->end || (unsigned char)*j->p < 0x20) return false;
        if (*j->p == '"') {
            j->p++;
            return true;
        }
        if (++j->p >= j->end) return false; /* the backslash */
        static const char esc[] = "\"\\/bfnrt", repl[] = "\"\\/\b\f\n\r\t";
        char c = *j->p++;
        const char *plain = c ? strchr(esc, c) : NULL;
        if (plain) {
            if (out) moat_buf_putc(out, repl[plain - esc]);
            continue;
        }
        if (c != 'u' || j->end - j->p < 4) return false;
        int r = moat__hex4(j->p);
        if (r < 0) return false;
        j->p += 4;
        if (r >= 0xD800 && r < 0xDC00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
            int lo = moat__hex4(j->p + 2);
            if (lo >= 0xDC00 && lo < 0xE000) {
                r = 0x10000 + ((r - 0xD800) << 10) + (lo - 0xDC00);
                j->p += 6;
            }
        }
        if (r >= 0xD800 && r < 0xE000) r = 0xFFFD; /* a lone surrogate, as Go decodes it */
        if (out) moat__utf8(out, (uint32_t)r);
    }
    return false;
}

/* moat_json_skip steps over one value of any type. Nesting is bounded so
 * a hostile reply cannot exhaust the stack. */
static inline bool moat__skip(moat_json *j, int depth) {
    moat__ws(j);
    if (j->p >= j->end || depth > 64) return false;
    char c = *j->p;
    if (c == '"') return moat_json_read_string(j, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        moat__ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return true;
        }
        for (;;) {
            if (c == '{') {
                if (!moat_json_read_string(j, NULL)) return false;
                moat__ws(j);
                if (j->p >= j->end || *j->p++ != ':') return false;
            }
            if (!moat__skip(j, depth + 1)) return false;
            moat__ws(j);
            if (j->p >= j->end) return false;
            if (*j->p == ',') { j->p++; continue; }
            if (*j->p++ == close) return true;
            return false;
        }
    }
    /* a number, true, false or null */
    const char *start = j->p;
    while (j->p < j->end && strchr("0123456789+-.eEtruefalsn", *j->p) && *j->p) j->p++;
    return j->p > start;
}

static inline bool moat_json_skip(moat_json *j) { return moat__skip(j, 0); }

/* moat_json_find positions *v at the value of the member key of the
 * object in text[0:n]. It returns false when the text is not an object or
 * has no such member. */
static inline bool moat_json_find(const char *text, size_t n, const char *key, moat_json *v) {
    moat_json j = {text, text + n};
    moat_buf name = MOAT_BUF_INIT;
    bool found = false;
    moat__ws(&j);
    if (j.p >= j.end || *j.p++ != '{') goto done;
    moat__ws(&j);
    if (j.p < j.end && *j.p == '}') goto done;
    for (;;) {
        moat_buf_reset(&name);
        if (!moat_json_read_string(&j, &name)) goto done;
        moat__ws(&j);
        if (j.p >= j.end || *j.p++ != ':') goto done;
        moat__ws(&j);
        if (name.data && strlen((char *)name.data) == name.len && strcmp((char *)name.data, key) == 0) {
            *v = j;
            found = true;
            goto done;
        }
        if (!moat_json_skip(&j)) goto done;
        moat__ws(&j);
        if (j.p >= j.end || *j.p++ != ',') goto done;
    }
done:
    moat_buf_free(&name);
    return found;
}

/* moat_json_get_string reads the string member key into out (after
 * resetting it). It returns false if the member is missing or not a string. */
static inline bool moat_json_get_string(const char *text, size_t n, const char *key, moat_buf *out) {
    moat_json v;
    moat_buf_reset(out);
    return moat_json_find(text, n, key, &v) && moat_json_read_string(&v, out);
}

/* moat_json_get_bool returns the boolean member key, or false. */
static inline bool moat_json_get_bool(const char *text, size_t n, const char *key) {
    moat_json v;
    return moat_json_find(text, n, key, &v) && v.end - v.p >= 4 && memcmp(v.p, "true", 4) == 0;
}

/* ---- base64 (kv values are bytes, base64 in JSON) ---------------------- */

static inline void moat__b64encode(moat_buf *b, const uint8_t *p, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    moat_buf_reserve(b, (n + 2) / 3 * 4);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {tab[v >> 18], tab[v >> 12 & 63], i + 1 < n ? tab[v >> 6 & 63] : '=', i + 2 < n ? tab[v & 63] : '='};
        moat_buf_append(b, q, 4);
    }
}

/* moat__b64decode decodes standard padded base64 from in into out. */
static inline bool moat__b64decode(const uint8_t *in, size_t n, moat_buf *out) {
    if (n % 4) return false;
    moat_buf_reserve(out, n / 4 * 3);
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            uint8_t c = in[i + k];
            int d;
            if (c >= 'A' && c <= 'Z') d = c - 'A';
            else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
            else if (c >= '0' && c <= '9') d = c - '0' + 52;
            else if (c == '+') d = 62;
            else if (c == '/') d = 63;
            else if (c == '=' && i + 4 == n && k >= 2) { d = 0; pad++; }
            else return false;
            if (pad && c != '=') return false;
            v = v << 6 | (uint32_t)d;
        }
        uint8_t q[3] = {(uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
        moat_buf_append(out, q, (size_t)(3 - pad));
    }
    return true;
}

/* ---- the transport ---------------------------------------------------- */

__attribute__((import_module("moat"), import_name("call"))) uint64_t moat__host_call(
    const char *op, uint32_t op_len, const void *req, uint32_t req_len, void *resp, uint32_t resp_cap);

#define MOAT__STATUS_OK 0u
#define MOAT__STATUS_ERROR 1u
#define MOAT__STATUS_TOO_SMALL 2u

/* The first response buffer: large enough that almost every reply arrives
 * in one crossing; it grows to the largest reply seen. */
#define MOAT__INITIAL_RESP (16u << 10)
/* Buffers that grew past this are released when an invocation ends (a
 * linear memory never shrinks, but malloc can reuse the space). */
#define MOAT__MAX_RETAINED (1u << 20)

static moat_buf moat__resp;

/* moat__fill_error decodes an error reply into the error record. */
static inline moat_error *moat__fill_error(const char *op, const uint8_t *body, size_t n) {
    moat_buf code = MOAT_BUF_INIT, msg = MOAT_BUF_INIT;
    moat_error *e;
    if (moat_json_get_string((const char *)body, n, "code", &code) && code.len) {
        moat_json_get_string((const char *)body, n, "message", &msg);
        e = moat_errorf((char *)code.data, "%s", msg.data ? (char *)msg.data : "");
    } else {
        e = moat_errorf(MOAT_INTERNAL, "op %s failed with an undecodable error reply: %.*s", op, (int)n, (const char *)body);
    }
    moat_buf_free(&code);
    moat_buf_free(&msg);
    return e;
}

/* moat_call runs an op by name with a JSON request (req, req_len bytes;
 * NULL means "{}") and leaves the JSON reply in *reply, which points into
 * a buffer the SDK reuses: it is valid until the next op. It is the door
 * to any op this header does not wrap. */
static inline moat_error *moat_call(const char *op, const char *req, size_t req_len, moat_bytes *reply) {
    if (!op || !*op) return moat_errorf(MOAT_INVALID_ARGUMENT, "op name is empty");
    if (!req) {
        req = "{}";
        req_len = 2;
    }
    if (moat__resp.cap == 0) moat_buf_reserve(&moat__resp, MOAT__INITIAL_RESP - 1);
    uint32_t cap = (uint32_t)moat__resp.cap - 1; /* keep room for the NUL */
    uint64_t r = moat__host_call(op, (uint32_t)strlen(op), req, (uint32_t)req_len, moat__resp.data, cap);
    uint32_t status = (uint32_t)(r >> 32), n = (uint32_t)r;
    if (status == MOAT__STATUS_TOO_SMALL) {
        /* The host kept the reply; fetch it with an empty op name into a
         * buffer of the size it asked for. */
        if (n <= cap) return moat_errorf(MOAT_INTERNAL, "op %s: host asked for a %u-byte buffer but %u bytes were offered", op, n, cap);
        moat__resp.len = 0;
        moat_buf_reserve(&moat__resp, n);
        cap = (uint32_t)moat__resp.cap - 1;
        r = moat__host_call("", 0, NULL, 0, moat__resp.data, cap);
        status = (uint32_t)(r >> 32);
        n = (uint32_t)r;
        if (status == MOAT__STATUS_TOO_SMALL) return moat_errorf(MOAT_INTERNAL, "op %s: host asked for a larger buffer twice", op);
    }
    if (n > cap) return moat_errorf(MOAT_INTERNAL, "op %s: host reported a %u-byte reply in a %u-byte buffer", op, n, cap);
    moat__resp.len = n;
    moat__resp.data[n] = 0;
    switch (status) {
    case MOAT__STATUS_OK:
        if (reply) {
            reply->data = moat__resp.data;
            reply->len = n;
        }
        return NULL;
    case MOAT__STATUS_ERROR:
        return moat__fill_error(op, moat__resp.data, n);
    default:
        return moat_errorf(MOAT_INTERNAL, "op %s: host returned unknown status %u", op, status);
    }
}

/* moat__call_built sends a request built in req and frees it. */
static inline moat_error *moat__call_built(const char *op, moat_buf *req, moat_bytes *reply) {
    moat_error *e = moat_call(op, (const char *)req->data, req->len, reply);
    moat_buf_free(req);
    return e;
}

/* moat__key_request builds {"key":KEY} (plus more members from the caller). */
static inline void moat__key_request(moat_buf *req, const char *key) {
    moat_buf_puts(req, "{\"key\":");
    moat_json_string(req, key, strlen(key));
}

/* ---- ops -------------------------------------------------------------- */

/* moat_config_get reads key of the module's configuration into value (as a
 * C string). *found is false when the configuration has no such key; the
 * error is non-NULL only when the op itself fails. */
static inline moat_error *moat_config_get(const char *key, moat_buf *value, bool *found) {
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__key_request(&req, key);
    moat_buf_putc(&req, '}');
    moat_error *e = moat__call_built("config.get", &req, &reply);
    if (e) return e;
    bool f = moat_json_get_bool((const char *)reply.data, reply.len, "found");
    if (found) *found = f;
    if (!moat_json_get_string((const char *)reply.data, reply.len, "value", value) && f)
        return moat_errorf(MOAT_INTERNAL, "op config.get: reply has no string value: %.*s", (int)reply.len, (const char *)reply.data);
    return NULL;
}

/* moat_log_write writes one record to the host's structured log, which
 * tags it with the module, action, principal and correlation id. level is
 * a MOAT_LEVEL_*; fields_json is a JSON object of extra fields, or NULL. */
static inline moat_error *moat_log_write(const char *level, const char *msg, const char *fields_json) {
    moat_buf req = MOAT_BUF_INIT;
    moat_buf_puts(&req, "{\"level\":");
    moat_json_string(&req, level, strlen(level));
    moat_buf_puts(&req, ",\"message\":");
    moat_json_string(&req, msg, strlen(msg));
    if (fields_json && *fields_json) {
        moat_buf_puts(&req, ",\"fields\":");
        moat_buf_puts(&req, fields_json);
    }
    moat_buf_putc(&req, '}');
    return moat__call_built("log.write", &req, NULL);
}

/* moat_log_fields logs msg with string fields given as key, value, ...,
 * NULL (a NULL value is logged as null). Use the moat_log_debug/info/warn/
 * error macros, which add the NULLs. */
static inline moat_error *moat_log_fields(const char *level, const char *msg, ...) {
    moat_buf fields = MOAT_BUF_INIT;
    va_list ap;
    va_start(ap, msg);
    for (const char *k; (k = va_arg(ap, const char *)) != NULL;) {
        const char *v = va_arg(ap, const char *);
        moat_buf_putc(&fields, fields.len ? ',' : '{');
        moat_json_string(&fields, k, strlen(k));
        moat_buf_putc(&fields, ':');
        if (v) moat_json_string(&fields, v, strlen(v));
        else moat_buf_puts(&fields, "null");
    }
    va_end(ap);
    if (fields.len) moat_buf_putc(&fields, '}');
    moat_error *e = moat_log_write(level, msg, (const char *)fields.data);
    moat_buf_free(&fields);
    return e;
}

/* moat_log_info("msg", "key", "value", ...): log at a level with string
 * fields. Logging should never fail an action, so these ignore the op's
 * error; call moat_log_fields or moat_log_write to see it. Two NULLs end
 * the list, so a key given without a value is logged as null instead of
 * reading past the arguments. */
#define MOAT__END (const char *)NULL, (const char *)NULL
#define moat_log_debug(...) ((void)moat_log_fields(MOAT_LEVEL_DEBUG, __VA_ARGS__, MOAT__END))
#define moat_log_info(...) ((void)moat_log_fields(MOAT_LEVEL_INFO, __VA_ARGS__, MOAT__END))
#define moat_log_warn(...) ((void)moat_log_fields(MOAT_LEVEL_WARN, __VA_ARGS__, MOAT__END))
#define moat_log_error(...) ((void)moat_log_fields(MOAT_LEVEL_ERROR, __VA_ARGS__, MOAT__END))

/* moat_kv_get reads key of the module's key-value store (scoped by the
 * host to the caller's organization and this module) into value. *found
 * is false when the key does not exist. */
static inline moat_error *moat_kv_get(const char *key, moat_buf *value, bool *found) {
    moat_buf req = MOAT_BUF_INIT, enc = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__key_request(&req, key);
    moat_buf_putc(&req, '}');
    moat_error *e = moat__call_built("kv.get", &req, &reply);
    if (e) return e;
    bool f = moat_json_get_bool((const char *)reply.data, reply.len, "found");
    if (found) *found = f;
    moat_buf_reset(value);
    if (f && moat_json_get_string((const char *)reply.data, reply.len, "value", &enc) &&
        !moat__b64decode(enc.data, enc.len, value))
        e = moat_errorf(MOAT_INTERNAL, "op kv.get: the value is not base64");
    moat_buf_free(&enc);
    return e;
}

/* moat_kv_put sets key to the n bytes at value, replacing any value. */
static inline moat_error *moat_kv_put(const char *key, const void *value, size_t n) {
    moat_buf req = MOAT_BUF_INIT;
    moat__key_request(&req, key);
    moat_buf_puts(&req, ",\"value\":\"");
    moat__b64encode(&req, (const uint8_t *)value, n);
    moat_buf_puts(&req, "\"}");
    return moat__call_built("kv.put", &req, NULL);
}

/* moat_kv_delete removes key; *deleted (may be NULL) says if it existed. */
static inline moat_error *moat_kv_delete(const char *key, bool *deleted) {
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__key_request(&req, key);
    moat_buf_putc(&req, '}');
    moat_error *e = moat__call_built("kv.delete", &req, &reply);
    if (!e && deleted) *deleted = moat_json_get_bool((const char *)reply.data, reply.len, "deleted");
    return e;
}

/* moat_kv_list calls fn for every key starting with prefix, in lexical
 * order, following the host's pagination; fn returns false to stop. fn may
 * call other ops: each page is copied out of the shared reply buffer. */
static inline moat_error *moat_kv_list(const char *prefix, bool (*fn)(const char *key, void *ctx), void *ctx) {
    moat_buf after = MOAT_BUF_INIT, page = MOAT_BUF_INIT, key = MOAT_BUF_INIT;
    moat_error *e = NULL;
    for (;;) {
        moat_buf req = MOAT_BUF_INIT;
        moat_bytes reply;
        moat_buf_puts(&req, "{\"prefix\":");
        moat_json_string(&req, prefix ? prefix : "", prefix ? strlen(prefix) : 0);
        if (after.len) {
            moat_buf_puts(&req, ",\"after\":");
            moat_json_string(&req, (const char *)after.data, after.len);
        }
        moat_buf_putc(&req, '}');
        if ((e = moat__call_built("kv.list", &req, &reply)) != NULL) break;
        moat_buf_reset(&page);
        moat_buf_append(&page, reply.data, reply.len);
        const char *text = (const char *)page.data;
        bool more = moat_json_get_bool(text, page.len, "more");
        moat_json j;
        if (!moat_json_find(text, page.len, "keys", &j) || (moat__ws(&j), j.p >= j.end || *j.p++ != '[')) {
            e = moat_errorf(MOAT_INTERNAL, "op kv.list: reply has no keys array");
            break;
        }
        size_t count = 0;
        bool stop = false, bad = false;
        moat__ws(&j);
        if (j.p < j.end && *j.p == ']') j.p++;
        else for (;;) {
            moat_buf_reset(&key);
            if (!moat_json_read_string(&j, &key)) { bad = true; break; }
            count++;
            if (!fn((const char *)key.data, ctx)) { stop = true; break; }
            moat_buf_reset(&after);
            moat_buf_append(&after, key.data, key.len);
            moat__ws(&j);
            if (j.p < j.end && *j.p == ',') { j.p++; continue; }
            if (j.p < j.end && *j.p == ']') break;
            bad = true;
            break;
        }
        if (bad) { e = moat_errorf(MOAT_INTERNAL, "op kv.list: malformed keys array"); break; }
        if (stop || !more) break;
        if (count == 0) { e = moat_errorf(MOAT_INTERNAL, "op kv.list: the host said more keys follow but returned none"); break; }
    }
    moat_buf_free(&after);
    moat_buf_free(&page);
    moat_buf_free(&key);
    return e;
}

/* ---- the exports ------------------------------------------------------ */

static moat_buf moat__in, moat__out, moat__list;
static bool moat__listed;

static inline uint64_t moat__actions(const moat_action *t, size_t n) {
    if (!moat__listed) {
        for (size_t i = 0; i < n; i++) {
            /* A name with a newline would split in two on the host. */
            if (!t[i].name || !*t[i].name || strchr(t[i].name, '\n') || !t[i].fn) abort();
            moat_buf_puts(&moat__list, t[i].name);
            moat_buf_putc(&moat__list, '\n');
        }
        moat__listed = true;
    }
    return (uint64_t)(uintptr_t)moat__list.data << 32 | (uint32_t)moat__list.len;
}

static inline uint32_t moat__alloc(uint32_t size) {
    moat__in.len = 0;
    moat_buf_reserve(&moat__in, size); /* plus the NUL the input gets */
    return (uint32_t)(uintptr_t)moat__in.data;
}

static inline void moat__encode_error(const moat_error *e) {
    moat_buf_reset(&moat__out);
    moat_buf_puts(&moat__out, "{\"code\":");
    const char *code = e->code[0] ? e->code : MOAT_GUEST_ERROR;
    moat_json_string(&moat__out, code, strlen(code));
    moat_buf_puts(&moat__out, ",\"message\":");
    moat_json_string(&moat__out, e->message, strlen(e->message));
    moat_buf_putc(&moat__out, '}');
}

static inline void moat__trim(moat_buf *b) {
    if (b->cap > MOAT__MAX_RETAINED) moat_buf_free(b);
}

static inline uint64_t moat__invoke(const moat_action *t, size_t n, uint32_t action, uint32_t ptr, uint32_t len) {
    moat_error *e = NULL;
    moat__trim(&moat__out); /* the host has read the last output by now */
    moat_buf_reset(&moat__out);
    uintptr_t base = (uintptr_t)moat__in.data;
    if (action >= n) {
        e = moat_errorf("no_such_action", "no action at index %u; the module has %zu actions", action, n);
    } else if (len > 0 && (moat__in.cap == 0 || ptr < base || (uint64_t)ptr - base + len > moat__in.cap - 1)) {
        e = moat_errorf(MOAT_INVALID_ARGUMENT, "moat_invoke: input [%u, +%u) is not inside the buffer returned by moat_alloc", ptr, len);
    } else {
        static const uint8_t empty[1] = {0};
        moat_bytes in = {empty, 0};
        if (len > 0) {
            uint8_t *p = (uint8_t *)(uintptr_t)ptr;
            p[len] = 0; /* moat__alloc reserved the byte */
            in.data = p;
            in.len = len;
        }
        e = t[action].fn(in, &moat__out);
    }
    if (!e && moat__out.len > 0x7fffffffu)
        e = moat_errorf("output_too_large", "output is %zu bytes; the ABI allows at most %u", moat__out.len, 0x7fffffffu);
    if (e) moat__encode_error(e);
    moat__trim(&moat__in);
    moat__trim(&moat__resp);
    uint64_t v = (uint64_t)(uintptr_t)moat__out.data << 32 | (uint32_t)moat__out.len;
    if (e) v |= 1u << 31;
    return v;
}

/* MOAT_ACTIONS(table) defines the exports of ABI version 1 for an array of
 * moat_action. Use it once, at file scope. The index of an action in the
 * table is its id on the wire, so the table must not change at run time. */
#define MOAT_ACTIONS(table)                                                                                   \
    __attribute__((export_name("moat_abi_version"))) uint32_t moat_abi_version(void) { return MOAT_ABI_VERSION; } \
    __attribute__((export_name("moat_actions"))) uint64_t moat_actions(void) {                                \
        return moat__actions(table, sizeof(table) / sizeof((table)[0]));                                      \
    }                                                                                                         \
    __attribute__((export_name("moat_alloc"))) uint32_t moat_alloc(uint32_t size) { return moat__alloc(size); } \
    __attribute__((export_name("moat_invoke"))) uint64_t moat_invoke(uint32_t action, uint32_t ptr, uint32_t len) { \
        return moat__invoke(table, sizeof(table) / sizeof((table)[0]), action, ptr, len);                     \
    }

#ifdef __cplusplus
}
#endif

#endif /* MOAT_H */
