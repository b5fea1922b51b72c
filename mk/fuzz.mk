# Fuzzing (issue 12): the op wire encoding (abi) and the device-file and
# pipe transports (host/transport). Each target's committed seed corpus,
# testdata/fuzz/<Target>/ beside its test, runs in every plain `go test`;
# `make fuzz-smoke` (a prerequisite of `make test`) fuzzes each target
# briefly, `make fuzz` longer. Go fuzzes one target per run, so the targets
# run one after another. A failure leaves its input in the package's
# testdata/fuzz/<Target>/: commit it with the fix, and it stays a seed.

FUZZTIME       ?= 60s
# 3s: the smoke of 13 targets in `make test` (whose budget is 15 minutes on
# two cores); the committed seeds run in every go test, and `make fuzz` is
# where inputs are searched for.
FUZZSMOKETIME  ?= 3s
FUZZ_TARGETS   := ./abi:FuzzWire ./abi:FuzzPacking ./host/transport:FuzzDevice ./host/transport:FuzzPipe ./internal/wasmrewrite:FuzzLimitTables ./internal/wasmrewrite:FuzzInstrumentDeadline ./server:FuzzArchive ./policy:FuzzParseManifest ./policy:FuzzParseProfile ./server:FuzzDecodeJSONBody ./host/store:FuzzDBDocument ./host/store:FuzzDBWhere ./host/media:FuzzIngest

# The instrumented build is what costs (the package and everything it
# imports, compiled for coverage: a minute or more cold, for seconds of
# fuzzing), so each package is built once, `go test -c -fuzz=.`, and that
# binary fuzzes each of its targets in turn from the package's directory
# (where its testdata/fuzz/ corpus is), with the fuzz cache go test would
# use ($GOCACHE/fuzz/<import path>): 7 builds for 13 targets, not 13.
FUZZ_PKGS := $(sort $(foreach t,$(FUZZ_TARGETS),$(firstword $(subst :, ,$(t)))))

# Go 1.26's fuzz coordinator can fail a target with a bare "context
# deadline exceeded" as -fuzztime ends while a worker is mid-call
# (go.dev/issue/75804, fixed in Go 1.27): no input fails, and none is
# written. Such a run is tried once more; any other failure, or one that
# wrote a failing input, fails at once.
define run_fuzz
	@set -e; log=$$(mktemp); bin=$$(mktemp -d); trap 'rm -rf $$log $$bin' EXIT; \
	cache=$$($(GO) env GOCACHE)/fuzz; \
	for pkg in $(FUZZ_PKGS); do \
		echo "==> build $$pkg for fuzzing (once for its targets)"; \
		$(GO) test -c -fuzz=. -o $$bin/fuzz.test $$pkg; \
		imp=$$($(GO) list $$pkg); \
		for t in $(FUZZ_TARGETS); do \
			[ "$${t%%:*}" = "$$pkg" ] || continue; name=$${t##*:}; \
			echo "==> fuzz $$name ($$pkg, $(1))"; \
			for try in 1 2; do \
				if (cd $$pkg && $$bin/fuzz.test -test.run='^$$' -test.fuzz="^$$name$$" -test.fuzztime=$(1) -test.fuzzcachedir=$$cache/$$imp) >$$log 2>&1; then cat $$log; break; fi; \
				cat $$log; \
				if [ $$try = 1 ] && grep -q 'context deadline exceeded' $$log && ! grep -q 'Failing input written' $$log; then \
					echo "==> $$name: the fuzz coordinator's deadline race (go.dev/issue/75804), no failing input: once more"; continue; fi; \
				exit 1; \
			done; \
		done; \
	done
endef

.PHONY: fuzz fuzz-smoke
fuzz: ## fuzz the op wire encoding and the transports, FUZZTIME (60s) each
	$(call run_fuzz,$(FUZZTIME))

fuzz-smoke: ## fuzz each target briefly (FUZZSMOKETIME, 3s): run by make test
	$(call run_fuzz,$(FUZZSMOKETIME))
