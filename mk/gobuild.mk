# A Go plugin's rebuild after a one-line change, as a person meets it
# (issue 35: <= 3 s): TestPluginRebuild builds a copy of examples/hello-go,
# changes one line and builds again, logging each stage of both builds
# (the SDK layer, the job's GOCACHE, the confined go build's wall and CPU).
# `make bench` runs it first, beside the spawn benchmarks of host/native.

.PHONY: bench-gobuild
bench: bench-gobuild

bench-gobuild: deps ## a Go plugin's build and its rebuild after a one-line change, each stage timed (goal: rebuild <= 3 s)
	@echo "==> a Go plugin's rebuild after a one-line change (examples/hello-go copied; goal <= 3 s)"
	@$(GO) test -count=1 -run '^TestPluginRebuild$$' -v ./languages/golang/ | grep -E 'build|rebuild|PASS|FAIL|ok'
