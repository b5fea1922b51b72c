# Guest SDK examples (issue 5): the hello plugins in C, C++, Rust and
# AssemblyScript, built with the real compilers that mk/toolchains.mk
# provisions. Each .wasm lands next to its example (git-ignored like
# examples/*/*.wasm), so `moat run examples/hello-c greet` finds it.
# examples/polyglot builds the same sources itself for its tests.

GUEST_CLANG   ?= /usr/bin/clang-19
GUEST_CLANGXX ?= /usr/bin/clang++-19
# Debian's rustc and cargo, by full path: rustup's earlier on PATH have no
# wasm32-wasi target (../shared/research/toolchains.md).
GUEST_RUSTC   ?= /usr/bin/rustc
GUEST_CARGO   ?= /usr/bin/cargo
GUEST_CFLAGS  ?= -O2 -Wall -Wextra -Werror
CARGO_TARGET  := $(CURDIR)/.cache/cargo

GUEST_WASM := examples/hello-c/hello-c.wasm examples/hello-cpp/hello-cpp.wasm \
	examples/hello-rust/hello-rust.wasm examples/hello-as/hello-as.wasm

# libclang-rt-19-dev: the sanitizers of the C SDK's native unit test.
TEST_APT_PACKAGES += libclang-rt-19-dev

SETUP += guests
.PHONY: guests
guests: toolchains $(GUEST_WASM) ## build the C, C++, Rust and AssemblyScript example plugins

examples/hello-c/hello-c.wasm: examples/hello-c/hello.c guests/c/moat.h
	@echo "==> clang-19 $< -> $@"
	@$(GUEST_CLANG) --target=wasm32-wasi -mexec-model=reactor $(GUEST_CFLAGS) -Wl,--strip-all -I guests/c -o $@ $<

examples/hello-cpp/hello-cpp.wasm: examples/hello-cpp/hello.cpp guests/c/moat.h
	@echo "==> clang++-19 $< -> $@"
	@$(GUEST_CLANGXX) --target=wasm32-wasi -mexec-model=reactor -fno-exceptions $(GUEST_CFLAGS) -Wl,--strip-all -I guests/c -o $@ $<

examples/hello-rust/hello-rust.wasm: examples/hello-rust/Cargo.toml examples/hello-rust/Cargo.lock \
		$(wildcard examples/hello-rust/src/*.rs) guests/rust/Cargo.toml $(wildcard guests/rust/src/*.rs)
	@echo "==> cargo build examples/hello-rust -> $@"
	@RUSTC=$(GUEST_RUSTC) CARGO_TARGET_DIR=$(CARGO_TARGET) $(GUEST_CARGO) build --quiet --offline --release \
		--target wasm32-wasi --manifest-path examples/hello-rust/Cargo.toml
	@cp $(CARGO_TARGET)/wasm32-wasi/release/hello_rust.wasm $@

# asc runs in the example's directory: asconfig.json there names the SDK's
# abort by a path relative to it.
examples/hello-as/hello-as.wasm: examples/hello-as/index.ts examples/hello-as/asconfig.json guests/assemblyscript/moat.ts
	@echo "==> asc examples/hello-as -> $@"
	@cd examples/hello-as && $(TOOLCHAINS_DIR)/npm/node_modules/.bin/asc --config asconfig.json
