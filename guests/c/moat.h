/*
 * moat.h — the moat guest SDK for C and C++ (header-only, ABI version 1).
 *
 * A plugin is a WebAssembly reactor that declares named actions; the moat
 * host invokes them with an input and returns their output. Inside an
 * action the plugin reaches the host through ops: who it runs for
 * (moat_caller), its configuration (moat_config_get), the structured log (moat_log_info...), a key-value
 * store (moat_kv_get/put/delete/list), documents in the models of its
 * moat.yaml (moat_db_insert/get/query/update/delete/count), ranked
 * full-text search (moat_knowledge_add/delete/search), background tasks
 * (moat_task_enqueue/status/cancel), HTTP requests the host sends
 * (moat_http_fetch), media the host keeps (moat_media_fetch/put/get/info/
 * thumbnail), model calls (moat_ai_complete/embed) and, for any other op,
 * moat_call.
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
 *     byte, so a text value is also a C string. Structured replies (a
 *     moat_db_doc, a moat_db_page, moat_knowledge_hits, a moat_task_info,
 *     a moat_http_response, a moat_media_item, a moat_ai_completion, a
 *     moat_ai_embedding) are caller-owned the same way: *_INIT, reuse,
 *     *_free. Bytes (bodies, media) come back as bytes, never base64.
 *   - JSON going to the host (a document, a condition's value, metadata)
 *     is built with moat_json_writer and checked to be one JSON value
 *     before it joins a request: text that would add members to the
 *     request around it is refused with MOAT_INVALID_ARGUMENT.
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

#include <errno.h>
#include <math.h>
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
#define MOAT_CONFLICT "conflict"
#define MOAT_UNAVAILABLE "unavailable"
#define MOAT_INTERNAL "internal"
#define MOAT_RESOURCE_EXHAUSTED "resource_exhausted"
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

static inline bool moat__digits(moat_json *j) {
    const char *start = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    return j->p > start;
}

/* moat__number steps over a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static inline bool moat__number(moat_json *j) {
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p < j->end && *j->p == '0') j->p++;
    else if (!moat__digits(j)) return false;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!moat__digits(j)) return false;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (!moat__digits(j)) return false;
    }
    return true;
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
    /* true, false, null or a number, held to JSON's grammar: the SDK
     * checks JSON handed to it with this too (moat_json_valid). */
    static const char *const lits[] = {"true", "false", "null"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if ((size_t)(j->end - j->p) >= n && memcmp(j->p, lits[i], n) == 0) {
            j->p += n;
            return true;
        }
    }
    return moat__number(j);
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

/* moat_json_get_raw points *raw at the JSON text of the member key (any
 * type; an object or array whole). It returns false if the member is
 * missing or malformed. raw aliases text. */
static inline bool moat_json_get_raw(const char *text, size_t n, const char *key, moat_bytes *raw) {
    moat_json v;
    if (!moat_json_find(text, n, key, &v)) return false;
    moat__ws(&v);
    const char *start = v.p;
    if (!moat_json_skip(&v)) return false;
    raw->data = (const uint8_t *)start;
    raw->len = (size_t)(v.p - start);
    return true;
}

/* moat__scalar copies the number at raw into tmp as a C string; false if
 * it is not a number or too long to be one we read. */
static inline bool moat__scalar(moat_bytes raw, char *tmp, size_t cap) {
    moat_json j = {(const char *)raw.data, (const char *)raw.data + raw.len};
    if (raw.len == 0 || raw.len >= cap || !moat__number(&j) || j.p != j.end) return false;
    memcpy(tmp, raw.data, raw.len);
    tmp[raw.len] = 0;
    return true;
}

/* moat_json_get_int reads the integer member key into *out. It returns
 * false if the member is missing, not a number, has a fraction or an
 * exponent, or does not fit in 64 bits. */
static inline bool moat_json_get_int(const char *text, size_t n, const char *key, int64_t *out) {
    moat_bytes raw;
    char tmp[32], *end;
    if (!moat_json_get_raw(text, n, key, &raw) || !moat__scalar(raw, tmp, sizeof tmp) || strpbrk(tmp, ".eE")) return false;
    errno = 0;
    long long v = strtoll(tmp, &end, 10);
    if (errno || *end) return false;
    *out = (int64_t)v;
    return true;
}

/* moat_json_get_number reads the number member key into *out; false if
 * the member is missing or not a number. */
static inline bool moat_json_get_number(const char *text, size_t n, const char *key, double *out) {
    moat_bytes raw;
    char tmp[64], *end;
    if (!moat_json_get_raw(text, n, key, &raw) || !moat__scalar(raw, tmp, sizeof tmp)) return false;
    double v = strtod(tmp, &end);
    if (*end) return false;
    *out = v;
    return true;
}

/* moat_json_array_next steps through an array: start with j at the
 * array's '[' and *started false; each call that returns 1 points *elem
 * at the next element's JSON text (aliasing the array's). It returns 0
 * after the last element, -1 on malformed input. */
static inline int moat_json_array_next(moat_json *j, bool *started, moat_bytes *elem) {
    moat__ws(j);
    if (!*started) {
        if (j->p >= j->end || *j->p != '[') return -1;
        j->p++;
        *started = true;
        moat__ws(j);
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return 0;
        }
    } else {
        if (j->p >= j->end) return -1;
        if (*j->p == ']') {
            j->p++;
            return 0;
        }
        if (*j->p++ != ',') return -1;
        moat__ws(j);
    }
    const char *start = j->p;
    if (!moat_json_skip(j)) return -1;
    elem->data = (const uint8_t *)start;
    elem->len = (size_t)(j->p - start);
    return 1;
}

/* moat_json_valid reports whether text[0:n] is exactly one JSON value
 * (with white space around it), and an object when object is true. The
 * SDK checks every JSON it is handed with it before putting it into a
 * request: a document such as `{}, "model": "other"` would otherwise add
 * members to the request around it. */
static inline bool moat_json_valid(const char *text, size_t n, bool object) {
    if (!text) return false;
    moat_json j = {text, text + n};
    moat__ws(&j);
    if (object && (j.p >= j.end || *j.p != '{')) return false;
    if (!moat_json_skip(&j)) return false;
    moat__ws(&j);
    return j.p == j.end;
}

/* ---- writing JSON ------------------------------------------------------ */

/* moat_json_writer builds JSON text: objects, arrays, keys and scalars,
 * with the commas and escapes placed for you. A misuse (a key outside an
 * object, a value where a key belongs, nesting past 32 levels, a number
 * that is not finite, raw text that is not one JSON value) marks the
 * writer failed instead of writing bad JSON; moat_jw_text then returns
 * NULL and the ops that take its text refuse it.
 *
 *     moat_json_writer w = MOAT_JSON_WRITER_INIT;
 *     moat_jw_object(&w);
 *     moat_jw_key(&w, "title"); moat_jw_string(&w, title);
 *     moat_jw_key(&w, "done");  moat_jw_bool(&w, false);
 *     moat_jw_end(&w);
 *     moat_error *err = moat_db_insert("notes", moat_jw_text(&w), &id, &version);
 *     moat_jw_free(&w);
 */
typedef struct {
    moat_buf buf;
    uint32_t objects; /* bit d: the container at depth d is an object */
    uint32_t nonempty; /* bit d: the container at depth d holds a member */
    int depth;
    bool keyed;  /* a key was written; its value comes next */
    bool failed;
} moat_json_writer;

#define MOAT_JSON_WRITER_INIT {MOAT_BUF_INIT, 0, 0, 0, false, false}

/* moat__jw_value prepares for a value: a comma when one is due, and
 * checks that a value may come here. */
static inline bool moat__jw_value(moat_json_writer *w) {
    if (w->failed) return false;
    if (w->depth == 0) {
        if (w->buf.len) w->failed = true; /* a second top-level value */
        return !w->failed;
    }
    uint32_t bit = 1u << (w->depth - 1);
    if (w->objects & bit) {
        if (!w->keyed) w->failed = true;
        w->keyed = false;
        return !w->failed;
    }
    if (w->nonempty & bit) moat_buf_putc(&w->buf, ',');
    w->nonempty |= bit;
    return true;
}

static inline void moat__jw_open(moat_json_writer *w, char c, bool object) {
    if (!moat__jw_value(w)) return;
    if (w->depth >= 32) {
        w->failed = true;
        return;
    }
    moat_buf_putc(&w->buf, c);
    uint32_t bit = 1u << w->depth;
    w->depth++;
    w->nonempty &= ~bit;
    if (object) w->objects |= bit;
    else w->objects &= ~bit;
}

/* moat_jw_object and moat_jw_array open a container; moat_jw_end closes
 * the innermost. */
static inline void moat_jw_object(moat_json_writer *w) { moat__jw_open(w, '{', true); }
static inline void moat_jw_array(moat_json_writer *w) { moat__jw_open(w, '[', false); }

static inline void moat_jw_end(moat_json_writer *w) {
    if (w->failed) return;
    if (w->depth == 0 || w->keyed) {
        w->failed = true;
        return;
    }
    w->depth--;
    moat_buf_putc(&w->buf, (w->objects >> w->depth) & 1 ? '}' : ']');
}

