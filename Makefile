# moat — the two commands a newcomer needs are `make run` and `make test`.
# Both set up what they need (Go modules, tools) themselves.

GO        ?= go
BIN       := bin
MOAT      := $(BIN)/moat
export CGO_ENABLED := 0
BENCHTIME ?= 1s

.PHONY: all run build examples test test-only lint fmt vet staticcheck bench fixtures tools deps clean help

all: build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

deps: ## download the pinned Go modules
	@echo "==> go modules"
	@$(GO) mod download

build: deps ## build bin/moat (static, no cgo)
	@echo "==> build $(MOAT)"
	@$(GO) build -trimpath -o $(MOAT) ./cmd/moat

examples: deps ## build the example plugins
	@echo "==> build examples/hello-go/hello-go.wasm (GOOS=wasip1, c-shared)"
	@GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o examples/hello-go/hello-go.wasm ./examples/hello-go

run: build examples ## build moat and the example, and invoke its greet action
	@echo "==> $(MOAT) run examples/hello-go greet --input World"
	@$(MOAT) run examples/hello-go greet --input World --config greeting=Hello && echo
	@echo "==> again: the count lives in ./moat-data and rises across runs"
	@$(MOAT) run examples/hello-go greet --input World --config greeting=Hello && echo

tools: ## install the tools the tests use (wabt for the WAT fixtures), as root via apt
	@command -v wat2wasm >/dev/null 2>&1 || { \
		echo "==> apt-get install wabt (wat2wasm)"; \
		if [ "$$(id -u)" = 0 ]; then apt-get install -y -q wabt >/dev/null; \
		else sudo apt-get install -y -q wabt >/dev/null; fi; }

test: deps tools vet test-only ## set up and run every test
test-only:
	@echo "==> go test ./... (one package at a time: the timing tests need the cores; builds Go guests for wasip1)"
	@MOAT_REQUIRE_TOOLS=1 $(GO) test -count=1 -p 1 ./...
	@echo "==> go test -race (store, transport, host pool)"
	@CGO_ENABLED=1 MOAT_REQUIRE_TOOLS=1 $(GO) test -count=1 -race -run 'Concurrent|Store|KV' ./host/...

vet:
	@echo "==> go vet"
	@$(GO) vet ./...
	@GOOS=wasip1 GOARCH=wasm $(GO) vet ./guests/go/... ./examples/... ./testdata/goguest/...

fmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

staticcheck: ## staticcheck (pinned as a tool in go.mod), for linux and for the wasip1 guests
	@echo "==> staticcheck"
	@$(GO) build -o $(BIN)/staticcheck honnef.co/go/tools/cmd/staticcheck
	@$(BIN)/staticcheck ./...
	@GOOS=wasip1 GOARCH=wasm $(BIN)/staticcheck ./guests/... ./examples/... ./testdata/goguest/

lint: fmt vet staticcheck ## gofmt, go vet, staticcheck

bench: deps ## benchmarks side by side with raw wazero and extism, as a table
	@echo "==> go test -bench (benchtime $(BENCHTIME); about a minute)"
	@$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count 1 ./host/ | $(GO) run ./internal/benchtable

fixtures: tools ## rebuild the WAT fixtures in testdata/
	@for f in testdata/wat/*.wat; do \
		out=testdata/$$(basename $${f%.wat}).wasm; echo "wat2wasm $$f -> $$out"; wat2wasm $$f -o $$out || exit 1; done

clean:
	rm -rf $(BIN) examples/*/*.wasm
