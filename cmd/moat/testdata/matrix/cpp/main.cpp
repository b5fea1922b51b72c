// The acceptance matrix's C++ plugin (see ../README.md): action all tries
// every op family through guests/c/moat.h and prints one line per family,
// "<family> ok <value>" or "<family> err <code>: <message>"; action noop
// returns its input. moat build writes the binary's moat.h beside this file.
//
// The wasm32-wasi libc++ has no exceptions (-fno-exceptions), so a family
// returns an Outcome, its value or the SDK's error, and the SDK's C
// structures are held by small RAII owners.
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "moat.h"

namespace {

// Owned<T, Free> owns one of the SDK's caller-owned structures (a moat_buf,
// a moat_media_item...): zero-initialized, released by Free on scope exit.
template <typename T, void (*Free)(T *)>
struct Owned {
    T v{};
    Owned() = default;
    Owned(const Owned &) = delete;
    Owned &operator=(const Owned &) = delete;
    ~Owned() { Free(&v); }
    T *get() { return &v; }
    T *operator->() { return &v; }
};

using Buffer = Owned<moat_buf, moat_buf_free>;

std::string str(const moat_buf &b) { return {reinterpret_cast<const char *>(b.data), b.len}; }

// Outcome is what a family's attempt gives: a value, or the error the SDK
// reported as "code: message".
struct Outcome {
    std::string value;
    std::string error;  // empty: success

    bool failed() const { return !error.empty(); }