/* moat_jw_key writes a member's name; its value comes next. */
static inline void moat_jw_key(moat_json_writer *w, const char *key) {
    if (w->failed) return;
    uint32_t bit = w->depth ? 1u << (w->depth - 1) : 0;
    if (!key || !(w->objects & bit) || w->keyed) {
        w->failed = true;
        return;
    }
    if (w->nonempty & bit) moat_buf_putc(&w->buf, ',');
    w->nonempty |= bit;
    moat_json_string(&w->buf, key, strlen(key));
    moat_buf_putc(&w->buf, ':');
    w->keyed = true;
}

/* moat_jw_string_n writes n bytes of s as a string (UTF-8 expected). */
static inline void moat_jw_string_n(moat_json_writer *w, const char *s, size_t n) {
    if (!s) w->failed = true;
    if (moat__jw_value(w)) moat_json_string(&w->buf, s, n);
}

static inline void moat_jw_string(moat_json_writer *w, const char *s) { moat_jw_string_n(w, s, s ? strlen(s) : 0); }

static inline void moat_jw_int(moat_json_writer *w, int64_t v) {
    if (moat__jw_value(w)) moat_buf_printf(&w->buf, "%lld", (long long)v);
}

/* moat__number_text writes finite v into tmp (32 bytes) in the fewest of
 * 15 to 17 significant digits that read back as v: 0.1, not
 * 0.10000000000000001. */
static inline int moat__number_text(char *tmp, double v) {
    int n = 0;
    for (int digits = 15; digits <= 17; digits++) {
        n = snprintf(tmp, 32, "%.*g", digits, v);
        if (strtod(tmp, NULL) == v) break;
    }
    return n;
}

/* moat_jw_number writes a finite number; NaN and the infinities have no
 * JSON form and fail the writer. */
static inline void moat_jw_number(moat_json_writer *w, double v) {
    char tmp[32];
    if (!isfinite(v)) w->failed = true;
    if (moat__jw_value(w)) moat_buf_append(&w->buf, tmp, (size_t)moat__number_text(tmp, v));
}

static inline void moat_jw_bool(moat_json_writer *w, bool v) {
    if (moat__jw_value(w)) moat_buf_puts(&w->buf, v ? "true" : "false");
}

static inline void moat_jw_null(moat_json_writer *w) {
    if (moat__jw_value(w)) moat_buf_puts(&w->buf, "null");
}

/* moat_jw_raw writes json, which must be exactly one JSON value (checked
 * with moat_json_valid), for example a document read from db.get. */
static inline void moat_jw_raw(moat_json_writer *w, const char *json) {
    if (!json || !moat_json_valid(json, strlen(json), false)) w->failed = true;
    if (moat__jw_value(w)) moat_buf_puts(&w->buf, json);
}

/* moat_jw_text returns the JSON written (a C string), or NULL when the
 * writer failed or a container is still open. */
static inline const char *moat_jw_text(const moat_json_writer *w) {
    if (w->failed || w->depth != 0 || w->keyed || w->buf.len == 0) return NULL;
    return (const char *)w->buf.data;
}

static inline void moat__jw_clear(moat_json_writer *w) {
    w->objects = w->nonempty = 0;
    w->depth = 0;
    w->keyed = w->failed = false;
}

/* moat_jw_reset empties the writer for reuse; moat_jw_free releases it. */
static inline void moat_jw_reset(moat_json_writer *w) {
    moat_buf_reset(&w->buf);
    moat__jw_clear(w);
}

