package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/moat-sandbox/moat/abi"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func versionString() string {
	wazero := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				wazero = d.Version
			}
		}
	}
	return fmt.Sprintf("moat %s (ABI v%d, wazero %s, %s %s/%s)", version, abi.Version, wazero, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
