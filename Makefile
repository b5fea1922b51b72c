# moat — the two commands a newcomer needs are `make run` and `make test`.
# Both set up what they need (Go modules, tools) themselves.

GO        ?= go
BIN       := bin
MOAT      := $(BIN)/moat
export CGO_ENABLED := 0
BENCHTIME ?= 1s

.PHONY: all run build examples test check test-tools test-only lint tidy fmt vet staticcheck soak bench fixtures tools deps clean help

# Each part of moat that needs its own set-up (toolchains, interpreter
# WASMs, a browser) brings a fragment in mk/ that defines its targets and
# adds them to SETUP (run by `make test` and `make run`) and APT_PACKAGES.
SETUP :=
TEST_SETUP :=
include $(sort $(wildcard mk/*.mk))

all: build

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

deps: ## download the pinned Go modules
	@echo "==> go modules"
	@$(GO) mod download

build: deps ## build bin/moat and its confinement wrapper bin/moat-confine (static, no cgo)
	@echo "==> build $(MOAT) and $(BIN)/moat-confine"
	@$(GO) build -trimpath -buildvcs=auto -o $(MOAT) ./cmd/moat
	@$(GO) build -trimpath -o $(BIN)/moat-confine ./cmd/moat-confine

# The examples build through `moat build`, the one path a user's plugin
# takes too (the SDKs the binary carries, the same flags), so the bytes
# `make examples` writes are the bytes `moat build` writes for the same
# source, and rebuilding never breaks a signature.
GO_EXAMPLES := examples/hello-go examples/notes/go examples/thumbnail

examples: build ## build the Go example plugins with bin/moat build
	@for d in $(GO_EXAMPLES); do $(MOAT) build $$d || exit 1; done

run: build examples $(SETUP) ## build moat, the toolchains and the examples; invoke greet, then run code in three languages
	@echo "==> $(MOAT) run examples/hello-go greet --input World"
	@$(MOAT) run examples/hello-go greet --input World --config greeting=Hello && echo
	@echo "==> again: the count lives in moat's data dir (~/.local/share/moat/data; /var/lib/moat/data as root; --data or \$$MOAT_DATA to choose) and rises across runs"
	@$(MOAT) run examples/hello-go greet --input World --config greeting=Hello && echo
	@echo "==> the same plugin written in Rust: $(MOAT) run examples/hello-rust greet --input World"
	@$(MOAT) run examples/hello-rust greet --input World && echo
	@echo "==> $(MOAT) langs"
	@$(MOAT) langs
	@echo "==> code execution: C compiled to WASI, Python interpreted in WASM, bash confined natively"
	@$(MOAT) exec --lang c -e "$$(printf '#include <stdio.h>\nint main(void) { puts("hello from C on WASI"); return 0; }\n')"
	@$(MOAT) exec --lang python -e 'import sys; print("hello from CPython", sys.version.split()[0], "on", sys.platform)'
	@echo "==> bash runs natively under Landlock, seccomp and a cgroup: reading /etc/shadow is refused"
	@$(MOAT) exec --lang bash -e 'echo "hello from bash in $$PWD"; cat /etc/shadow' || true

# Debian packages the tests use: wabt (wat2wasm, for the WAT fixtures),
# iptables (per-cgroup egress rules), python3 (native fallback workloads).
APT_PACKAGES += wabt iptables python3
# APT_GET is apt-get waiting up to 10 minutes for another apt (an unattended
# upgrade, a second make) to let go of the dpkg lock, instead of failing at
# once; moat toolchains install waits as long (aptLockWait).
APT_GET := apt-get -o DPkg::Lock::Timeout=600
# APT_UPDATE is apt-get update, tried again while another apt holds the
# package lists' lock (which DPkg::Lock::Timeout does not cover) for as long.
APT_UPDATE := { updated=no; for i in $$(seq 120); do out=$$($(APT_GET) update -q 2>&1) && { updated=yes; break; }; case "$$out" in *"Could not get lock"*) sleep 5;; *) echo "$$out" >&2; break;; esac; done; [ $$updated = yes ]; }
# apt_install installs the Debian packages of $(1) that are missing (as root
# via apt; sudo otherwise), with apt-get update only when a first try fails.
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "==> apt-get install$$missing"; \
		if [ "$$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y -q $$missing >/dev/null 2>&1 || { $(APT_UPDATE) && DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y -q $$missing >/dev/null; }; \
		else sudo $(APT_GET) install -y -q $$missing >/dev/null; fi; fi
endef

tools: ## install the Debian packages moat's toolchains and tests use
	$(call apt_install,$(APT_PACKAGES))

test-tools: ## install the Debian packages only the tests use (a browser, sanitizers)
	$(call apt_install,$(TEST_APT_PACKAGES))

test: deps tools test-tools $(SETUP) $(TEST_SETUP) lint tidy test-only fuzz-smoke ## set up and run every test (and the linters: gofmt, go vet, staticcheck, go mod tidy)
# Three packages at a time (-p 3), and the I/O-bound tests of a package
# side by side (t.Parallel): the tests asserting a wall-clock or CPU bound
# take testenv.Timing's lock instead, so no two of them overlap anywhere.
# The suite mostly waits: at -p 2 it kept two cores 42% busy (25
# CPU-minutes in 30 minutes of wall, 2026-12-07, over the 25-minute
# budget); -p 3 took 15 minutes once three tests that shared /tmp or read
# a trail before it was written were isolated (RATIONALE). go vet
# ran just before (the vet target), so go test does not vet again. The
# cgroup v2 VM test runs alone afterwards: its guest kernel is emulated
# (TCG) and its native runs' limits are timed, so it cannot share the cores
# with another package (with languages/all beside it, a memory-limit run
# of its pool outlived its timeout).
GOTEST := $(GO) test -count=1 -p 3
test-only:
	@echo "==> go test ./... (three packages at a time; the timing tests one at a time under testenv.Timing's lock; builds Go guests for wasip1)"
	@MOAT_REQUIRE_TOOLS=1 $(GOTEST) -vet=off -timeout 30m $$($(GO) list ./... | grep -v -x github.com/moat-sandbox/moat/internal/vmtest)
	@echo "==> go test ./internal/vmtest (alone: the cgroup v2 VM)"
	@MOAT_REQUIRE_TOOLS=1 $(GOTEST) -vet=off -timeout 30m ./internal/vmtest/
	@echo "==> go test -race (store, host pool, supervisor, resident interpreters)"
	@CGO_ENABLED=1 MOAT_REQUIRE_TOOLS=1 $(GOTEST) -vet=off -race -run 'Concurrent|Store|KV|Supervisor|Conformance' $$($(GO) list ./host/... | grep -v -e /host/store/sqlite -e /host/store/postgres)
	@# The store backends' conformance suites ran whole above without -race;
	@# under it, the parts where goroutines meet.
	@CGO_ENABLED=1 MOAT_REQUIRE_TOOLS=1 $(GOTEST) -vet=off -race -run 'Conformance/(.*Concurrent.*|.*Race.*|Shared|KVGroupCommit|WatchModules)' ./host/store/sqlite/ ./host/store/postgres/
	@CGO_ENABLED=1 MOAT_REQUIRE_TOOLS=1 $(GOTEST) -vet=off -race -run 'TestResident' ./languages/javascript/

# check is the inner loop: every package with -short, where the slow tests
# (cold toolchain builds, every language where one shows the path, the
# bombs, the VM, the fuzz smoke) skip and say so; `make test` runs them all.
# No set-up, no MOAT_REQUIRE_TOOLS: a test whose tool is missing skips.
# -count=1 because go's test cache cannot see what a test reads through a
# subprocess (a guest built from testdata/ or guests/ by `go build`, clang
# or cargo, a toolchain under .toolchains): a cached "ok" could hide a
# broken SDK. go test's own vet checks (a subset, run beside the build)
# stay: after a change in abi/ they cost no measurable CPU beside the
# compile and link of the test binaries (docs/RATIONALE.md: the test tiers).
# The timing tests take a lock of this run's own (MOAT_TIMING_LOCK), not
# the machine's: on a shared machine they waited minutes for other runs'.
check: deps ## the inner loop: go test -short ./..., the slow tests skip (make test runs everything)
	@echo "==> go test -short ./... (the slow tests skip)"
	@start=$$(date +%s); load=$$(cut -d' ' -f1 /proc/loadavg); lock=$$(mktemp "$${TMPDIR:-/tmp}/moat-check-timing.XXXXXX"); \
		MOAT_TIMING_LOCK=$$lock $(GOTEST) -short -timeout 15m ./...; rc=$$?; rm -f "$$lock"; \
		echo "==> make check: $$(( $$(date +%s) - start )) s wall (load average $$load at the start, $$(cut -d' ' -f1 /proc/loadavg) at the end)"; exit $$rc

vet:
	@echo "==> go vet"
	@$(GO) vet ./...
	@GOOS=wasip1 GOARCH=wasm $(GO) vet ./guests/go/... ./examples/... ./testdata/goguest/...

fmt:
	@echo "==> gofmt"
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

staticcheck: ## staticcheck (pinned as a tool in go.mod), for linux and for the wasip1 guests
	@echo "==> staticcheck"
	@$(GO) build -o $(BIN)/staticcheck honnef.co/go/tools/cmd/staticcheck
	@$(BIN)/staticcheck ./...
	@GOOS=wasip1 GOARCH=wasm $(BIN)/staticcheck ./guests/... ./examples/... ./testdata/goguest/

lint: fmt vet staticcheck ## gofmt, go vet, staticcheck

tidy: ## go.mod and go.sum as go mod tidy leaves them
	@echo "==> go mod tidy -diff"
	@$(GO) mod tidy -diff

SOAK_ROUNDS ?= 20
soak: deps $(SETUP) ## long runs: invokes, native jobs and the hostile shapes (call trees, fills, compile bombs) round after round, nothing left behind
	@echo "==> go test -run Soak ($(SOAK_ROUNDS) rounds of the hostile shapes)"
	@MOAT_REQUIRE_TOOLS=1 MOAT_SOAK=$(SOAK_ROUNDS) $(GO) test -count=1 -p 1 -timeout 60m -run 'Soak' ./host/ ./host/native/ ./languages/all/

bench: deps ## benchmarks side by side with raw wazero, extism and plain os/exec, as a table
	@echo "==> go test -bench (benchtime $(BENCHTIME); about a minute)"
	@$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count 1 ./host/ ./host/native/ ./host/tasks/ | $(GO) run ./internal/benchtable
	@echo "==> languages: hello world, warm build cache, vs the same as plain processes"
	@$(GO) test -run '^$$' -bench 'Exec|Baseline' -benchtime 20x -count 1 ./languages/all/ | grep -E '^Benchmark'
	@echo "==> interpreted plugins: a warm call of a resident instance vs the interpreter started per call; idle memory"
	@$(GO) test -run '^$$' -bench 'PluginCall' -benchtime $(BENCHTIME) -count 1 ./languages/javascript/ ./languages/python/ ./languages/ruby/ | grep -E '^Benchmark'
	@echo "==> Extism: Plugin.Call through moat vs extism go-sdk directly, same plug-in"
	@$(GO) test -run '^$$' -bench 'Call' -benchtime $(BENCHTIME) -count 1 ./host/extism/ | grep -E '^Benchmark'
	@echo "==> the db family's store calls beside kv's, SQLite and PostgreSQL"
	@$(GO) test -run '^$$' -bench 'DBvsKV' -benchtime 2000x -count 1 ./host/store/postgres/ | grep -E '^Benchmark'
	@echo "==> hybrid knowledge search: full text and 5000 vectors of 768 dimensions, fused (SQLite)"
	@$(GO) test -run '^$$' -bench 'KnowledgeHybrid' -benchtime 20x -count 1 ./host/store/ | grep -E '^Benchmark'
	@echo "==> moat serve: echo and greet over HTTP/1.1 keep-alive vs a do-nothing echo handler, SQLite and PostgreSQL"
	@$(GO) test -run '^$$' -bench 'GreetVsCeiling' -benchtime 5000x -count 1 -v ./server/ | grep -E '^cpu:|^Benchmark|ceiling:|in process:' | $(GO) run ./internal/benchtable
	@echo "==> interpreted greets vs hello-go's on one server, in 10 alternating rounds (x-go: the median ratio of their times)"
	@$(GO) test -run '^$$' -bench 'GreetInterleaved' -benchtime 10000x -count 1 ./server/ | grep -E '^Benchmark'
	@echo "==> sessions over HTTP on loopback: create + first Python line (goal p50 <= 15 ms; E2B ~440 ms, Daytona ~110 ms), a run on a live context (<= 2 ms), fork (<= 20 ms) and resume (<= 50 ms) of a 50 MiB heap, memory per idle session"
	@$(GO) test -run '^$$' -bench 'Session(CreateFirstRun|RunRoundTrip|Fork|Resume|Idle)$$' -benchtime 50x -count 1 ./server/ | grep -E '^Benchmark'
	@echo "==> sessions held for real: 1 000 live Python and 10 000 JavaScript ones, RSS and PSS per idle session, time per create (minutes)"
	@$(GO) test -run '^$$' -bench 'SessionIdleCount' -benchtime 1x -count 1 -timeout 2h ./server/ | grep -E '^Benchmark'

# A fixture's first line may give wat2wasm flags: ";; wat2wasm: --debug-names".
fixtures: tools ## rebuild the WAT fixtures in testdata/
	@for f in testdata/wat/*.wat; do \
		out=testdata/$$(basename $${f%.wat}).wasm; flags=$$(sed -n '1s/^;; wat2wasm: //p' $$f); \
		echo "wat2wasm $$flags $$f -> $$out"; wat2wasm $$flags $$f -o $$out || exit 1; done

clean:
	rm -rf $(BIN) examples/*/*.wasm examples/notes/*/*.wasm