static inline void moat_jw_free(moat_json_writer *w) {
    moat_buf_free(&w->buf);
    moat__jw_clear(w);
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

/* The principal an invocation runs for, as moat_caller reads it: the user
 * and organization, the user's roles and the correlation id the host's log
 * records and audit events carry. Zero-initialize (MOAT_PRINCIPAL_INIT),
 * reuse across calls, release with moat_principal_free. */
typedef struct {
    moat_buf user;
    moat_buf org;
    moat_buf *roles; /* nroles role names, each a C string */
    size_t nroles;
    moat_buf correlation_id;
} moat_principal;

#define MOAT_PRINCIPAL_INIT {MOAT_BUF_INIT, MOAT_BUF_INIT, NULL, 0, MOAT_BUF_INIT}

static inline void moat_principal_free(moat_principal *p) {
    moat_buf_free(&p->user);
    moat_buf_free(&p->org);
    for (size_t i = 0; i < p->nroles; i++) moat_buf_free(&p->roles[i]);
    free(p->roles);
    p->roles = NULL;
    p->nroles = 0;
    moat_buf_free(&p->correlation_id);
}

/* moat_principal_has_role reports whether p holds role. */
static inline bool moat_principal_has_role(const moat_principal *p, const char *role) {
    for (size_t i = 0; i < p->nroles; i++)
        if (p->roles[i].data && strcmp((const char *)p->roles[i].data, role) == 0) return true;
    return false;
}

/* moat_caller reads who the invocation runs for (the op moat.caller) into
 * *out: the principal the host authenticated, never anything the input
 * says. It needs no grant. Use its user, not a user id in the input, to
 * keep per-user data apart. */
static inline moat_error *moat_caller(moat_principal *out) {
    moat_bytes reply;
    moat_buf copy = MOAT_BUF_INIT;
    moat_error *e = moat_call("moat.caller", NULL, 0, &reply);
    if (e) return e;
    moat_buf_append(&copy, reply.data, reply.len); /* the reply buffer is the SDK's */
    moat_principal_free(out);
    const char *text = (const char *)copy.data;
    if (!moat_json_get_string(text, copy.len, "user", &out->user) || !moat_json_get_string(text, copy.len, "org", &out->org)) {
        e = moat_errorf(MOAT_INTERNAL, "op moat.caller: the reply has no user or org: %.*s", (int)copy.len, text);
        goto done;
    }
    moat_json_get_string(text, copy.len, "correlation_id", &out->correlation_id);
    moat_json j;
    if (moat_json_find(text, copy.len, "roles", &j)) {
        bool started = false;
        size_t cap = 0;
        for (moat_bytes el;;) {
            int r = moat_json_array_next(&j, &started, &el);
            if (r == 0) break;
            moat_json v = {(const char *)el.data, (const char *)el.data + el.len};
            if (out->nroles == cap) {
                cap = cap ? cap * 2 : 4;
                moat_buf *grown = (moat_buf *)realloc(out->roles, cap * sizeof *grown);
                if (!grown) abort();
                out->roles = grown;
            }
            moat_buf *role = &out->roles[out->nroles++];
            memset(role, 0, sizeof *role);
            if (r < 0 || !moat_json_read_string(&v, role)) {
                e = moat_errorf(MOAT_INTERNAL, "op moat.caller: malformed roles in the reply");
                break;
            }
        }
    }
done:
    moat_buf_free(&copy);
    return e;
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

/* ---- db: documents in the models of moat.yaml ------------------------- */
/* The module's documents: JSON objects in the models its moat.yaml
 * declares (models:), each granted by name (capabilities: db: [notes]).
 * The host validates every document against its model and scopes every op
 * to the caller's organization (and, in a model with scope: user, to the
 * caller): another organization's or user's document is not found. JSON
 * handed to these functions (a document, set, a condition's value) is
 * checked to be one JSON value first, so it cannot add members to the
 * request around it; build it with moat_json_writer. The types, operators
 * and limits are in abi/db.go of the moat repository. */

/* A stored document and what the host keeps beside it. Zero-initialize
 * (MOAT_DB_DOC_INIT), reuse across calls, release with moat_db_doc_free. */
typedef struct {
    moat_buf id;      /* 28 lowercase hexadecimal digits, made by the host */
    int64_t version;  /* 1 on insert, one more on every update */
    moat_buf doc;     /* the document: a JSON object */
    moat_buf owner;   /* the user who inserted it */
    moat_buf created; /* RFC 3339 in UTC, millisecond precision */
    moat_buf updated;
} moat_db_doc;

#define MOAT_DB_DOC_INIT {MOAT_BUF_INIT, 0, MOAT_BUF_INIT, MOAT_BUF_INIT, MOAT_BUF_INIT, MOAT_BUF_INIT}

static inline void moat_db_doc_free(moat_db_doc *d) {
    moat_buf_free(&d->id);
    moat_buf_free(&d->doc);
    moat_buf_free(&d->owner);
    moat_buf_free(&d->created);
    moat_buf_free(&d->updated);
    d->version = 0;
}

/* The conditions of a query or a count, all of which must hold: build
 * them with moat_db_where_string/int/number/bool/json, each appending
 * [field, op, value] with op one of = != < <= > >= in prefix contains.
 * Zero-initialize (MOAT_DB_WHERE_INIT); release with moat_db_where_free. */
typedef struct {
    moat_buf json; /* the conditions, comma-separated */
    size_t n;
    bool bad; /* a field or op was NULL, or a value not JSON: the op refuses the list */
} moat_db_where;

#define MOAT_DB_WHERE_INIT {MOAT_BUF_INIT, 0, false}

static inline void moat__db_cond(moat_db_where *w, const char *field, const char *op, const char *value, size_t value_len) {
    if (!field || !op || !value) {
        w->bad = true;
        return;
    }
    if (w->n++) moat_buf_putc(&w->json, ',');
    moat_buf_putc(&w->json, '[');
    moat_json_string(&w->json, field, strlen(field));
    moat_buf_putc(&w->json, ',');
    moat_json_string(&w->json, op, strlen(op));
    moat_buf_putc(&w->json, ',');
    moat_buf_append(&w->json, value, value_len);
    moat_buf_putc(&w->json, ']');
}

static inline void moat_db_where_string(moat_db_where *w, const char *field, const char *op, const char *value) {
    moat_buf v = MOAT_BUF_INIT;
    if (value) moat_json_string(&v, value, strlen(value));
    moat__db_cond(w, field, op, value ? (const char *)v.data : NULL, v.len);
    moat_buf_free(&v);
}

static inline void moat_db_where_int(moat_db_where *w, const char *field, const char *op, int64_t value) {
    char v[24];
    int n = snprintf(v, sizeof v, "%lld", (long long)value);
    moat__db_cond(w, field, op, v, (size_t)n);
}

/* moat_db_where_number refuses NaN and the infinities (no JSON form). */
static inline void moat_db_where_number(moat_db_where *w, const char *field, const char *op, double value) {
    char v[32];
    int n = isfinite(value) ? moat__number_text(v, value) : 0;
    moat__db_cond(w, field, op, isfinite(value) ? v : NULL, (size_t)n);
}

static inline void moat_db_where_bool(moat_db_where *w, const char *field, const char *op, bool value) {
    moat__db_cond(w, field, op, value ? "true" : "false", value ? 4 : 5);
}

/* moat_db_where_json takes the value as JSON text, checked to be one
 * value: an array for in ("[1,2,3]"), or what a moat_json_writer wrote. */
static inline void moat_db_where_json(moat_db_where *w, const char *field, const char *op, const char *value_json) {
    bool ok = value_json && moat_json_valid(value_json, strlen(value_json), false);
    moat__db_cond(w, field, op, ok ? value_json : NULL, ok ? strlen(value_json) : 0);
}

static inline void moat_db_where_free(moat_db_where *w) {
    moat_buf_free(&w->json);
    w->n = 0;
    w->bad = false;
}

/* A query: every condition of where holds (NULL: every document); order
 * is a NULL-terminated list of fields, "-field" for descending (NULL: by
 * id, which also breaks ties); limit is the page size (0: the host's
 * default, 100; at most 1000); after is the next of the previous page. */
typedef struct {
    const moat_db_where *where;
    const char *const *order;
    int limit;
    const char *after;
} moat_db_query_opts;

/* One page of a query. Zero-initialize (MOAT_DB_PAGE_INIT), reuse across
 * calls, release with moat_db_page_free. */
typedef struct {
    moat_db_doc *docs;
    size_t len;
    moat_buf next; /* empty on the last page; else pass it as after */
} moat_db_page;

#define MOAT_DB_PAGE_INIT {NULL, 0, MOAT_BUF_INIT}

static inline void moat_db_page_free(moat_db_page *p) {
    for (size_t i = 0; i < p->len; i++) moat_db_doc_free(&p->docs[i]);
    free(p->docs);
    p->docs = NULL;
    p->len = 0;
    moat_buf_free(&p->next);
}

/* What moat_db_update does: set (a JSON object, or NULL) replaces the
 * fields it names; unset (a NULL-terminated list, or NULL) removes
 * fields; with version not 0 the document must still be at that
 * version, or the update fails with MOAT_CONFLICT. */
typedef struct {
    const char *set;
    const char *const *unset;
    int64_t version;
} moat_db_change;

/* moat__need refuses a NULL argument, naming it. */
static inline moat_error *moat__need(const char *op, const char *name, const void *v) {
    return v ? NULL : moat_errorf(MOAT_INVALID_ARGUMENT, "op %s: %s is NULL", op, name);
}

/* moat__member appends ,"key":"value" (the comma unless first). */
static inline void moat__member(moat_buf *req, const char *key, const char *value, bool first) {
    if (!first) moat_buf_putc(req, ',');
    moat_json_string(req, key, strlen(key));
    moat_buf_putc(req, ':');
    moat_json_string(req, value, strlen(value));
}

/* moat__names appends ,"key":["a","b"] from a NULL-terminated list. */
static inline void moat__names(moat_buf *req, const char *key, const char *const *names) {
    moat_buf_puts(req, ",");
    moat_json_string(req, key, strlen(key));
    moat_buf_puts(req, ":[");
    for (size_t i = 0; names[i]; i++) {
        if (i) moat_buf_putc(req, ',');
        moat_json_string(req, names[i], strlen(names[i]));
    }
    moat_buf_putc(req, ']');
}

/* moat__where appends ,"where":[...]; it refuses a list a builder marked bad. */
static inline moat_error *moat__where(const char *op, moat_buf *req, const moat_db_where *where) {
    if (!where) return NULL;
    if (where->bad)
        return moat_errorf(MOAT_INVALID_ARGUMENT, "op %s: a condition of where has a NULL field, op or value, a value that is not one JSON value, or a number that is not finite; check the moat_db_where_* calls", op);
    if (where->n == 0) return NULL;
    moat_buf_puts(req, ",\"where\":[");
    moat_buf_append(req, where->json.data, where->json.len);
    moat_buf_putc(req, ']');
    return NULL;
}

/* moat__db_doc_read fills d from the JSON object of a stored document. */
static inline moat_error *moat__db_doc_read(const char *op, const char *text, size_t n, moat_db_doc *d) {
    moat_bytes raw;
    if (!moat_json_get_string(text, n, "id", &d->id) || !moat_json_get_int(text, n, "version", &d->version) ||
        !moat_json_get_raw(text, n, "doc", &raw) || raw.len == 0 || raw.data[0] != '{')
        return moat_errorf(MOAT_INTERNAL, "op %s: a document of the reply lacks its id, version or doc: %.200s", op, text);
    moat_buf_reset(&d->doc);
    moat_buf_append(&d->doc, raw.data, raw.len);
    moat_json_get_string(text, n, "owner", &d->owner);
    moat_json_get_string(text, n, "created", &d->created);
    moat_json_get_string(text, n, "updated", &d->updated);
    return NULL;
}

/* moat__db_request starts {"model":MODEL,"id":ID (when id is not NULL). */
static inline void moat__db_request(moat_buf *req, const char *model, const char *id) {
    moat_buf_putc(req, '{');
    moat__member(req, "model", model, true);
    if (id) moat__member(req, "id", id, false);
}

/* moat_db_insert stores doc_json (a JSON object) as a new document of
 * model; id (may be NULL) receives its id, *version (may be NULL) its
 * version, 1. */
static inline moat_error *moat_db_insert(const char *model, const char *doc_json, moat_buf *id, int64_t *version) {
    moat_error *e;
    if ((e = moat__need("db.insert", "model", model)) || (e = moat__need("db.insert", "doc_json", doc_json))) return e;
    if (!moat_json_valid(doc_json, strlen(doc_json), true))
        return moat_errorf(MOAT_INVALID_ARGUMENT, "op db.insert: doc_json is not one JSON object; build it with moat_json_writer");
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__db_request(&req, model, NULL);
    moat_buf_puts(&req, ",\"doc\":");
    moat_buf_puts(&req, doc_json);
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("db.insert", &req, &reply))) return e;
    moat_buf got = MOAT_BUF_INIT;
    int64_t v = 0;
    if (!moat_json_get_string((const char *)reply.data, reply.len, "id", &got) || !moat_json_get_int((const char *)reply.data, reply.len, "version", &v))
        e = moat_errorf(MOAT_INTERNAL, "op db.insert: the reply has no id and version: %.200s", (const char *)reply.data);
    if (!e && id) {
        moat_buf_reset(id);
        moat_buf_append(id, got.data, got.len);
    }
    if (!e && version) *version = v;
    moat_buf_free(&got);
    return e;
}

/* moat_db_get reads the document id of model into doc; *found is false
 * (and doc left as it was) when the caller's scope holds none. */
static inline moat_error *moat_db_get(const char *model, const char *id, moat_db_doc *doc, bool *found) {
    moat_error *e;
    if ((e = moat__need("db.get", "model", model)) || (e = moat__need("db.get", "id", id)) || (e = moat__need("db.get", "doc", doc))) return e;
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__db_request(&req, model, id);
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("db.get", &req, &reply))) return e;
    bool f = moat_json_get_bool((const char *)reply.data, reply.len, "found");
    if (found) *found = f;
    return f ? moat__db_doc_read("db.get", (const char *)reply.data, reply.len, doc) : NULL;
}

/* moat_db_query reads one page of the documents of model that q selects
 * (q may be NULL: every document, by id) into page. */
