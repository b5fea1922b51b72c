# Guest SDK examples (issue 5): the hello plugins in C, C++, Rust and
# AssemblyScript, built by `bin/moat build` (the path and bytes of a user's
# build, with the SDKs the binary carries) with the real compilers that
# mk/toolchains.mk provisions. Each .wasm lands next to its example
# (git-ignored like examples/*/*.wasm), so `moat run examples/hello-c greet`
# finds it. examples/polyglot builds the same sources itself for its tests.

GUEST_WASM := examples/hello-c/hello-c.wasm examples/hello-cpp/hello-cpp.wasm \
	examples/hello-rust/hello-rust.wasm examples/hello-as/hello-as.wasm

# libclang-rt-19-dev: the sanitizers of the C SDK's native unit test.
TEST_APT_PACKAGES += libclang-rt-19-dev

SETUP += guests
.PHONY: guests
guests: toolchains $(GUEST_WASM) ## build the C, C++, Rust and AssemblyScript example plugins

examples/hello-c/hello-c.wasm: examples/hello-c/hello.c guests/c/moat.h | build
	@$(MOAT) build examples/hello-c

examples/hello-cpp/hello-cpp.wasm: examples/hello-cpp/hello.cpp guests/c/moat.h | build
	@$(MOAT) build examples/hello-cpp

examples/hello-rust/hello-rust.wasm: examples/hello-rust/Cargo.toml $(wildcard examples/hello-rust/src/*.rs) \
		guests/rust/Cargo.toml $(wildcard guests/rust/src/*.rs) | build
	@$(MOAT) build examples/hello-rust

examples/hello-as/hello-as.wasm: examples/hello-as/index.ts guests/assemblyscript/moat.ts | build
	@$(MOAT) build examples/hello-as
