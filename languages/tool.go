package languages

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host/native"

	"golang.org/x/sys/unix"
)

// Tool is one run of a compiler (or any build tool) on untrusted source.
// RunTool runs it under host/native, never bare: the compiler sees the
// system directories and ReadOnly read-only, writes only the build's
// WorkDir and ReadWrite, executes only Command[0], its loader and
// ExtraExec, and has no network at all. A compiler is a large C++ program
// fed attacker-chosen input (and Go's and Rust's toolchains run code at
// build time in other setups), so it gets the same confinement as the
// programs it builds.
type Tool struct {
	Command []string
	// Env is the whole environment. PATH (/usr/bin:/bin), HOME and TMPDIR
	// (the WorkDir) and LANG are added unless given.
	Env []string
	// ExtraExec are more binaries, or directories of binaries, the tool
	// runs (clang runs wasm-ld; go runs compile and link).
	ExtraExec []string
	ReadOnly  []string
	ReadWrite []string
	// MemoryBytes bounds the tool (cgroup); default DefaultToolMemory.
	MemoryBytes int64
	// Pids bounds processes and threads; default 256 (the Go toolchain
	// runs a compiler per package, each with its threads).
	Pids int64
	// AddressSpace overrides the RLIMIT_AS derived from MemoryBytes (see
	// native.Spec.AddressSpace).
	AddressSpace uint64
}

// DefaultToolMemory is a compiler's memory limit unless the Tool says
// otherwise.
const DefaultToolMemory = 2 << 30

// DefaultCompileTimeout bounds a build when the context has no deadline.
const DefaultCompileTimeout = 60 * time.Second

// BuildLimitError is a build stopped by a limit: the compiler ran out of
// time or memory. The executor reports it as StatusTimeout or
// StatusMemoryLimit with the stage named in the message.
type BuildLimitError struct {
	Status Status // StatusTimeout or StatusMemoryLimit
	Tool   string
	Reason string
}

func (e *BuildLimitError) Error() string {
	return fmt.Sprintf("build: %s stopped: %s", e.Tool, e.Reason)
}

// RunTool runs t confined in env.WorkDir and returns what it produced. A
// non-zero exit is a Result for the caller to judge (usually a
// *CompileError); hitting a limit is a *BuildLimitError; a run that could
// not be set up or was refused by confinement is an error.
func RunTool(ctx context.Context, env BuildEnv, t Tool) (*native.Result, error) {
	if env.WorkDir == "" {
		return nil, errors.New("build: no work dir")
	}
	timeout := DefaultCompileTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, &BuildLimitError{Status: StatusTimeout, Tool: filepath.Base(t.Command[0]), Reason: "the compile time limit passed before the compiler started"}
		}
	}
	tmp := filepath.Join(env.WorkDir, ".tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	envv := withDefaultEnv(t.Env, map[string]string{
		"PATH": native.DefaultPath, "HOME": env.WorkDir, "TMPDIR": tmp, "LANG": "C.UTF-8",
	})
	spec := native.Spec{
		Command: t.Command, Dir: env.WorkDir, Env: envv, Timeout: timeout,
		MemoryBytes: t.MemoryBytes, Pids: t.Pids, ExtraExec: t.ExtraExec,
		ReadOnly: t.ReadOnly, ReadWrite: t.ReadWrite, AddressSpace: t.AddressSpace,
	}
	if spec.MemoryBytes <= 0 {
		spec.MemoryBytes = DefaultToolMemory
	}
	if spec.Pids <= 0 {
		spec.Pids = 256
	}
	res, err := native.Run(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("build: %s: %w", filepath.Base(t.Command[0]), err)
	}
	name := filepath.Base(t.Command[0])
	switch res.Status {
	case native.StatusTimeout:
		return res, &BuildLimitError{Status: StatusTimeout, Tool: name, Reason: res.Reason}
	case native.StatusMemoryLimit:
		return res, &BuildLimitError{Status: StatusMemoryLimit, Tool: name, Reason: res.Reason}
	case native.StatusRefused:
		return res, fmt.Errorf("build: %s: confinement refused the run: %s", name, res.Reason)
	case native.StatusKilled:
		if ctx.Err() != nil {
			return res, fmt.Errorf("build: %s: %w", name, ctx.Err())
		}
	}
	return res, nil
}

// withDefaultEnv adds each default whose name env does not set.
func withDefaultEnv(env []string, defaults map[string]string) []string {
	out := append([]string{}, env...)
	for k, v := range defaults {
		found := false
		for _, e := range env {
			if strings.HasPrefix(e, k+"=") {
				found = true
				break
			}
		}
		if !found {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// CompileFailure turns a finished compiler run into the build's error: a
// *CompileError with the compiler's output (stderr, then stdout) when it
// exited non-zero or died, nil when it succeeded.
func CompileFailure(lang string, res *native.Result) error {
	if res.Status == native.StatusOK {
		return nil
	}
	out := strings.TrimRight(string(res.Stderr), "\n")
	if s := strings.TrimRight(string(res.Stdout), "\n"); s != "" {
		if out != "" {
			out += "\n"
		}
		out += s
	}
	if res.Signal != "" {
		out += fmt.Sprintf("\n(the compiler was killed by signal %s)", res.Signal)
	}
	if out == "" {
		out = fmt.Sprintf("the compiler exited with status %d and printed nothing", res.ExitCode)
	}
	return &CompileError{Language: lang, Output: out}
}

// WriteSource writes the submission's files under dir (names were checked
// by ValidateCommon; this refuses an escaping name again, as a second
// line). Directories are 0755 and files 0644 so a job uid can read them.
func WriteSource(dir string, files []File) error {
	for _, f := range files {
		if checkName(f.Name) != "" {
			return fmt.Errorf("write source: unsafe file name %q", f.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("write source: %w", err)
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			return fmt.Errorf("write source: %w", err)
		}
	}
	return nil
}

// MaxOutputModuleBytes bounds a module a compiler may produce.
const MaxOutputModuleBytes = 256 << 20

// ReadOutput reads name (a path relative to dir) that a confined tool wrote
// in its work dir dir. The tool owned that directory, so any component of
// name may be a symlink it planted to make moat (root) read some other
// file into the build cache (Judge0's CVE-2024-28189): the file is opened
// with openat2 beneath dir, following no symlink at all, and must be a
// regular file (not a FIFO that would block) no larger than
// MaxOutputModuleBytes.
func ReadOutput(dir, name string) ([]byte, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fd, err := unix.Openat2(int(d.Fd()), name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(dir, name), Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir, name))
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", f.Name())
	}
	if fi.Size() > MaxOutputModuleBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the limit of %d", f.Name(), fi.Size(), MaxOutputModuleBytes)
	}
	return io.ReadAll(io.LimitReader(f, MaxOutputModuleBytes+1))
}