static inline moat_error *moat_db_query(const char *model, const moat_db_query_opts *q, moat_db_page *page) {
    moat_error *e;
    if ((e = moat__need("db.query", "model", model)) || (e = moat__need("db.query", "page", page))) return e;
    moat_buf req = MOAT_BUF_INIT, copy = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__db_request(&req, model, NULL);
    if (q) {
        if ((e = moat__where("db.query", &req, q->where))) {
            moat_buf_free(&req);
            return e;
        }
        if (q->order && q->order[0]) moat__names(&req, "order", q->order);
        if (q->limit) moat_buf_printf(&req, ",\"limit\":%d", q->limit);
        if (q->after && *q->after) moat__member(&req, "after", q->after, false);
    }
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("db.query", &req, &reply))) return e;
    /* The documents are read out of a copy: the reply buffer is the SDK's. */
    moat_buf_append(&copy, reply.data, reply.len);
    moat_db_page_free(page);
    const char *text = (const char *)copy.data;
    moat_json j;
    if (!moat_json_find(text, copy.len, "docs", &j)) e = moat_errorf(MOAT_INTERNAL, "op db.query: the reply has no docs");
    bool started = false;
    size_t cap = 0;
    for (moat_bytes el; !e;) {
        int r = moat_json_array_next(&j, &started, &el);
        if (r == 0) break;
        if (r < 0) {
            e = moat_errorf(MOAT_INTERNAL, "op db.query: malformed docs in the reply");
            break;
        }
        if (page->len == cap) {
            cap = cap ? cap * 2 : 16;
            moat_db_doc *grown = (moat_db_doc *)realloc(page->docs, cap * sizeof *grown);
            if (!grown) abort();
            page->docs = grown;
        }
        /* Counted at once, so moat_db_page_free releases it whatever happens. */
        moat_db_doc *d = &page->docs[page->len++];
        memset(d, 0, sizeof *d);
        e = moat__db_doc_read("db.query", (const char *)el.data, el.len, d);
    }
    if (!e) moat_json_get_string(text, copy.len, "next", &page->next);
    moat_buf_free(&copy);
    return e;
}

/* moat_db_update changes the document id of model as change says and
 * returns its new version in *version (may be NULL). A stale
 * change->version fails with MOAT_CONFLICT: read it again and retry. */
static inline moat_error *moat_db_update(const char *model, const char *id, const moat_db_change *change, int64_t *version) {
    moat_error *e;
    if ((e = moat__need("db.update", "model", model)) || (e = moat__need("db.update", "id", id)) || (e = moat__need("db.update", "change", change))) return e;
    if (change->set && !moat_json_valid(change->set, strlen(change->set), true))
        return moat_errorf(MOAT_INVALID_ARGUMENT, "op db.update: set is not one JSON object; build it with moat_json_writer");
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__db_request(&req, model, id);
    if (change->set) {
        moat_buf_puts(&req, ",\"set\":");
        moat_buf_puts(&req, change->set);
    }
    if (change->unset && change->unset[0]) moat__names(&req, "unset", change->unset);
    if (change->version) moat_buf_printf(&req, ",\"version\":%lld", (long long)change->version);
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("db.update", &req, &reply))) return e;
    int64_t v = 0;
    if (!moat_json_get_int((const char *)reply.data, reply.len, "version", &v))
        return moat_errorf(MOAT_INTERNAL, "op db.update: the reply has no version: %.200s", (const char *)reply.data);
    if (version) *version = v;
    return NULL;
}

/* moat_db_delete removes the document id of model; *deleted (may be NULL)
 * says whether it was there. With version not 0 the document must still
 * be at that version, or the delete fails with MOAT_CONFLICT. */
static inline moat_error *moat_db_delete(const char *model, const char *id, int64_t version, bool *deleted) {
    moat_error *e;
    if ((e = moat__need("db.delete", "model", model)) || (e = moat__need("db.delete", "id", id))) return e;
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__db_request(&req, model, id);
    if (version) moat_buf_printf(&req, ",\"version\":%lld", (long long)version);
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("db.delete", &req, &reply))) return e;
    if (deleted) *deleted = moat_json_get_bool((const char *)reply.data, reply.len, "deleted");
    return NULL;
}

/* moat_db_count counts the documents of model for which every condition
 * of where holds (NULL: all of them). */
static inline moat_error *moat_db_count(const char *model, const moat_db_where *where, int64_t *count) {
    moat_error *e;
    if ((e = moat__need("db.count", "model", model)) || (e = moat__need("db.count", "count", count))) return e;
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__db_request(&req, model, NULL);
    if ((e = moat__where("db.count", &req, where))) {
        moat_buf_free(&req);
        return e;
    }
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("db.count", &req, &reply))) return e;
    if (!moat_json_get_int((const char *)reply.data, reply.len, "count", count))
        return moat_errorf(MOAT_INTERNAL, "op db.count: the reply has no count: %.200s", (const char *)reply.data);
    return NULL;
}

/* ---- knowledge: ranked full-text search over collections ------------- */
/* The module's knowledge: documents of text with metadata in named
 * collections (granted per collection: capabilities: knowledge: [docs]),
 * searched by ranked full text, scoped by the host to the caller's
 * organization and this module. A query is plain text, never syntax:
 * quotes, operators and the like only separate words. meta and filter
 * are flat JSON objects of strings, numbers and booleans. The rules and
 * limits are in abi/knowledge.go of the moat repository. */

/* One hit of a search. */
typedef struct {
    moat_buf id;
    double score;     /* higher is better; compare within one search only */
    moat_buf snippet; /* the text around the words found, "…" where cut */
    moat_buf meta;    /* the document's meta: a JSON object ({} when none) */
} moat_knowledge_hit;

/* The hits of a search, best first. Zero-initialize
 * (MOAT_KNOWLEDGE_HITS_INIT), reuse, release with moat_knowledge_hits_free. */
typedef struct {
    moat_knowledge_hit *hits;
    size_t len;
} moat_knowledge_hits;

#define MOAT_KNOWLEDGE_HITS_INIT {NULL, 0}

static inline void moat_knowledge_hits_free(moat_knowledge_hits *h) {
    for (size_t i = 0; i < h->len; i++) {
        moat_buf_free(&h->hits[i].id);
        moat_buf_free(&h->hits[i].snippet);
        moat_buf_free(&h->hits[i].meta);
    }
    free(h->hits);
    h->hits = NULL;
    h->len = 0;
}

/* A search's options: at most limit hits (0: 10; at most 50), and only
 * documents whose meta holds every key of filter (a JSON object, or NULL)
 * with an equal value. */
typedef struct {
    int limit;
    const char *filter;
} moat_knowledge_search_opts;

/* moat_knowledge_add stores text under id in collection, replacing the
 * document of that id there; meta_json is a flat JSON object or NULL.
 * *replaced (may be NULL) says whether it replaced one. */
static inline moat_error *moat_knowledge_add(const char *collection, const char *id, const char *text, const char *meta_json, bool *replaced) {
    moat_error *e;
    if ((e = moat__need("knowledge.add", "collection", collection)) || (e = moat__need("knowledge.add", "id", id)) ||
        (e = moat__need("knowledge.add", "text", text)))
        return e;
    if (meta_json && !moat_json_valid(meta_json, strlen(meta_json), true))
        return moat_errorf(MOAT_INVALID_ARGUMENT, "op knowledge.add: meta_json is not one JSON object; build it with moat_json_writer");
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat_buf_putc(&req, '{');
    moat__member(&req, "collection", collection, true);
    moat__member(&req, "id", id, false);
    moat__member(&req, "text", text, false);
    if (meta_json) {
        moat_buf_puts(&req, ",\"meta\":");
        moat_buf_puts(&req, meta_json);
    }
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("knowledge.add", &req, &reply))) return e;
    if (replaced) *replaced = moat_json_get_bool((const char *)reply.data, reply.len, "replaced");
    return NULL;
}

/* moat_knowledge_delete removes the document id from collection;
 * *deleted (may be NULL) says whether it existed. */
static inline moat_error *moat_knowledge_delete(const char *collection, const char *id, bool *deleted) {
    moat_error *e;
    if ((e = moat__need("knowledge.delete", "collection", collection)) || (e = moat__need("knowledge.delete", "id", id))) return e;
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat_buf_putc(&req, '{');
    moat__member(&req, "collection", collection, true);
    moat__member(&req, "id", id, false);
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("knowledge.delete", &req, &reply))) return e;
    if (deleted) *deleted = moat_json_get_bool((const char *)reply.data, reply.len, "deleted");
    return NULL;
}

/* moat_knowledge_search finds the documents of collection holding every
 * word of query, best first, into hits (opts may be NULL). */
