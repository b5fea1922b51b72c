/*
 * hello-c is a minimal moat plugin in C, using the header-only SDK in
 * guests/c. Its one action, greet, greets the input (or "world"), counts
 * its calls in the key-value store and logs who it greeted: the same
 * plugin as examples/hello-go. See README.md to build and run it.
 */
#include <errno.h>
#include <stdlib.h>

#include "moat.h"

static moat_error *greet(moat_bytes input, moat_buf *out) {
    moat_buf greeting = {0}, stored = {0};
    bool has_greeting, has_count;
    moat_error *err = moat_config_get("greeting", &greeting, &has_greeting);
    if (err) goto done;
    const char *name = input.len ? (const char *)input.data : "world";
    moat_log_info("greeting", "name", name);

    long count = 0;
    if ((err = moat_kv_get("count", &stored, &has_count)) != NULL) goto done;
    if (has_count) {
        char *end;
        errno = 0;
        count = strtol((const char *)stored.data, &end, 10);
        if (stored.len == 0 || *end || errno) {
            err = moat_errorf(MOAT_GUEST_ERROR, "kv key count holds \"%s\", not a number", (const char *)stored.data);
            goto done;
        }
    }
    count++;
    char text[24];
    int n = snprintf(text, sizeof text, "%ld", count);
    if ((err = moat_kv_put("count", text, (size_t)n)) != NULL) goto done;
    moat_buf_printf(out, "%s, %s! (call #%ld)", has_greeting ? (const char *)greeting.data : "Hello", name, count);

done:
    moat_buf_free(&greeting);
    moat_buf_free(&stored);
    return err;
}

static const moat_action actions[] = {
    {"greet", greet},
};

MOAT_ACTIONS(actions)
