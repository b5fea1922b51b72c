package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/moat-sandbox/moat/abi"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0". When it
// is not, the version comes from the build info (versionOf).
var version = "dev"

func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi, version, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

// versionOf is moat's version line: the version the linker was given,
// else the module's (go install github.com/moat-sandbox/moat/cmd/moat@v1.2.3,
// or the pseudo-version Go 1.24 and later stamp a git checkout's build
// with: v0.0.0-TIME-COMMIT, +dirty), else the VCS revision go build stamps in a git checkout (its first 12
// digits, "-dirty" for uncommitted changes, and the commit's time), else
// "dev" saying how to get a better answer. A bug report then names the
// code it ran, where "dev" named nothing.
func versionOf(bi *debug.BuildInfo, linked, goVersion, platform string) string {
	wazero := "unknown"
	var rev, at string
	var modified bool
	v := linked
	if bi != nil {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				wazero = d.Version
			}
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	var extra string
	switch {
	case v != "dev":
	case rev != "":
		v = rev[:min(12, len(rev))]
		if modified {
			v += "-dirty"
		}
		if at != "" {
			extra = "commit of " + at + ", "
		}
	default:
		extra = "no version or VCS revision in the build: build in a git checkout with -buildvcs=true, or set -ldflags -X main.version=...; "
	}
	return fmt.Sprintf("moat %s (%sABI v%d, wazero %s, %s %s)", v, extra, abi.Version, wazero, goVersion, platform)
}