static inline moat_error *moat_knowledge_search(const char *collection, const char *query, const moat_knowledge_search_opts *opts,
                                                moat_knowledge_hits *hits) {
    moat_error *e;
    if ((e = moat__need("knowledge.search", "collection", collection)) || (e = moat__need("knowledge.search", "query", query)) ||
        (e = moat__need("knowledge.search", "hits", hits)))
        return e;
    if (opts && opts->filter && !moat_json_valid(opts->filter, strlen(opts->filter), true))
        return moat_errorf(MOAT_INVALID_ARGUMENT, "op knowledge.search: filter is not one JSON object; build it with moat_json_writer");
    moat_buf req = MOAT_BUF_INIT, copy = MOAT_BUF_INIT;
    moat_bytes reply;
    moat_buf_putc(&req, '{');
    moat__member(&req, "collection", collection, true);
    moat__member(&req, "query", query, false);
    if (opts && opts->limit) moat_buf_printf(&req, ",\"limit\":%d", opts->limit);
    if (opts && opts->filter) {
        moat_buf_puts(&req, ",\"filter\":");
        moat_buf_puts(&req, opts->filter);
    }
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("knowledge.search", &req, &reply))) return e;
    moat_buf_append(&copy, reply.data, reply.len);
    moat_knowledge_hits_free(hits);
    moat_json j;
    if (!moat_json_find((const char *)copy.data, copy.len, "hits", &j)) e = moat_errorf(MOAT_INTERNAL, "op knowledge.search: the reply has no hits");
    bool started = false;
    size_t cap = 0;
    for (moat_bytes el; !e;) {
        int r = moat_json_array_next(&j, &started, &el);
        if (r == 0) break;
        if (r < 0) {
            e = moat_errorf(MOAT_INTERNAL, "op knowledge.search: malformed hits in the reply");
            break;
        }
        if (hits->len == cap) {
            cap = cap ? cap * 2 : 16;
            moat_knowledge_hit *grown = (moat_knowledge_hit *)realloc(hits->hits, cap * sizeof *grown);
            if (!grown) abort();
            hits->hits = grown;
        }
        /* Counted at once, so moat_knowledge_hits_free releases it whatever happens. */
        moat_knowledge_hit *h = &hits->hits[hits->len++];
        memset(h, 0, sizeof *h);
        const char *t = (const char *)el.data;
        moat_bytes meta;
        if (!moat_json_get_string(t, el.len, "id", &h->id) || !moat_json_get_number(t, el.len, "score", &h->score)) {
            e = moat_errorf(MOAT_INTERNAL, "op knowledge.search: a hit of the reply lacks its id or score: %.200s", t);
            break;
        }
        moat_json_get_string(t, el.len, "snippet", &h->snippet);
        if (moat_json_get_raw(t, el.len, "meta", &meta) && meta.len && meta.data[0] == '{') moat_buf_append(&h->meta, meta.data, meta.len);
        else moat_buf_puts(&h->meta, "{}");
    }
    moat_buf_free(&copy);
    return e;
}

/* ---- tasks: background runs of this module's actions ------------------- */
/* A task runs one of this module's actions later, on whichever host
 * claims it, as the principal whose invocation enqueued it, retried with
 * backoff on failure (capabilities: tasks: true). It runs at least once:
 * make the action safe to repeat. Limits are in abi/task.go. */

/* Task states. */
#define MOAT_TASK_QUEUED "queued"
#define MOAT_TASK_RUNNING "running"
#define MOAT_TASK_DONE "done"
#define MOAT_TASK_FAILED "failed"
#define MOAT_TASK_CANCELLED "cancelled"

/* An enqueue's options; all zero runs the task as soon as a runner is
 * free, with 3 attempts. delay is a duration in Go's syntax ("90s",
 * "15m", "2h30m") and at an RFC 3339 time; set at most one, at most 30
 * days ahead. max_attempts is 1 to 25 (0: 3). A key makes the enqueue
 * idempotent: while a task of this module and organization holds it, the
 * enqueue returns that task's id and *existing true. */
typedef struct {
    const char *delay;
    const char *at;
    int max_attempts;
    const char *key;
} moat_task_opts;

/* A task's state. Zero-initialize (MOAT_TASK_INFO_INIT), reuse, release
 * with moat_task_info_free. */
typedef struct {
    moat_buf state; /* a MOAT_TASK_* */
    int attempts, max_attempts;
    moat_buf result; /* done: the action's output (bytes, NUL-terminated) */
    moat_buf error;  /* the last failure's message, code its abi code */
    moat_buf code;
    moat_buf run_at; /* queued: when it runs next (RFC 3339) */
} moat_task_info;

#define MOAT_TASK_INFO_INIT {MOAT_BUF_INIT, 0, 0, MOAT_BUF_INIT, MOAT_BUF_INIT, MOAT_BUF_INIT, MOAT_BUF_INIT}

static inline void moat_task_info_free(moat_task_info *t) {
    moat_buf_free(&t->state);
    moat_buf_free(&t->result);
    moat_buf_free(&t->error);
    moat_buf_free(&t->code);
    moat_buf_free(&t->run_at);
    t->attempts = t->max_attempts = 0;
}

/* moat_task_enqueue queues a run of action with the input_len bytes at
 * input (opts may be NULL). id receives the task's id; *existing (may be
 * NULL) is true when opts->key named a task enqueued before. */
static inline moat_error *moat_task_enqueue(const char *action, const void *input, size_t input_len, const moat_task_opts *opts,
                                            moat_buf *id, bool *existing) {
    moat_error *e;
    if ((e = moat__need("task.enqueue", "action", action)) || (e = moat__need("task.enqueue", "id", id))) return e;
    if (input_len && !input) return moat_errorf(MOAT_INVALID_ARGUMENT, "op task.enqueue: input is NULL but input_len is %zu", input_len);
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat_buf_putc(&req, '{');
    moat__member(&req, "action", action, true);
    if (input_len) {
        moat_buf_puts(&req, ",\"input\":\"");
        moat__b64encode(&req, (const uint8_t *)input, input_len);
        moat_buf_putc(&req, '"');
    }
    if (opts) {
        if (opts->delay) moat__member(&req, "delay", opts->delay, false);
        if (opts->at) moat__member(&req, "at", opts->at, false);
        if (opts->max_attempts) moat_buf_printf(&req, ",\"max_attempts\":%d", opts->max_attempts);
        if (opts->key) moat__member(&req, "key", opts->key, false);
    }
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("task.enqueue", &req, &reply))) return e;
    bool ex = moat_json_get_bool((const char *)reply.data, reply.len, "existing");
    if (!moat_json_get_string((const char *)reply.data, reply.len, "id", id) || id->len == 0)
        return moat_errorf(MOAT_INTERNAL, "op task.enqueue: the reply has no id: %.200s", (const char *)reply.data);
    if (existing) *existing = ex;
    return NULL;
}

/* moat_task_status reads the state of the task id of this module into
 * info. An id of no task of this module and organization fails with
 * MOAT_NOT_FOUND. */
static inline moat_error *moat_task_status(const char *id, moat_task_info *info) {
    moat_error *e;
    if ((e = moat__need("task.status", "id", id)) || (e = moat__need("task.status", "info", info))) return e;
    moat_buf req = MOAT_BUF_INIT, enc = MOAT_BUF_INIT;
    moat_bytes reply;
    moat_buf_putc(&req, '{');
    moat__member(&req, "id", id, true);
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("task.status", &req, &reply))) return e;
    const char *t = (const char *)reply.data;
    int64_t attempts = 0, max = 0;
    if (!moat_json_get_string(t, reply.len, "state", &info->state) || !moat_json_get_int(t, reply.len, "attempts", &attempts) ||
        !moat_json_get_int(t, reply.len, "max_attempts", &max))
        return moat_errorf(MOAT_INTERNAL, "op task.status: the reply has no state and attempts: %.200s", t);
    info->attempts = (int)attempts;
    info->max_attempts = (int)max;
    moat_json_get_string(t, reply.len, "error", &info->error);
    moat_json_get_string(t, reply.len, "code", &info->code);
    moat_json_get_string(t, reply.len, "run_at", &info->run_at);
    moat_buf_reset(&info->result);
    if (moat_json_get_string(t, reply.len, "result", &enc) && !moat__b64decode(enc.data, enc.len, &info->result))
        e = moat_errorf(MOAT_INTERNAL, "op task.status: the result is not base64");
    moat_buf_free(&enc);
    return e;
}

/* moat_task_cancel cancels the task id if it is queued or running;
 * *cancelled (may be NULL) says whether it did, state (may be NULL)
 * receives the task's state after the call either way. */
static inline moat_error *moat_task_cancel(const char *id, bool *cancelled, moat_buf *state) {
    moat_error *e;
    if ((e = moat__need("task.cancel", "id", id))) return e;
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat_buf_putc(&req, '{');
    moat__member(&req, "id", id, true);
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("task.cancel", &req, &reply))) return e;
    if (cancelled) *cancelled = moat_json_get_bool((const char *)reply.data, reply.len, "cancelled");
    if (state) moat_json_get_string((const char *)reply.data, reply.len, "state", state);
    return NULL;
}

/* ---- http: requests the host sends for the plugin ---------------------- */
/* The host, not the plugin, makes the connection: the URL must be covered
 * by one of the module's http grants (capabilities: http:
 * ["https://api.example.com:443"]), on every redirect too, and the address
 * it reaches is checked after DNS, so loopback, private and metadata
 * addresses are reached only where a grant names them. Headers a grant
 * injects (a secret as a bearer token) are added by the host and never
 * shown to the plugin. A status of 4xx or 5xx is a response, not an
 * error; a URL no grant covers is MOAT_DENIED, a body over its limit
 * MOAT_TOO_LARGE, a server out of reach or too slow MOAT_UNAVAILABLE.
 * Limits are in abi/http.go of the moat repository. */