    Outcome(std::string v) : value(std::move(v)) {}
    Outcome(const moat_error *e) : error(e->message[0] ? std::string(e->code) + ": " + e->message : e->code) {}
    static Outcome io(int errnum) {
        Outcome o{std::string()};
        o.error = std::string("io: ") + std::strerror(errnum);
        return o;
    }
};

// config reads a value every moat.yaml of the matrix sets.
Outcome config(const char *key) {
    Buffer value;
    bool found = false;
    if (const moat_error *err = moat_config_get(key, value.get(), &found)) return err;
    if (!found) return moat_errorf(MOAT_NOT_FOUND, "config has no %s", key);
    return str(value.v);
}

Outcome tryLog(const std::string &input) {
    if (const moat_error *err = moat_log_fields(MOAT_LEVEL_INFO, "matrix", "input", input.c_str(), static_cast<const char *>(nullptr)))
        return err;
    return std::string();
}

Outcome tryConfig(const std::string &) {
    Buffer value;
    bool found = false;
    if (const moat_error *err = moat_config_get("greeting", value.get(), &found)) return err;
    return found ? str(value.v) : "-";
}

Outcome tryKV(const std::string &input) {
    Buffer old;
    bool found = false;
    if (const moat_error *err = moat_kv_get("matrix", old.get(), &found)) return err;
    if (const moat_error *err = moat_kv_put("matrix", input.data(), input.size())) return err;
    return found ? str(old.v) : "-";
}

Outcome tryDB(const std::string &input) {
    int64_t n = 0;
    if (const moat_error *err = moat_db_count("notes", nullptr, &n)) return err;
    Owned<moat_json_writer, moat_jw_free> doc;
    moat_jw_object(doc.get());
    moat_jw_key(doc.get(), "title");
    moat_jw_string_n(doc.get(), input.data(), input.size());
    moat_jw_end(doc.get());
    Buffer id;
    if (const moat_error *err = moat_db_insert("notes", moat_jw_text(doc.get()), id.get(), nullptr)) return err;
    return std::to_string(n);
}

Outcome tryKnowledge(const std::string &input) {
    Owned<moat_knowledge_hits, moat_knowledge_hits_free> hits;
    if (const moat_error *err = moat_knowledge_search("docs", "matrix", nullptr, hits.get())) return err;
    if (const moat_error *err = moat_knowledge_add("docs", input.c_str(), ("matrix " + input).c_str(), nullptr, nullptr)) return err;
    return std::to_string(hits->len);
}

Outcome tryTasks(const std::string &input) {
    moat_task_opts opts{};
    opts.delay = "1h";
    Buffer id;
    if (const moat_error *err = moat_task_enqueue("noop", input.data(), input.size(), &opts, id.get(), nullptr)) return err;
    Owned<moat_task_info, moat_task_info_free> info;
    if (const moat_error *err = moat_task_status(reinterpret_cast<const char *>(id->data), info.get())) return err;
    return str(info->state);
}

Outcome tryHTTP(const std::string &) {
    Outcome url = config("url");
    if (url.failed()) return url;
    moat_http_request req{};
    req.url = url.value.c_str();
    req.timeout_ms = 5000;
    Owned<moat_http_response, moat_http_response_free> resp;
    if (const moat_error *err = moat_http_fetch(&req, resp.get())) return err;
    return std::to_string(resp->status) + " " + str(resp->body);
}

Outcome tryMedia(const std::string &) {
    Outcome pdf = config("pdf");
    if (pdf.failed()) return pdf;
    Owned<moat_media_item, moat_media_item_free> item, info;
    if (const moat_error *err = moat_media_put(pdf.value.data(), pdf.value.size(), "application/pdf", item.get())) return err;
    if (const moat_error *err = moat_media_info(reinterpret_cast<const char *>(item->id.data), info.get())) return err;
    return str(info->type) + " " + std::to_string(info->size);
}

Outcome tryAI(const std::string &) {
    const moat_ai_message msgs[] = {{MOAT_ROLE_USER, "say matrix"}};
    Owned<moat_ai_completion, moat_ai_completion_free> c;
    if (const moat_error *err = moat_ai_complete("small-chat", msgs, 1, nullptr, c.get())) return err;
    return str(c->text);
}

// tryFiles reads the granted file with stdio (Debian's wasm32-wasi libc++
// is built without <fstream>), the FILE owned by a unique_ptr: wasi-libc
// finds the path under the directory the host preopened for the grant.
Outcome tryFiles(const std::string &) {
    Outcome path = config("file");
    if (path.failed()) return path;
    std::unique_ptr<std::FILE, int (*)(std::FILE *)> f(std::fopen(path.value.c_str(), "r"), std::fclose);
    if (!f) return Outcome::io(errno);
    std::string text;
    char chunk[512];
    for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, f.get())) > 0;) text.append(chunk, n);
    if (std::ferror(f.get())) return Outcome::io(errno);
    return text;
}

struct Family {
    std::string_view name;
    Outcome (*attempt)(const std::string &input);
};

const Family families[] = {
    {"log", tryLog},     {"config", tryConfig}, {"kv", tryKV},       {"db", tryDB}, {"knowledge", tryKnowledge},
    {"tasks", tryTasks}, {"http", tryHTTP},     {"media", tryMedia}, {"ai", tryAI}, {"files", tryFiles},
};

// line is "<family> ok <value>" without trailing white space, or
// "<family> err <error>".
std::string line(std::string_view family, const Outcome &o) {
    std::string s(family);
    if (o.failed()) return s + " err " + o.error;
    s += " ok " + o.value;
    s.erase(s.find_last_not_of(" \t\r\n") + 1);
    return s;
}

moat_error *all(moat_bytes input, moat_buf *out) {
    const std::string in(reinterpret_cast<const char *>(input.data), input.len);
    std::string report;
    for (const Family &f : families) report += line(f.name, f.attempt(in)) + "\n";
    moat_buf_append(out, report.data(), report.size());
    return nullptr;
}

moat_error *noop(moat_bytes input, moat_buf *out) {
    moat_buf_append(out, input.data, input.len);
    return nullptr;
}

const moat_action actions[] = {
    {"all", all},
    {"noop", noop},
};

}  // namespace

MOAT_ACTIONS(actions)
