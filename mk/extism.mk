# Extism plug-ins (issue 7): host/extism's tests build the stock plug-ins in
# testdata/extism with stock Go and the Extism Go PDK, a module of their own
# (pinned in testdata/extism/go.mod and go.sum). This fetches it into the Go
# module cache so the tests build offline; the C plug-in needs clang-19 and
# wasi-libc, which mk/toolchains.mk installs.

SETUP += extism-pdk
.PHONY: extism-pdk
extism-pdk: ## fetch the Extism Go PDK that testdata/extism pins
	@cd testdata/extism && GOWORK=off GOFLAGS=-mod=readonly go mod download github.com/extism/go-pdk