/* One request header. */
typedef struct {
    const char *name, *value;
} moat_http_header;

/* A request. Zero fields take the host's defaults. */
typedef struct {
    const char *method;              /* NULL or "": GET */
    const char *url;
    const moat_http_header *headers; /* headers_len of them (names case-insensitive), or NULL */
    size_t headers_len;
    const void *body;                /* body_len bytes (at most 2 MiB), or NULL */
    size_t body_len;
    int timeout_ms;                  /* the whole request, redirects and body included: 0 is 10 s; at most 60 000 */
    int64_t max_bytes;               /* the response body: 0 is 1 MiB; at most 2 MiB */
} moat_http_request;

/* The final response, after redirects. Zero-initialize
 * (MOAT_HTTP_RESPONSE_INIT), reuse, release with moat_http_response_free. */
typedef struct {
    int status;
    moat_buf headers; /* a JSON object, lower-case names; read it with moat_http_response_header */
    moat_buf body;    /* the body's bytes (binary: use len) */
    moat_buf url;     /* where the body came from (the last redirect's target) */
} moat_http_response;

#define MOAT_HTTP_RESPONSE_INIT {0, MOAT_BUF_INIT, MOAT_BUF_INIT, MOAT_BUF_INIT}

static inline void moat_http_response_free(moat_http_response *r) {
    moat_buf_free(&r->headers);
    moat_buf_free(&r->body);
    moat_buf_free(&r->url);
    r->status = 0;
}

/* moat_http_response_header reads the response header name (any case)
 * into value; false when the response has none. A header sent more than
 * once is its values joined by ", ". */
static inline bool moat_http_response_header(const moat_http_response *r, const char *name, moat_buf *value) {
    if (!r || !name || !value || !r->headers.len) return false;
    moat_buf lower = MOAT_BUF_INIT;
    for (const char *p = name; *p; p++) moat_buf_putc(&lower, (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p));
    bool found = moat_json_get_string((const char *)r->headers.data, r->headers.len, lower.len ? (const char *)lower.data : "", value);
    moat_buf_free(&lower);
    return found;
}

/* moat_http_fetch sends req and reads the final response into resp. */
static inline moat_error *moat_http_fetch(const moat_http_request *req, moat_http_response *resp) {
    moat_error *e;
    if ((e = moat__need("http.fetch", "req", req)) || (e = moat__need("http.fetch", "req->url", req->url)) || (e = moat__need("http.fetch", "resp", resp))) return e;
    if (req->body_len && !req->body) return moat_errorf(MOAT_INVALID_ARGUMENT, "op http.fetch: body is NULL but body_len is %zu", req->body_len);
    if (req->headers_len && !req->headers) return moat_errorf(MOAT_INVALID_ARGUMENT, "op http.fetch: headers is NULL but headers_len is %zu", req->headers_len);
    for (size_t i = 0; i < req->headers_len; i++)
        if (!req->headers[i].name || !req->headers[i].value) return moat_errorf(MOAT_INVALID_ARGUMENT, "op http.fetch: header %zu has a NULL name or value", i);
    moat_buf r = MOAT_BUF_INIT, enc = MOAT_BUF_INIT;
    moat_bytes reply;
    moat_buf_putc(&r, '{');
    moat__member(&r, "url", req->url, true);
    if (req->method && *req->method) moat__member(&r, "method", req->method, false);
    if (req->headers_len) {
        moat_buf_puts(&r, ",\"headers\":{");
        for (size_t i = 0; i < req->headers_len; i++) moat__member(&r, req->headers[i].name, req->headers[i].value, i == 0);
        moat_buf_putc(&r, '}');
    }
    if (req->body_len) {
        moat_buf_puts(&r, ",\"body\":\"");
        moat__b64encode(&r, (const uint8_t *)req->body, req->body_len);
        moat_buf_putc(&r, '"');
    }
    if (req->timeout_ms) moat_buf_printf(&r, ",\"timeout_ms\":%d", req->timeout_ms);
    if (req->max_bytes) moat_buf_printf(&r, ",\"max_bytes\":%lld", (long long)req->max_bytes);
    moat_buf_putc(&r, '}');
    if ((e = moat__call_built("http.fetch", &r, &reply))) return e;
    const char *t = (const char *)reply.data;
    int64_t status = 0;
    moat_bytes headers;
    if (!moat_json_get_int(t, reply.len, "status", &status))
        return moat_errorf(MOAT_INTERNAL, "op http.fetch: the reply has no status: %.200s", t);
    resp->status = (int)status;
    moat_buf_reset(&resp->headers);
    if (moat_json_get_raw(t, reply.len, "headers", &headers) && headers.len && headers.data[0] == '{') moat_buf_append(&resp->headers, headers.data, headers.len);
    else moat_buf_puts(&resp->headers, "{}");
    moat_json_get_string(t, reply.len, "url", &resp->url);
    moat_buf_reset(&resp->body);
    if (moat_json_get_string(t, reply.len, "body", &enc) && !moat__b64decode(enc.data, enc.len, &resp->body))
        e = moat_errorf(MOAT_INTERNAL, "op http.fetch: the body is not base64");
    moat_buf_free(&enc);
    return e;
}

/* ---- routes: an action bound to an HTTP route (moat.yaml routes:) ------ */

/* An action a route binds to METHOD /path/{param} under /m/{org}/{module}/
 * gets the request as its input (abi/route.go in the moat repository) and
 * may answer with a status, a type, headers and a body:
 *
 *     static moat_error *get_item(moat_bytes input, moat_buf *out) {
 *         moat_buf id = MOAT_BUF_INIT;
 *         if (!moat_route_is_request(input)) return moat_errorf(MOAT_INVALID_ARGUMENT, "call me through a route");
 *         moat_route_param(input, "id", &id);
 *         const char *hdrs[] = {"Cache-Control", "no-store", NULL};
 *         moat_route_response(out, 200, "application/json", hdrs, body, body_len);
 *         ...
 *     }
 *
 * Headers may be only those the server allows (Location, Cache-Control,
 * ETag, ...; never Set-Cookie): anything else fails the call. */

/* moat_route_is_request reports whether input is a route's request. */
static inline bool moat_route_is_request(moat_bytes input) {
    moat_buf v = MOAT_BUF_INIT;
    bool ok = moat_json_get_string((const char *)input.data, input.len, "moat", &v) && strcmp((const char *)v.data, "http.request") == 0;
    moat_buf_free(&v);
    return ok;
}

/* moat_route_field reads a string member of the request (route, auth,
 * method, path, remote) into out; false when it has none. */
static inline bool moat_route_field(moat_bytes input, const char *field, moat_buf *out) {
    return moat_json_get_string((const char *)input.data, input.len, field, out);
}

/* moat__route_member reads member name of the request's object member
 * obj (params, headers) into out. */
static inline bool moat__route_member(moat_bytes input, const char *obj, const char *name, moat_buf *out) {
    moat_bytes raw;
    moat_buf_reset(out);
    return moat_json_get_raw((const char *)input.data, input.len, obj, &raw) && raw.len && raw.data[0] == '{' &&
           moat_json_get_string((const char *)raw.data, raw.len, name, out);
}

/* moat_route_param reads the path parameter name ({name} in the route). */
static inline bool moat_route_param(moat_bytes input, const char *name, moat_buf *out) {
    return moat__route_member(input, "params", name, out);
}

/* moat_route_header reads the request header name (lower case: the
 * server passes only allowlisted ones, never Authorization or Cookie). */
static inline bool moat_route_header(moat_bytes input, const char *name, moat_buf *out) {
    return moat__route_member(input, "headers", name, out);
}

/* moat_route_query reads the first value of the query parameter name. */
static inline bool moat_route_query(moat_bytes input, const char *name, moat_buf *out) {
    moat_bytes q, vals, first;
    moat_buf_reset(out);
    if (!moat_json_get_raw((const char *)input.data, input.len, "query", &q) || !q.len || q.data[0] != '{' ||
        !moat_json_get_raw((const char *)q.data, q.len, name, &vals))
        return false;
    moat_json j = {(const char *)vals.data, (const char *)vals.data + vals.len};
    bool started = false;
    if (moat_json_array_next(&j, &started, &first) != 1) return false;
    moat_json e = {(const char *)first.data, (const char *)first.data + first.len};
    return moat_json_read_string(&e, out);
}

/* moat_route_body reads the request's body (its bytes: use out->len). */
static inline bool moat_route_body(moat_bytes input, moat_buf *out) {
    moat_buf enc = MOAT_BUF_INIT;
    bool ok;
    if (moat_json_get_string((const char *)input.data, input.len, "body_base64", &enc) && enc.len) {
        moat_buf_reset(out);
        ok = moat__b64decode(enc.data, enc.len, out);
    } else {
        ok = moat_json_get_string((const char *)input.data, input.len, "body", out) || (moat_buf_reset(out), true);
    }
    moat_buf_free(&enc);
    return ok;
}

/* moat__valid_utf8 reports whether p[0:n] is UTF-8 without NULs (what a JSON
 * string of this header carries as text). */
