package wasmlimit

import "github.com/tetratelabs/wazero"

const (
	// PageSize is the size of a WebAssembly memory page.
	PageSize = 65536
	// MaxMemoryPages is the most a 32-bit WebAssembly memory can hold
	// (4 GiB): the runtime's ceiling. The limits that matter are the
	// Allocator's, per instance and per invocation.
	MaxMemoryPages = 65536
)

// RuntimeConfigID names the settings of NewRuntimeConfig that shape
// compiled machine code, for hosts that share it (host.Config.CodeKey):
// wazero's own cache key covers the module's bytes, CloseOnContextDone,
// the CPU's features, wazero's version and the platform, but not the
// engine, the core features or the memory ceiling, so a shared
// artifact's key takes this too. Change it whenever NewRuntimeConfig
// changes, and hosts of the old and the new configuration stop trading
// code.
const RuntimeConfigID = "compiler;core-features=v2;close-on-context-done;memory-limit-pages=65536"

// NewRuntimeConfig is the configuration of every wazero runtime moat makes:
//
//   - the optimizing compiler, with cache (when not nil) as its
//     compilation cache, so a module is compiled once per machine whichever
//     host runs it (the cache key is the module's bytes, not this config);
//   - CloseOnContextDone, which is what lets a deadline stop a guest stuck
//     in a loop (it costs an exit to Go on every loop back-edge). Package
//     host turns it off for its own runtime, whose modules carry a cheaper
//     check of their own (internal/wasmrewrite); the Extism adapter and the
//     Ruby driver, which run modules the host does not rewrite, keep it;
//   - the memory ceiling MaxMemoryPages, under which each instance's
//     Allocator applies the invocation's limit;
//   - no DWARF line information: wazero parses the DWARF sections whenever
//     a guest ends with an error, a non-zero exit included, which for a
//     large guest (CPython's 26 MB) costs seconds per run. Traps still name
//     the guest's functions (the name section). A host that wants the lines
//     chains WithDebugInfoEnabled(true).
func NewRuntimeConfig(cache wazero.CompilationCache) wazero.RuntimeConfig {
	// Change RuntimeConfigID with anything set here.
	rc := wazero.NewRuntimeConfigCompiler().
		WithCloseOnContextDone(true).
		WithDebugInfoEnabled(false).
		WithMemoryLimitPages(MaxMemoryPages)
	if cache != nil {
		rc = rc.WithCompilationCache(cache)
	}
	return rc
}
