// Package languages turns source code into something moat can run: a WASM
// module (compiled languages), an interpreter WASM plus a script
// (interpreted languages), or a command for the native runner (languages
// without a WASM path). Each language is one package under languages/ that
// registers itself from init, as Caddy modules do; importing
// languages/all brings every one in.
//
// The flow for code execution is Lookup → Validate → Build → Run. Build
// results are cached by the hash of everything that goes into them (the
// language, its toolchain version and the source), so a second run of the
// same source does not rebuild.
package languages

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/moat-sandbox/moat/host"
)

// Path is how a language reaches execution.
type Path string

const (
	// PathCompiled: source is compiled to a WASI module and run by wazero.
	PathCompiled Path = "compiled"
	// PathInterpreted: an interpreter compiled to WASM runs the script.
	PathInterpreted Path = "interpreted"
	// PathNative: the program runs as a confined native process (the
	// kernel runner of host/native), for languages with no WASM path.
	PathNative Path = "native"
)

// Info describes a language for `moat langs`, the Piston runtimes list and
// error messages.
//
// Its JSON names are GET /v1/languages's, so `moat langs --json` and the
// HTTP API name a language's fields alike.
type Info struct {
	Name       string   `json:"name"`       // canonical name: "python", "c", "cpp"
	Aliases    []string `json:"aliases"`    // other names clients use: "py", "python3", "c++"
	Version    string   `json:"version"`    // the compiler's or interpreter's version
	Path       Path     `json:"path"`       // compiled, interpreted or native
	Extensions []string `json:"extensions"` // file extensions, with the dot: ".py"
	// Toolchain names what builds or interprets the code, for humans:
	// "clang 19 + wasi-libc", "CPython 3.12.0 (WASI)".
	Toolchain string `json:"toolchain"`
	// Why says why the language takes its path, when that is not the
	// WebAssembly one a reader would expect ("no JVM runs as a WASI
	// command..."): `moat langs` prints it under the table.
	Why string `json:"why,omitempty"`
}

// File is one file of a submission. Name is a relative slash-separated
// path without "..".
type File struct {
	Name    string
	Content []byte
}

// Source is a submission: one or more files, the first being the entry
// point unless Main names another.
type Source struct {
	Files []File
	Main  string
}

// Entry returns the entry file.
func (s Source) Entry() File {
	if s.Main != "" {
		for _, f := range s.Files {
			if f.Name == s.Main {
				return f
			}
		}
	}
	if len(s.Files) == 0 {
		return File{}
	}
	return s.Files[0]
}

