// memo.c: an Extism plug-in in plain C that keeps a note in moat's
// key-value store through moat_call. It declares the few Extism kernel
// functions it uses by hand (the Extism C PDK's header declares the same),
// so it builds with nothing but clang and wasi-libc:
//
//   clang-19 --target=wasm32-wasi -O2 -mexec-model=reactor -Wl,--strip-all -o memo.wasm memo.c
//
//   moat run memo.wasm remember --input "buy milk"   ->  {"resp":{}}
//   moat run memo.wasm recall                         ->  {"resp":{"value":"YnV5IG1pbGs=","found":true}}
//
// (with a moat.yaml beside it that says kind: extism and asks for kv: true).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXTISM(name) __attribute__((import_module("extism:host/env"), import_name(name)))
EXTISM("input_length") uint64_t extism_input_length(void);
EXTISM("input_load_u8") uint8_t extism_input_load_u8(uint64_t offset);
EXTISM("alloc") uint64_t extism_alloc(uint64_t length);
EXTISM("free") void extism_free(uint64_t offset);
EXTISM("length") uint64_t extism_length(uint64_t offset);
EXTISM("load_u8") uint8_t extism_load_u8(uint64_t offset);
EXTISM("store_u8") void extism_store_u8(uint64_t offset, uint8_t value);
EXTISM("output_set") void extism_output_set(uint64_t offset, uint64_t length);
EXTISM("error_set") void extism_error_set(uint64_t offset);

// moat_call(op, req) -> reply: Extism memory offsets of the op name, its
// JSON request, and {"resp": ...} or {"error": {"code", "message"}}.
__attribute__((import_module("extism:host/user"), import_name("moat_call")))
uint64_t moat_call(uint64_t op, uint64_t req);

// to_extism copies n bytes into a new Extism memory block.
static uint64_t to_extism(const char *p, size_t n) {
	uint64_t off = extism_alloc(n);
	for (size_t i = 0; i < n; i++) extism_store_u8(off + i, (uint8_t)p[i]);
	return off;
}

// call runs op with the JSON request req and makes its reply the output.
static int32_t call(const char *op, const char *req) {
	uint64_t o = to_extism(op, strlen(op)), r = to_extism(req, strlen(req));
	uint64_t reply = moat_call(o, r);
	extism_free(o);
	extism_free(r);
	extism_output_set(reply, extism_length(reply));
	return 0;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// remember stores the input under the key "note" (JSON carries bytes as
// base64).
__attribute__((export_name("remember"))) int32_t remember(void) {
	uint64_t n = extism_input_length();
	if (n > 4096) {
		const char *msg = "a note is at most 4096 bytes";
		extism_error_set(to_extism(msg, strlen(msg)));
		return 1;
	}
	char *req = malloc(64 + (n + 2) / 3 * 4), *w = req;
	w += strlen(strcpy(w, "{\"key\":\"note\",\"value\":\""));
	for (uint64_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)extism_input_load_u8(i) << 16;
		if (i + 1 < n) v |= (uint32_t)extism_input_load_u8(i + 1) << 8;
		if (i + 2 < n) v |= extism_input_load_u8(i + 2);
		*w++ = b64[v >> 18 & 63];
		*w++ = b64[v >> 12 & 63];
		*w++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
		*w++ = i + 2 < n ? b64[v & 63] : '=';
	}
	strcpy(w, "\"}");
	int32_t rc = call("kv.put", req);
	free(req);
	return rc;
}

// recall returns kv.get's reply for the key "note".
__attribute__((export_name("recall"))) int32_t recall(void) {
	return call("kv.get", "{\"key\":\"note\"}");
}
