package main

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	deps := []*debug.Module{{Path: "github.com/tetratelabs/wazero", Version: "v1.12.0"}}
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "86dc8770b9fdfef625d347d2ad0929c1daf6ce9f"},
		{Key: "vcs.time", Value: "2026-11-27T19:03:50Z"}, {Key: "vcs.modified", Value: "false"}}
	dirty := append(append([]debug.BuildSetting(nil), vcs[:3]...), debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	for _, tc := range []struct {
		name   string
		bi     *debug.BuildInfo
		linked string
		want   string
	}{
		{"linked", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Deps: deps, Settings: vcs}, "v0.3.0",
			"moat v0.3.0 (ABI v1, wazero v1.12.0, go1.26.8 linux/amd64)"},
		{"go install at a version", &debug.BuildInfo{Main: debug.Module{Version: "v0.2.1"}, Deps: deps}, "dev",
			"moat v0.2.1 (ABI v1, wazero v1.12.0, go1.26.8 linux/amd64)"},
		// Go 1.24 and later stamp a git checkout's build with a
		// pseudo-version that names the commit and its time.
		{"a pseudo-version", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261127192552-3208e3fc32cc"}, Deps: deps, Settings: vcs}, "dev",
			"moat v0.0.0-20261127192552-3208e3fc32cc (ABI v1, wazero v1.12.0, go1.26.8 linux/amd64)"},
		{"a git checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Deps: deps, Settings: vcs}, "dev",
			"moat 86dc8770b9fd (commit of 2026-11-27T19:03:50Z, ABI v1, wazero v1.12.0, go1.26.8 linux/amd64)"},
		{"uncommitted changes", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Deps: deps, Settings: dirty}, "dev",
			"moat 86dc8770b9fd-dirty (commit of 2026-11-27T19:03:50Z, ABI v1, wazero v1.12.0, go1.26.8 linux/amd64)"},
		{"nothing known", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev",
			"moat dev (no version or VCS revision in the build: build in a git checkout with -buildvcs=true, or set -ldflags -X main.version=...; ABI v1, wazero unknown, go1.26.8 linux/amd64)"},
		{"no build info", nil, "dev",
			"moat dev (no version or VCS revision in the build: build in a git checkout with -buildvcs=true, or set -ldflags -X main.version=...; ABI v1, wazero unknown, go1.26.8 linux/amd64)"},
	} {
		if got := versionOf(tc.bi, tc.linked, "go1.26.8", "linux/amd64"); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