// Violation is one reason a submission is refused before it is built.
// Rule is a stable identifier ("size", "encoding", "path", "import"...),
// Message says what is wrong and how to fix it.
type Violation struct {
	Rule    string `json:"rule"`
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

func (v Violation) String() string {
	loc := v.File
	if v.Line > 0 {
		loc = fmt.Sprintf("%s:%d", v.File, v.Line)
	}
	if loc != "" {
		return fmt.Sprintf("%s: %s (%s)", loc, v.Message, v.Rule)
	}
	return fmt.Sprintf("%s (%s)", v.Message, v.Rule)
}

// ValidationProfile configures Validate: the generic limits every
// language enforces and the language-specific static checks an operator
// can turn on.
type ValidationProfile struct {
	MaxSourceBytes int64 // total over all files; 0: DefaultMaxSourceBytes
	MaxFiles       int   // 0: DefaultMaxFiles
	// Deny lists language-specific constructs to refuse, by the names the
	// language documents (Python: "import:os", "import:subprocess"; C:
	// "include:sys/socket.h"...). Unknown names are ignored by languages
	// that do not define them.
	Deny []string
}

const (
	DefaultMaxSourceBytes = 1 << 20
	DefaultMaxFiles       = 64
)

// Language is implemented by each language package.
type Language interface {
	Info() Info
	// Validate checks a submission without building it. The generic
	// checks (size, file count, UTF-8, paths) are in ValidateCommon; a
	// language adds its own static checks.
	Validate(src Source, p ValidationProfile) []Violation
	// Build turns the source into an Artifact. A compile error is a
	// *CompileError carrying the compiler's message; any other error means
	// the toolchain itself failed.
	Build(ctx context.Context, env BuildEnv, src Source) (*Artifact, error)
}

// BuildEnv is what Build may use: a scratch directory of its own and the
// directories where toolchains and interpreter WASMs were provisioned.
type BuildEnv struct {
	WorkDir      string // empty, owned by this build, removed afterwards
	ToolchainDir string // see package toolchains
	// StateDir is a persistent directory of the language's own, kept
	// across builds (Go keeps its warmed standard-library cache there).
	// Only the trusted host writes it; builds may read it.
	StateDir string
}

// ArtifactKind says how an Artifact runs.
type ArtifactKind string

const (
	ArtifactWASM        ArtifactKind = "wasm"        // WASM is a WASI command
	ArtifactInterpreted ArtifactKind = "interpreted" // Interpreter runs Files
	ArtifactNative      ArtifactKind = "native"      // Command runs under host/native
)

// Artifact is the result of a build: what to run and how.
type Artifact struct {
	Kind ArtifactKind
	// WASM is the compiled WASI command (ArtifactWASM), or the interpreter
	// module's bytes (ArtifactInterpreted).
	WASM []byte
	// Files are written into a directory mounted read-only at /src for an
	// interpreted or native run (the script and its sibling files).
	Files []File
	// Args come before the user's arguments: for an interpreter, the
	// script path as the guest sees it ("/src/main.py").
	Args []string
	// Env is added to the run's environment (PYTHONPATH and the like).
	Env map[string]string
	// Mounts are more host directories an interpreted run sees, read-only
	// (Python's standard library). Each must stay where it is: a cached
	// artifact whose mount has gone is rebuilt.
	Mounts []host.Mount
	// Command is the native command line (ArtifactNative); "/src/..." in
	// it names the job's copy of Files.
	Command []string
	// ExtraExec are more binaries the native command may execute (a bash
	// script's coreutils); nothing else but Command[0] may be executed.
	ExtraExec []string
	// BuildLog is the compiler's output on success (warnings).
	BuildLog string
}

// CompileError is a build refused by the compiler: the user's code is
// wrong, not moat. Output is the compiler's message.
type CompileError struct {
	Language string
	Output   string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("%s: compile error:\n%s", e.Language, strings.TrimRight(e.Output, "\n"))
}

var (
	mu      sync.RWMutex
	byName  = map[string]Language{}
	aliases = map[string]string{}
)

// Register adds a language. It panics on a duplicate name or alias: two
// packages claiming one name is a programming error found at start-up.
func Register(l Language) {
	mu.Lock()
	defer mu.Unlock()
	in := l.Info()
	for _, n := range append([]string{in.Name}, in.Aliases...) {
		n = strings.ToLower(n)
		if _, dup := aliases[n]; dup {
			panic(fmt.Sprintf("languages: %q registered twice", n))
		}
		aliases[n] = in.Name
	}
	byName[in.Name] = l
}

// UnknownLanguageError is returned by Lookup.
type UnknownLanguageError struct {
	Name  string
	Known []string
	// Suggestion is the language Name is a likely typo of ("python" for
	// "pyton"), or "".
	Suggestion string
}

func (e *UnknownLanguageError) Error() string {
	if e.Suggestion != "" {
		return fmt.Sprintf("unknown language %q: did you mean %q? Use one of %s (see `moat langs`)", e.Name, e.Suggestion, strings.Join(e.Known, ", "))
	}
	return fmt.Sprintf("unknown language %q: use one of %s (see `moat langs`)", e.Name, strings.Join(e.Known, ", "))
}

// Lookup finds a language by name or alias, case-insensitively.
func Lookup(name string) (Language, error) {
	mu.RLock()
	defer mu.RUnlock()
	if canon, ok := aliases[strings.ToLower(strings.TrimSpace(name))]; ok {
		return byName[canon], nil
	}
	return nil, &UnknownLanguageError{Name: name, Known: names(), Suggestion: suggest(name)}
}

// All returns every registered language, sorted by name.
func All() []Language {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]Language, 0, len(byName))
	for _, n := range names() {
		out = append(out, byName[n])
	}
	return out
}

