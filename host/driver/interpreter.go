package driver

import (
	"context"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Interpreter runs a script whose interpreter the host cannot run itself:
// one that is not a WASI command, or that imports functions the host's
// runtime does not provide. ruby.wasm is such an interpreter: a
// wit-bindgen reactor (ruby-init, rb-eval-string-protect...) importing
// rb-js-abi-host and canonical_abi, which languages/ruby drives in a
// wazero runtime of its own. The interpreted language supplies it
// (languages.InterpreterProvider puts it in host.Script.Interpreter).
//
// Only how an instance is made and how its script starts are the
// interpreter's. Everything else stays the host's, with one copy of each
// mechanism: the module's pool and isolation, the limits (the memory
// allocator comes in ctx, the deadline through ctx's cancellation), the op
// device bound to each call (mounted by the host in mc), the principal's
// authorization and the audit trail. Such a script must be resident
// (host.Script.Resident): its instance serves its calls through
// abi.OpNext.
//
// The interpreter's runtime must stop a guest whose context ends
// (wasmlimit.NewRuntimeConfig's CloseOnContextDone): the host does not
// rewrite its bytes with its own interrupt check.
type Interpreter interface {
	// Compile compiles wasm (the bytes given to host.Load, their tables
	// bounded) in the interpreter's runtime, or returns the module
	// compiled before, and that runtime: the host instantiates the module
	// there, with the host's arguments, environment, stdio, mounts, op
	// device and memory allocator, and no start function. env says where
	// the machine code is kept and how to add the host's WASI. The host
	// closes neither.
	Compile(ctx context.Context, env InterpreterEnv, wasm []byte) (wazero.Runtime, wazero.CompiledModule, error)
	// Run starts the instance (its _initialize, say) and runs the script
	// named by args (host.Script.Args) on it, returning when the script
	// ends: for a resident script, when the host stops it (its moat.next
	// answered stop, or ctx was cancelled) or it failed. It runs on a
	// goroutine of its own; the host closes mod afterwards.
	Run(ctx context.Context, mod api.Module, args []string) error
}

// InterpreterEnv is what the host gives an Interpreter's Compile.
type InterpreterEnv struct {
	// CacheDir is the host's compilation cache directory: the
	// interpreter's runtime keeps its machine code there too, so it is
	// compiled once per machine, not once per process.
	CacheDir string
	// MachineCacheDir, when set, is the machine's cache
	// (host.Config.MachineCacheDir): an interpreter that is the
	// machine's toolchain keeps its machine code and the image of its
	// start there instead, once for every data directory. Nothing a
	// tenant's code makes may go there.
	MachineCacheDir string
	// InstantiateWASI adds the host's WASI preview 1 to the
	// interpreter's runtime: poll_oneoff bounded as the host's, the
	// errno of each writing function named, so that a sleep or a refused
	// write behaves the same in every language.
	InstantiateWASI func(ctx context.Context, r wazero.Runtime) error
	// Nanosleep is the host's sleep (Spec.Nanosleep), for the
	// interpreter's own module configurations.
	Nanosleep func(current func() context.Context) sys.Nanosleep
}

// ScriptError is how an Interpreter's Run reports that the script itself
// failed: an exception its top-level code (or its serve loop) raised and
// did not rescue, as opposed to a trap or an exit. The host then reports
// that failure, even when a memory grow was refused on the way: an
// interpreter with a garbage collector takes a refused grow in its stride
// (Ruby's GC asks for more, is refused, and collects), so a refusal is the
// cause only when the script says so (OutOfMemory: Ruby's NoMemoryError).
type ScriptError struct {
	Message     string // the exception's class and first line
	OutOfMemory bool
}

func (e *ScriptError) Error() string { return e.Message }

// Resumer is an Interpreter whose live instances may be copied between
// two calls and whose copies it can enter: a session's fork or pause of
// a Ruby context (server/sessions). The host does the copying as it does
// for a script with a Snapshot (host.Module.CaptureResident: the
// instance's memory and the globals its compiled module exports, taken
// at a clock read after the park line), restores a copy into a fresh
// instance of the same compiled module, and asks the Resumer to enter it.
// Only the entry is the interpreter's: the host cannot call a reactor's
// eval itself, and knows no code to give it.
type Resumer interface {
	Interpreter
	// CaptureGlobals is how many globals the module Compile returned
	// exports to be copied (wasmsnap.Prepare's count); the host copies
	// and restores that many.
	CaptureGlobals(cm wazero.CompiledModule) int
	// Resume enters mod, whose memory and globals the host restored from
	// a copy (values are the numbers its park line gave), and serves its
	// calls as Run's serve loop does, returning when the host stops the
	// instance. The copy's frames below the entry never run again.
	Resume(ctx context.Context, mod api.Module, values []uint64) error
}
