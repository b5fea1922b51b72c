package host

import (
	"github.com/moat-sandbox/moat/host/internal/codeshare"
	"github.com/moat-sandbox/moat/host/ops"
)

// Defaults: what the host uses where neither the embedder (Config,
// Limits, LoadOptions), the module's manifest nor the profile sets a
// value. moat serve's configuration and `moat run`'s flags start from
// these too, so a value is written once.
const (
	// DefaultDBRows and DefaultDBBytes are an organization's module's db
	// quota (limits.db_rows, limits.db_bytes).
	DefaultDBRows  = ops.DefaultDBRows
	DefaultDBBytes = ops.DefaultDBBytes
	// DefaultScratchBytes and DefaultScratchFiles bound a run's scratch
	// directory, for a Scratch that leaves one at zero.
	DefaultScratchBytes = 64 << 20
	DefaultScratchFiles = 1024
	// DefaultNativeMemory is a native worker's memory (its cgroup's
	// limit) when neither the manifest nor the profile sets
	// limits.memory.
	DefaultNativeMemory = 256 << 20
	// DefaultNativeWorkers is how many native plugin workers a host runs
	// at once when Config.NativeWorkers is not set: with the default
	// 256 MiB each, 8 GiB at most.
	DefaultNativeWorkers = 32
)

// Bounds: what the host refuses past, whatever is configured.
const (
	// MaxActionName is the longest action name, in bytes.
	MaxActionName = 64
	// MaxMemoryLimitPages is the most a 32-bit WebAssembly memory can
	// hold (4 GiB).
	MaxMemoryLimitPages = 65536
	// MinCodeKeyBytes is the shortest code key a host accepts
	// (Config.CodeKey): 32 bytes, the size of the HMAC-SHA256 output, so
	// the key is not the weaker part.
	MinCodeKeyBytes = codeshare.MinKeyBytes
)

// What an interpreter's run sees of the host: the contract between the
// host and the languages' bootstraps.
const (
	// ScratchGuestPath is where a run's scratch directory is mounted.
	ScratchGuestPath = "/"
	// ScriptActionEnv names the environment variable that carries the
	// action an invocation of a Script runs.
	ScriptActionEnv = "MOAT_ACTION"
	// SnapshotEnv names the variable that gives a capture run its nonce.
	SnapshotEnv = "MOAT_SNAPSHOT"
)