// Names returns every registered language's name, sorted. Unlike
// All()[i].Info().Name it runs nothing: a language's Info may run its
// toolchain for the version (javac alone is 0.3 CPU-seconds), and every
// moat command lists the names in its --lang help at start-up.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	return names()
}

func names() []string {
	ns := make([]string, 0, len(byName))
	for n := range byName {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return slices.Clip(ns)
}

// ArtifactRunner is implemented by a language whose artifacts are not an
// ordinary WASI command: Ruby's interpreter is a reactor that a Go driver
// initializes and feeds. The executor calls RunArtifact for the run stage
// instead of running Artifact.WASM as a command; everything else (cache,
// limits, statuses) stays the executor's.
type ArtifactRunner interface {
	RunArtifact(ctx context.Context, env RunEnv, a *Artifact, in RunInput) (*RunOutput, error)
}

// Snapshotter is implemented by the interpreted languages whose runs can
// start from a snapshot of their interpreter (host.Snapshot): started
// once, its state copied, and each run entered with code that hands it
// its script, arguments and environment.
type Snapshotter interface {
	// Snapshot is how a's interpreter is captured; nil: not at all.
	Snapshot(a *Artifact) *host.Snapshot
	// EntryCode is what a run of a with args (after the artifact's) and
	// env (the whole environment) enters the image with; false: the run
	// starts cold (the interpreter would read env as it starts, say).
	EntryCode(a *Artifact, args []string, env map[string]string) (string, bool)
	// ResidentSnapshot is how a resident plugin's instances are captured
	// (after its top level, where its SDK would serve) and resumed; nil:
	// they start cold.
	ResidentSnapshot(a *Artifact, src Source) *host.Snapshot
}

// RunEnv is what a run may use: the host whose runtime, compilation cache
// and limits apply.
type RunEnv struct {
	Host *host.Host
	// Preparing is ExecRequest.Preparing (may be nil): a runner that
	// compiles an interpreter the first time calls it with "load".
	Preparing func(stage string) (done func())
}

// SrcGuestPath is where an interpreted run sees the artifact's Files.
const SrcGuestPath = "/src"

// RunMounts are the directories an interpreted run of a sees: srcDir
// (holding its Files; none when empty) read-only at SrcGuestPath, then the
// artifact's own Mounts.
func (a *Artifact) RunMounts(srcDir string) []host.Mount {
	var ms []host.Mount
	if srcDir != "" {
		ms = append(ms, host.Mount{HostDir: srcDir, GuestPath: SrcGuestPath, ReadOnly: true})
	}
	return append(ms, a.Mounts...)
}

// RunInput is the run stage's input. SrcDir holds the artifact's Files (to
// be seen at /src, read-only).
type RunInput struct {
	Stdin  []byte
	Args   []string
	Env    map[string]string
	Limits ExecLimits
	SrcDir string
	// Scratch is the run's scratch directory, its writable working
	// directory (mounted at host.ScratchGuestPath under its quota; see
	// host.OpenScratchFS for a runtime of the runner's own).
	Scratch *host.Scratch
}

// RunOutput is what a run produced. Limits hit are returned as *host.Error
// values (timeout, memory_limit, output_too_large), not here.
type RunOutput struct {
	Stdout, Stderr []byte
	ExitCode       int
	PeakMemory     uint64 // bytes of linear memory the run reached
	ScratchFull    string // as host.RunResult.ScratchFull
}