static inline bool moat__valid_utf8(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t k = c == 0 ? 0 : c < 0x80 ? 1 : (c & 0xe0) == 0xc0 && c >= 0xc2 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] & 0xc0) != 0x80) return false;
        i += k;
    }
    return true;
}

/* moat_route_response writes the answer of a route's action into out:
 * status (0: 200), content_type (NULL: text/plain), headers as name,
 * value pairs ending in NULL (or NULL for none), and the body (binary is
 * sent as base64). */
static inline void moat_route_response(moat_buf *out, int status, const char *content_type, const char *const *headers, const void *body, size_t body_len) {
    moat_json_writer w = MOAT_JSON_WRITER_INIT;
    moat_jw_object(&w);
    moat_jw_key(&w, "moat");
    moat_jw_string(&w, "http.response");
    if (status) {
        moat_jw_key(&w, "status");
        moat_jw_int(&w, status);
    }
    if (content_type) {
        moat_jw_key(&w, "content_type");
        moat_jw_string(&w, content_type);
    }
    if (headers && headers[0]) {
        moat_jw_key(&w, "headers");
        moat_jw_object(&w);
        for (size_t i = 0; headers[i] && headers[i + 1]; i += 2) {
            moat_jw_key(&w, headers[i]);
            moat_jw_string(&w, headers[i + 1]);
        }
        moat_jw_end(&w);
    }
    if (body && body_len) {
        if (moat__valid_utf8((const uint8_t *)body, body_len)) {
            moat_jw_key(&w, "body");
            moat_jw_string_n(&w, (const char *)body, body_len);
        } else {
            moat_buf enc = MOAT_BUF_INIT;
            moat__b64encode(&enc, (const uint8_t *)body, body_len);
            moat_jw_key(&w, "body_base64");
            moat_jw_string_n(&w, (const char *)enc.data, enc.len);
            moat_buf_free(&enc);
        }
    }
    moat_jw_end(&w);
    moat_buf_reset(out);
    moat_buf_puts(out, moat_jw_text(&w));
    moat_jw_free(&w);
}

/* ---- media: images, audio, video and PDFs the host keeps ---------------- */
/* The organization's media (capabilities: media: true; moat_media_fetch
 * needs an http grant covering the URL as well), served to clients only
 * by moat (GET /v1/media/{id}, signed URLs), never from where it came
 * from. The host decides what an item is from its bytes: bytes of no
 * allowed type, or of another type than the one given, are
 * MOAT_INVALID_ARGUMENT. JPEG and PNG images are kept without their
 * metadata (EXIF, GPS); an item's id is the hex SHA-256 of the bytes kept.
 * Limits are in abi/media.go of the moat repository. */

/* Thumbnail fits. */
#define MOAT_FIT_CONTAIN "contain" /* the whole image within width x height, aspect kept (the default) */
#define MOAT_FIT_COVER "cover"     /* width x height filled, aspect kept, the overflow cut from the centre */
#define MOAT_FIT_FILL "fill"       /* exactly width x height, stretched */

/* A stored item. Zero-initialize (MOAT_MEDIA_ITEM_INIT), reuse, release
 * with moat_media_item_free. */
typedef struct {
    moat_buf id;   /* 64 lowercase hexadecimal digits */
    moat_buf type; /* "image/png", "application/pdf", ... */
    int64_t size;  /* bytes */
    int width, height; /* 0 for what is not an image */
} moat_media_item;

#define MOAT_MEDIA_ITEM_INIT {MOAT_BUF_INIT, MOAT_BUF_INIT, 0, 0, 0}

static inline void moat_media_item_free(moat_media_item *m) {
    moat_buf_free(&m->id);
    moat_buf_free(&m->type);
    m->size = 0;
    m->width = m->height = 0;
}

/* moat__media_read fills item (when not NULL) from an item's description. */
static inline moat_error *moat__media_read(const char *op, const char *t, size_t n, moat_media_item *item) {
    moat_buf id = MOAT_BUF_INIT, type = MOAT_BUF_INIT;
    int64_t size = 0, w = 0, h = 0;
    moat_error *e = NULL;
    if (!moat_json_get_string(t, n, "id", &id) || !id.len || !moat_json_get_string(t, n, "type", &type) || !moat_json_get_int(t, n, "size", &size))
        e = moat_errorf(MOAT_INTERNAL, "op %s: the reply lacks the item's id, type or size: %.200s", op, t);
    moat_json_get_int(t, n, "width", &w);
    moat_json_get_int(t, n, "height", &h);
    if (!e && item) {
        moat_buf_reset(&item->id);
        moat_buf_append(&item->id, id.data, id.len);
        moat_buf_reset(&item->type);
        moat_buf_append(&item->type, type.data, type.len);
        item->size = size;
        item->width = (int)w;
        item->height = (int)h;
    }
    moat_buf_free(&id);
    moat_buf_free(&type);
    return e;
}

/* moat__media_call sends a request built in req and reads the item. */
static inline moat_error *moat__media_call(const char *op, moat_buf *req, moat_media_item *item) {
    moat_bytes reply;
    moat_error *e = moat__call_built(op, req, &reply);
    return e ? e : moat__media_read(op, (const char *)reply.data, reply.len, item);
}

/* moat_media_fetch has the host download url (under the module's http
 * grants) and keep it; item (may be NULL) describes it. The plugin never
 * sees the bytes: moat_media_get reads them. */
static inline moat_error *moat_media_fetch(const char *url, moat_media_item *item) {
    moat_error *e;
    if ((e = moat__need("media.fetch", "url", url))) return e;
    moat_buf req = MOAT_BUF_INIT;
    moat_buf_putc(&req, '{');
    moat__member(&req, "url", url, true);
    moat_buf_putc(&req, '}');
    return moat__media_call("media.fetch", &req, item);
}

/* moat_media_put keeps the len bytes at data (at most 2 MiB); type, when
 * not NULL, must be what the bytes are ("image/png"). */
static inline moat_error *moat_media_put(const void *data, size_t len, const char *type, moat_media_item *item) {
    if (len && !data) return moat_errorf(MOAT_INVALID_ARGUMENT, "op media.put: data is NULL but len is %zu", len);
    moat_buf req = MOAT_BUF_INIT;
    moat_buf_puts(&req, "{\"data\":\"");
    moat__b64encode(&req, (const uint8_t *)data, len);
    moat_buf_putc(&req, '"');
    if (type && *type) moat__member(&req, "type", type, false);
    moat_buf_putc(&req, '}');
    return moat__media_call("media.put", &req, item);
}

/* moat__media_id_request builds {"id":ID (the caller closes it). */
static inline void moat__media_id_request(moat_buf *req, const char *id) {
    moat_buf_putc(req, '{');
    moat__member(req, "id", id, true);
}

/* moat_media_get reads the bytes of an item of the caller's organization
 * into data, and its description into item (may be NULL). An item over
 * 2 MiB is MOAT_TOO_LARGE (clients read it from /v1/media/{id}); an id of
 * no item of the organization MOAT_NOT_FOUND. */
static inline moat_error *moat_media_get(const char *id, moat_media_item *item, moat_buf *data) {
    moat_error *e;
    if ((e = moat__need("media.get", "id", id)) || (e = moat__need("media.get", "data", data))) return e;
    moat_buf req = MOAT_BUF_INIT, enc = MOAT_BUF_INIT;
    moat_bytes reply;
    moat__media_id_request(&req, id);
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("media.get", &req, &reply))) return e;
    const char *t = (const char *)reply.data;
    moat_buf_reset(data);
    if (!moat_json_get_string(t, reply.len, "data", &enc) || !moat__b64decode(enc.data, enc.len, data))
        e = moat_errorf(MOAT_INTERNAL, "op media.get: the reply's data is missing or not base64");
    moat_buf_free(&enc);
    return e ? e : moat__media_read("media.get", t, reply.len, item);
}

/* moat_media_info describes an item of the caller's organization. */
static inline moat_error *moat_media_info(const char *id, moat_media_item *item) {
    moat_error *e;
    if ((e = moat__need("media.info", "id", id))) return e;
    moat_buf req = MOAT_BUF_INIT;
    moat__media_id_request(&req, id);
    moat_buf_putc(&req, '}');
    return moat__media_call("media.info", &req, item);
}

/* moat_media_thumbnail makes (and keeps) a thumbnail of the image item
 * id, at most width x height (each 1 to 2048), fitted by fit (a
 * MOAT_FIT_*; NULL is MOAT_FIT_CONTAIN), and describes it in item. */
static inline moat_error *moat_media_thumbnail(const char *id, int width, int height, const char *fit, moat_media_item *item) {
    moat_error *e;
    if ((e = moat__need("media.thumbnail", "id", id))) return e;
    moat_buf req = MOAT_BUF_INIT;
    moat__media_id_request(&req, id);
    moat_buf_printf(&req, ",\"width\":%d,\"height\":%d", width, height);
    if (fit && *fit) moat__member(&req, "fit", fit, false);
    moat_buf_putc(&req, '}');
    return moat__media_call("media.thumbnail", &req, item);
}

