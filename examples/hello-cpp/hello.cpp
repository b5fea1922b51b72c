// hello-cpp is the hello-c plugin in C++, to show that the C SDK's header
// (guests/c/moat.h) works from C++ too (clang++-19, -fno-exceptions: the
// wasm32-wasi libc++ has no exception support). Its one action, greet,
// greets the input (or "world"), counts its calls in the key-value store
// and logs who it greeted: the same plugin as examples/hello-go.
#include <charconv>
#include <string>
#include <string_view>

#include "moat.h"

namespace {

// Buffer owns a moat_buf (RAII).
struct Buffer {
    moat_buf b{};
    Buffer() = default;
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer() { moat_buf_free(&b); }
    std::string_view view() const { return {reinterpret_cast<const char *>(b.data), b.len}; }
};

moat_error *greet(moat_bytes input, moat_buf *out) {
    Buffer greeting, stored;
    bool has_greeting = false, has_count = false;
    if (moat_error *err = moat_config_get("greeting", &greeting.b, &has_greeting)) return err;
    std::string name = input.len ? std::string(reinterpret_cast<const char *>(input.data), input.len) : "world";
    moat_log_info("greeting", "name", name.c_str());

    unsigned long long count = 0;
    if (moat_error *err = moat_kv_get("count", &stored.b, &has_count)) return err;
    if (has_count) {
        std::string_view v = stored.view();
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), count);
        if (v.empty() || ec != std::errc() || end != v.data() + v.size())
            return moat_errorf(MOAT_GUEST_ERROR, "kv key count holds \"%s\", not a number", std::string(v).c_str());
    }
    std::string text = std::to_string(++count);
    if (moat_error *err = moat_kv_put("count", text.data(), text.size())) return err;

    std::string reply = std::string(has_greeting ? greeting.view() : "Hello") + ", " + name + "! (call #" + text + ")";
    moat_buf_append(out, reply.data(), reply.size());
    return nullptr;
}

const moat_action actions[] = {
    {"greet", greet},
};

}  // namespace

MOAT_ACTIONS(actions)
