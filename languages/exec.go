package languages

import (
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

// Status is how a code-execution job ended, in the vocabulary of Judge0
// and Piston users: the first four are the program's doing, the rest the
// limits'.
type Status string

const (
	StatusOK           Status = "ok"
	StatusInvalid      Status = "invalid"       // refused by Validate; see Violations
	StatusCompileError Status = "compile-error" // the compiler refused the source
	StatusRuntimeError Status = "runtime-error" // non-zero exit, trap or signal
	StatusTimeout      Status = "timeout"
	StatusMemoryLimit  Status = "memory-limit"
	StatusOutputLimit  Status = "output-limit"
)

// ExecLimits bound one job. Zero values take the executor's defaults.
type ExecLimits struct {
	Timeout        time.Duration // the run stage
	CompileTimeout time.Duration // the build stage
	MemoryBytes    int64
	MaxOutputBytes int64 // stdout and stderr, each; and the files returned (FilesOut), together
	// ScratchBytes and ScratchFiles bound the run's scratch directory, its
	// writable working directory: the bytes of its files and the names
	// made in it (host.Scratch). A WASM run past either gets ENOSPC.
	ScratchBytes int64
	ScratchFiles int64
}

// ExecRequest is one code-execution job: `moat exec --lang`, POST /v1/runs
// and the Piston-compatible /api/v2/execute all build one.
type ExecRequest struct {
	Language      string // a name or alias, as Lookup takes it
	Source        Source
	Stdin         []byte
	Args          []string
	Env           map[string]string
	Limits        ExecLimits
	Validation    ValidationProfile
	Principal     policy.Principal
	CorrelationID string
	// Mounts are host directories the program sees (moat exec --dir,
	// --file). A WASM run gets each at its GuestPath through the host's
	// grant filesystem (host.Mount.Granted is set for it); a native run
	// binds each in its own root, at its own path (read-only, or
	// read-write as an operator's grant, host/native Spec.Granted) or at
	// GuestPath (host/native Spec.Mounts). The HTTP API sets none.
	Mounts []host.Mount
	// Files are host files a native run may read, each bound read-only
	// at its own path (a WASM run takes a file as a Mount of a directory
	// holding a copy).
	Files []string
	// WorkDir is a native run's working directory when it is not the job
	// dir: one of Mounts or under one (host/native Spec.WorkDir).
	WorkDir string
	// FilesOut are patterns (path.Match, relative to the scratch
	// directory: "out.txt", "*.png", "plots/*.svg") naming the files the
	// run wrote that the result returns (ExecResult.Files), bounded by
	// MaxFilesOut and MaxOutputBytes. ValidateFilesOut checks them.
	FilesOut []string
	// Output, when set, is called with the run's output as the program
	// writes it (stream "stdout" or "stderr"), bounded as the result's
	// is (past MaxOutputBytes the run is stopped), native and WASM runs
	// alike; the result still holds all of it. Calls come from the run's
	// goroutines, one stream at a time each, and b is not the callee's to
	// keep. A program's own buffering applies: CPython block-buffers a
	// stdout that is not a terminal (print(..., flush=True), or
	// PYTHONUNBUFFERED=1 in Env).
	Output func(stream string, b []byte) `json:"-"`
	// WorkFiles are written into the run's working directory before it
	// starts: data files a program opens by a relative name (Judge0's
	// additional_files). A WASM run finds them in its scratch directory;
	// a native run in its job dir, where they are copied as the job
	// starts (host/native Spec.Seed). Their names are checked as
	// sources' are; the program may change or remove them, and they
	// count against the scratch limits.
	WorkFiles []File
	// Preparing, when set, is called as the job starts work a later job
	// of the same language does not repeat, and the func it returns when
	// that work ends: "build" for a build not in the cache (Go's first
	// builds its standard library, about 15 s), "load" for a WASM the
	// executor has not loaded yet (an interpreter's first compile to
	// machine code, seconds, unless the host's compilation cache has it).
	// The compiler gives no fraction, so this is all a caller can show.
	Preparing func(stage string) (done func())
}

// ExecResult is what a job produced. A failing program is a result with a
// status, not an error; Exec returns an error only when moat itself could
// not do the job (a toolchain is missing, the disk is full).
type ExecResult struct {
	Language      string        `json:"language"`
	Version       string        `json:"version"`
	Status        Status        `json:"status"`
	Stdout        []byte        `json:"stdout"`
	Stderr        []byte        `json:"stderr"`
	ExitCode      int           `json:"exit_code"`
	Signal        string        `json:"signal,omitempty"`
	Message       string        `json:"message,omitempty"` // why, for any status but ok
	CompileOutput string        `json:"compile_output,omitempty"`
	Violations    []Violation   `json:"violations,omitempty"`
	CompileTime   time.Duration `json:"compile_time_ns"`
	RunTime       time.Duration `json:"run_time_ns"`
	PeakMemory    uint64        `json:"peak_memory_bytes"`
	BuildCached   bool          `json:"build_cached"`
	// ScratchFull names the scratch directory's limit the program was
	// refused for ("bytes", "files"; it got ENOSPC), or is empty.
	ScratchFull string `json:"scratch_full,omitempty"`
	// Files are the files of the scratch directory that FilesOut named.
	Files []OutFile `json:"files,omitempty"`
}