/* ---- ai: model calls ---------------------------------------------------- */
/* Models of the providers the operator configured (OpenAI-compatible
 * APIs), named by the operator's aliases, each granted by name
 * (capabilities: ai: [small-chat]). Token budgets per organization and
 * per module per day are checked before a call: one over a budget is
 * MOAT_DENIED, naming it. Every call is audited as a model call whose id
 * the reply carries. Limits are in abi/ai.go of the moat repository. */

/* Message roles. */
#define MOAT_ROLE_SYSTEM "system"
#define MOAT_ROLE_USER "user"
#define MOAT_ROLE_ASSISTANT "assistant"

/* One turn of a conversation. */
typedef struct {
    const char *role, *content;
} moat_ai_message;

/* A completion's options; all zero leaves them to the provider. */
typedef struct {
    int max_tokens;            /* 1 to 32768; 0: the provider's default */
    const double *temperature; /* 0 to 2, or NULL: the provider's default */
    const char *json_schema;   /* a JSON Schema object, or NULL: the reply is JSON matching it */
} moat_ai_complete_opts;

/* A model's reply. Zero-initialize (MOAT_AI_COMPLETION_INIT), reuse,
 * release with moat_ai_completion_free. */
typedef struct {
    moat_buf text;
    int64_t input_tokens, output_tokens;
    moat_buf model_call_id; /* the model call's id in the audit trail */
} moat_ai_completion;

#define MOAT_AI_COMPLETION_INIT {MOAT_BUF_INIT, 0, 0, MOAT_BUF_INIT}

static inline void moat_ai_completion_free(moat_ai_completion *c) {
    moat_buf_free(&c->text);
    moat_buf_free(&c->model_call_id);
    c->input_tokens = c->output_tokens = 0;
}

/* Vectors, one per input: vector i is the dim floats at vectors + i * dim.
 * Zero-initialize (MOAT_AI_EMBEDDING_INIT), reuse, release with
 * moat_ai_embedding_free. */
typedef struct {
    float *vectors;
    size_t len, dim;
    int64_t input_tokens, output_tokens;
    moat_buf model_call_id;
} moat_ai_embedding;

#define MOAT_AI_EMBEDDING_INIT {NULL, 0, 0, 0, 0, MOAT_BUF_INIT}

static inline void moat_ai_embedding_free(moat_ai_embedding *m) {
    free(m->vectors);
    m->vectors = NULL;
    m->len = m->dim = 0;
    m->input_tokens = m->output_tokens = 0;
    moat_buf_free(&m->model_call_id);
}

/* moat__ai_usage reads a reply's usage and model call id. */
static inline moat_error *moat__ai_usage(const char *op, const char *t, size_t n, int64_t *in, int64_t *out, moat_buf *id) {
    moat_bytes usage;
    *in = *out = 0;
    if (moat_json_get_raw(t, n, "usage", &usage)) {
        moat_json_get_int((const char *)usage.data, usage.len, "input_tokens", in);
        moat_json_get_int((const char *)usage.data, usage.len, "output_tokens", out);
    }
    if (!moat_json_get_string(t, n, "model_call_id", id) || !id->len)
        return moat_errorf(MOAT_INTERNAL, "op %s: the reply has no model_call_id: %.200s", op, t);
    return NULL;
}

/* moat_ai_complete asks model (an operator's alias) to continue the n
 * messages (opts may be NULL) and reads the reply into out. */
static inline moat_error *moat_ai_complete(const char *model, const moat_ai_message *messages, size_t n, const moat_ai_complete_opts *opts,
                                           moat_ai_completion *out) {
    moat_error *e;
    if ((e = moat__need("ai.complete", "model", model)) || (e = moat__need("ai.complete", "out", out))) return e;
    if (n && !messages) return moat_errorf(MOAT_INVALID_ARGUMENT, "op ai.complete: messages is NULL but n is %zu", n);
    for (size_t i = 0; i < n; i++)
        if (!messages[i].role || !messages[i].content) return moat_errorf(MOAT_INVALID_ARGUMENT, "op ai.complete: message %zu has a NULL role or content", i);
    if (opts && opts->temperature && !isfinite(*opts->temperature))
        return moat_errorf(MOAT_INVALID_ARGUMENT, "op ai.complete: the temperature is not a finite number; use 0 to 2, or NULL for the provider's default");
    if (opts && opts->json_schema && !moat_json_valid(opts->json_schema, strlen(opts->json_schema), true))
        return moat_errorf(MOAT_INVALID_ARGUMENT, "op ai.complete: json_schema is not one JSON object; build it with moat_json_writer");
    moat_buf req = MOAT_BUF_INIT;
    moat_bytes reply;
    moat_buf_putc(&req, '{');
    moat__member(&req, "model", model, true);
    moat_buf_puts(&req, ",\"messages\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) moat_buf_putc(&req, ',');
        moat_buf_putc(&req, '{');
        moat__member(&req, "role", messages[i].role, true);
        moat__member(&req, "content", messages[i].content, false);
        moat_buf_putc(&req, '}');
    }
    moat_buf_putc(&req, ']');
    if (opts && opts->max_tokens) moat_buf_printf(&req, ",\"max_tokens\":%d", opts->max_tokens);
    if (opts && opts->temperature) {
        char tmp[32];
        moat_buf_puts(&req, ",\"temperature\":");
        moat_buf_append(&req, tmp, (size_t)moat__number_text(tmp, *opts->temperature));
    }
    if (opts && opts->json_schema) {
        moat_buf_puts(&req, ",\"json_schema\":");
        moat_buf_puts(&req, opts->json_schema);
    }
    moat_buf_putc(&req, '}');
    if ((e = moat__call_built("ai.complete", &req, &reply))) return e;
    const char *t = (const char *)reply.data;
    if (!moat_json_get_string(t, reply.len, "text", &out->text)) return moat_errorf(MOAT_INTERNAL, "op ai.complete: the reply has no text: %.200s", t);
    return moat__ai_usage("ai.complete", t, reply.len, &out->input_tokens, &out->output_tokens, &out->model_call_id);
}

/* moat_ai_embed asks model (an operator's alias) for one vector per input
 * (a NULL-terminated list) and reads them into out. */
static inline moat_error *moat_ai_embed(const char *model, const char *const *input, moat_ai_embedding *out) {
    moat_error *e;
    if ((e = moat__need("ai.embed", "model", model)) || (e = moat__need("ai.embed", "input", input)) || (e = moat__need("ai.embed", "out", out))) return e;
    size_t n = 0;
    moat_buf req = MOAT_BUF_INIT, copy = MOAT_BUF_INIT;
    moat_bytes reply;
    moat_buf_putc(&req, '{');
    moat__member(&req, "model", model, true);
    moat_buf_puts(&req, ",\"input\":[");
    for (; input[n]; n++) {
        if (n) moat_buf_putc(&req, ',');
        moat_json_string(&req, input[n], strlen(input[n]));
    }
    moat_buf_puts(&req, "]}");
    if ((e = moat__call_built("ai.embed", &req, &reply))) return e;
    moat_buf_append(&copy, reply.data, reply.len);
    moat_ai_embedding_free(out);
    const char *t = (const char *)copy.data;
    moat_json outer;
    bool started = false;
    size_t cap = 0;
    if (!moat_json_find(t, copy.len, "vectors", &outer)) e = moat_errorf(MOAT_INTERNAL, "op ai.embed: the reply has no vectors");
    for (moat_bytes vec; !e;) {
        int r = moat_json_array_next(&outer, &started, &vec);
        if (r == 0) break;
        if (r < 0) {
            e = moat_errorf(MOAT_INTERNAL, "op ai.embed: malformed vectors in the reply");
            break;
        }
        moat_json in = {(const char *)vec.data, (const char *)vec.data + vec.len};
        bool vstarted = false;
        size_t dim = 0;
        for (moat_bytes num;;) {
            int s = moat_json_array_next(&in, &vstarted, &num);
            char tmp[64];
            if (s == 0) break;
            if (s < 0 || !moat__scalar(num, tmp, sizeof tmp)) {
                e = moat_errorf(MOAT_INTERNAL, "op ai.embed: vector %zu holds something other than numbers", out->len);
                break;
            }
            size_t at = out->len * (out->len ? out->dim : 0) + dim;
            if (at == cap) {
                cap = cap ? cap * 2 : 256;
                float *grown = (float *)realloc(out->vectors, cap * sizeof *grown);
                if (!grown) abort();
                out->vectors = grown;
            }
            out->vectors[at] = strtof(tmp, NULL);
            dim++;
        }
        if (e) break;
        if (out->len == 0) out->dim = dim;
        else if (dim != out->dim) {
            e = moat_errorf(MOAT_INTERNAL, "op ai.embed: vector %zu has %zu numbers, vector 0 %zu", out->len, dim, out->dim);
            break;
        }
        out->len++;
    }
    if (!e && out->len != n) e = moat_errorf(MOAT_INTERNAL, "op ai.embed: %zu inputs but the reply has %zu vectors", n, out->len);
    if (!e) e = moat__ai_usage("ai.embed", t, copy.len, &out->input_tokens, &out->output_tokens, &out->model_call_id);
    moat_buf_free(&copy);
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
