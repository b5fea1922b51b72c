package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/languages"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

const maxExecStdin = 16 << 20

type execFlags struct {
	native    bool
	timeout   time.Duration
	memoryMB  int
	diskMB    int
	pids      int
	allowExec []string
	allowNet  []string
	json      bool

	// code execution (--lang)
	lang           string
	eval           string
	stdinFile      string
	compileTimeout time.Duration
	maxOutput      int
	env            []string
	deny           []string
	maxSource      int64
	filesOut       string   // --files-out DIR
	filesMatch     []string // --files-match GLOB

	grant grantFlags // --dir, --file, --workdir
}

func newExecCmd(g *globalFlags) *cobra.Command {
	f := &execFlags{}
	cmd := &cobra.Command{
		Use:   "exec (--lang L FILE... | --lang L -e CODE | --native CMD) [flags] [-- ARGS...]",
		Short: "Run source code in any supported language, or a native program, under limits",
		Long: `Run a program and report how it ended: the code-execution job of Judge0 or
Piston, on moat's sandbox.

With --lang, FILE... (or -e CODE) is source code in language L (see
` + "`moat langs`" + `). It is validated (size, UTF-8, file names, the language's
--deny rules), built (compiled to WebAssembly; builds are cached by content, so
running the same source again does not rebuild), and run: as WebAssembly
under wazero for compiled and interpreted languages, as a confined native
process for bash and python3-native. Compilers themselves run confined (no
network, read-only toolchains, a job directory). The first FILE is the entry
point. Arguments after -- go to the program.

With --native, CMD runs as a confined native child, for programs without a
WebAssembly path. The layers, in order: its own cgroup (memory, CPU, pids);
new pid, mount, network, ipc and uts namespaces (and a user namespace when
moat is not root); a root filesystem of its own (the system directories
read-only, CMD and --allow-exec, a job dir of --disk-mib MiB, fresh /tmp, /run
and /dev/shm; nothing of the host's beyond; every writable place noexec);
rlimits; an unprivileged uid of its own (when moat is root); Landlock
(execute only CMD, its loader and --allow-exec, write only its own dirs); a
seccomp filter (no foreign system call ABI, no namespaces, keyrings,
ptrace, io_uring, bpf, mounts, memfd execution). The network
namespace is empty: no egress at all, unless --allow-net grants targets: then
CMD shares the host's network and a per-job iptables chain (matched by its
cgroup) and Landlock let it reach exactly those targets. CMD without a slash
is looked up in /usr/bin:/bin.

Files: --dir HOST[:GUEST][:ro|rw] hands the program a directory, read-only
unless :rw; --file HOST[:GUEST] a file, always read-only. A WASM program sees
each at GUEST (default: the host path), served like a plugin's file grant
(no symlink or .. leads out; each change of an rw directory audited). A
native program sees each bound into its own root, at GUEST when given
(which must lie apart from what the root holds: not /, /proc, the system
or scratch directories, /dev, /etc's files or another grant) and a --file
at its host path; an rw directory stays the owner's (its permissions decide
what the job's uid may write), and --workdir DIR (a host path, or a guest
path of a --dir) makes a granted directory the working directory, so that
python3 client.py finds its file. Nothing else of the host's files is
visible.

Working directory: a --lang run on WebAssembly writes where it likes by a
relative name (open("out.txt", "w")): its working directory is a scratch
directory of its own, at most 64 MiB (--disk-mib) and 1024 files (past either, the
program's write fails with ENOSPC), removed when the run ends however it
ends. --files-out DIR copies what it wrote there into DIR (the files
--files-match names, default *; regular files only, at most 64, their
contents within --max-output). A native run writes in its job dir, a
tmpfs of its own that ends with it.

stdin: --stdin FILE, else moat's own stdin when it is not a terminal (up to
16 MiB). The program's stdout and stderr are printed, then one summary line
on stderr (status, exit code, compile and run time, peak memory, whether the
build was cached); --json prints the whole result as JSON on stdout instead.

A warm moat: after the first --lang run of a WebAssembly language, moat
leaves a process of yours running (moat exec-daemon, one per user, binary
and data directory; its socket in the data directory, 0700, your uid
only) that keeps the interpreter loaded, so the next runs answer in
milliseconds instead of a second. It runs each job in a fresh instance,
exactly as in process, and exits after 10 minutes without one
(MOAT_DAEMON_IDLE=2m sooner) or when the binary is replaced. Runs with
--dir, --file, --workdir, --files-out or --config, and native languages,
always run in process. MOAT_NO_DAEMON=1 turns it off.

Exit status: the program's own exit code; 124 on timeout; 125 at the memory
limit; 1 for a compile error, an output flood, a kill or a refused
confinement; 2 for bad usage or a refused submission (--lang: see the
violations).`,
		Example: `  moat exec --lang python -e 'print(input().upper())' <<< hello
  moat exec --lang c main.c util.c util.h -- arg1 arg2
  moat exec --lang go --stdin input.txt --timeout 2s --memory-mib 64 main.go
  moat exec --lang rust --json main.rs
  moat exec --lang python --files-out ./out -e 'open("plot.svg", "w").write("<svg/>")'
  moat exec --lang c --deny include:sys/socket.h main.c
  moat exec --native -- python3 -c 'print(1+1)'
  moat exec --native --dir . --workdir . -- python3 client.py
  moat exec --lang python --dir ./data:/data --dir ./out:/out:rw main.py
  moat exec --native --timeout 2s --memory-mib 64 --allow-exec /usr/bin/cat -- sh -c 'echo hi > f; cat f'
  echo data | moat exec --native --json -- /usr/bin/wc -c`,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case f.native && f.lang != "":
				return usagef("use either --native (a command) or --lang (source code), not both")
			case f.lang != "":
				return execLang(cmd, g, f, args)
			case !f.native:
				return usagef("say what to run: --lang L FILE... (source code; see `moat langs`) or --native -- CMD (a native program)")
			}
			if len(args) == 0 {
				return usagef("put the command after --, e.g. moat exec --native -- python3 script.py")
			}
			if d := cmd.ArgsLenAtDash(); d != 0 {
				return usagef("put the command after --, e.g. moat exec --native -- python3 script.py")
			}
			return execNative(cmd, g, f, args)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.native, "native", false, "run CMD as a confined native child")
	// pflag takes a back-quoted word of a usage as the value's name, so
	// the list is spelled out and the name given that way.
	fl.StringVarP(&f.lang, "lang", "l", "", "the language of FILE... or -e CODE; `LANG` is one of "+strings.Join(languageNames(), ", ")+" or an alias (see moat langs)")
	fl.StringVarP(&f.eval, "eval", "e", "", "source code to run instead of files (with --lang)")
	fl.StringVar(&f.stdinFile, "stdin", "", "a file to give the program as stdin (default: moat's stdin when it is not a terminal)")
	fl.DurationVar(&f.timeout, "timeout", native.DefaultTimeout, "wall-clock limit of the run, e.g. 500ms, 30s")
	fl.DurationVar(&f.compileTimeout, "compile-timeout", languages.DefaultExecLimits.CompileTimeout, "limit of the build stage (with --lang)")
	mibFlag(fl, &f.memoryMB, "memory", native.DefaultMemory>>20, "memory limit in MiB (WASM linear memory; cgroup for native runs, which needs root)")
	fl.IntVar(&f.maxOutput, "max-output", 1<<20, "bytes of stdout and of stderr before the run is stopped as output-limit (with --lang)")
	fl.StringArrayVar(&f.env, "env", nil, "an environment variable K=V for the program (repeatable; with --lang)")
	fl.StringArrayVar(&f.deny, "deny", nil, "a language rule to refuse, e.g. import:net (Go), include:sys/socket.h (C), import:socket (Python) (repeatable; with --lang)")
	fl.Int64Var(&f.maxSource, "max-source", languages.DefaultMaxSourceBytes, "bytes of source over all files (with --lang)")
	fl.IntVar(&f.pids, "pids", native.DefaultPids, "limit on processes and threads (with --native)")
	mibFlag(fl, &f.diskMB, "disk", native.DefaultDisk>>20, "size in MiB of the job dir and of each of /tmp, /run and /dev/shm; files there count against --memory-mib too (with --native); with --lang, the bytes the run may keep in its working directory and, natively, in each of those (default 64)")
	fl.StringArrayVar(&f.allowExec, "allow-exec", nil, "a binary CMD may execute, e.g. /usr/bin/cat for a shell script (repeatable; with --native)")
	fl.StringArrayVar(&f.allowNet, "allow-net", nil, "a TCP target host:port CMD may connect to; enforced by a per-job iptables chain and Landlock (repeatable; needs root; with --native)")
	fl.StringVar(&f.filesOut, "files-out", "", "copy the files the program wrote in its working directory (a scratch directory of its own) into `DIR`, which must exist; --files-match says which (with --lang; WASM languages)")
	fl.StringArrayVar(&f.filesMatch, "files-match", nil, "a pattern naming the files --files-out copies, relative to the working directory: out.txt, *.png, plots/*.svg (repeatable; default *)")
	fl.BoolVar(&f.json, "json", false, "print the result (status, output, times) as JSON on stdout")
	addGrantFlags(fl, &f.grant)
	return g.withServerConfig(cmd, "run on its store and caches (data_dir or database_url) and its profile, as it would")
}

func execNative(cmd *cobra.Command, g *globalFlags, f *execFlags, args []string) error {
	switch {
	case f.timeout <= 0:
		return usagef("--timeout %s: give a positive duration such as 500ms or 30s", f.timeout)
	case f.memoryMB <= 0 || f.memoryMB > 1<<20:
		return usagef("--memory-mib %d: give a size in MiB, at least 1", f.memoryMB)
	case f.pids <= 0:
		return usagef("--pids %d: give a positive number", f.pids)
	case f.diskMB <= 0 || f.diskMB > 1<<20:
		return usagef("--disk-mib %d: give a size in MiB, at least 1", f.diskMB)
	}
	gr, err := f.grant.parse()
	if err != nil {
		return err
	}
	ng, err := gr.native()
	if err != nil {
		return err
	}
	for _, p := range append(append([]string{}, ng.ro...), ng.rw...) {
		if err := native.CheckGrant(p); err != nil {
			return usagef("--dir/--file: %v (or show it elsewhere: --dir %s:/data)", err, p)
		}
	}
	stdin, err := readExecStdin(f.stdinFile)
	if err != nil {
		return err
	}
	spec := native.Spec{
		ReadOnly:    ng.ro,
		Granted:     ng.rw,
		Mounts:      ng.mounts,
		WorkDir:     ng.workDir,
		Command:     args,
		Stdin:       stdin,
		Timeout:     f.timeout,
		MemoryBytes: int64(f.memoryMB) << 20,
		Pids:        int64(f.pids),
		DiskBytes:   int64(f.diskMB) << 20,
		ExtraExec:   f.allowExec,
		AllowNet:    f.allowNet,
	}
	correlation := newCorrelationID()
	res, err := native.Run(cmd.Context(), spec)
	if err != nil {
		if se := (*native.SurvivorsError)(nil); errors.As(err, &se) {
			// A job whose processes outlived its kill: the host failed
			// to hold it, which the operator must see in the trail.
			if aerr := auditSurvivors(context.WithoutCancel(cmd.Context()), g, correlation, &spec, se); aerr != nil {
				return errors.Join(err, aerr)
			}
		}
		return err
	}
	if err := auditNative(cmd.Context(), g, correlation, &spec, res); err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(execJSON(res, correlation)); err != nil {
			return err
		}
	} else {
		os.Stdout.Write(res.Stdout)
		os.Stderr.Write(res.Stderr)
		fmt.Fprintln(os.Stderr, execSummary(res, correlation))
	}
	switch res.Status {
	case native.StatusOK:
		return nil
	case native.StatusTimeout:
		return exitError{code: exitTimeout}
	case native.StatusMemoryLimit:
		return exitError{code: exitMemory}
	case native.StatusRuntimeError:
		return exitError{code: res.ExitCode}
	default:
		return exitError{code: exitFailure}
	}
}

// readExecStdin reads --stdin FILE, else moat's stdin when it is not a
// terminal, up to maxExecStdin bytes.
func readExecStdin(file string) ([]byte, error) {
	var r io.Reader
	switch {
	case file != "":
		fh, err := os.Open(file)
		if err != nil {
			return nil, usagef("--stdin: %v", err)
		}
		defer fh.Close()
		r = fh
	case !term.IsTerminal(int(os.Stdin.Fd())):
		r = os.Stdin
	default:
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, maxExecStdin+1))
	if err != nil {
		return nil, fmt.Errorf("reading stdin: %w", err)
	}
	if len(b) > maxExecStdin {
		return nil, usagef("stdin is over %d MiB: give the program a smaller input", maxExecStdin>>20)
	}
	return b, nil
}

// execSummary is the one line on stderr after the command's output.
func execSummary(r *native.Result, correlation string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "moat: status=%s exit=%d correlation_id=%s", r.Status, r.ExitCode, correlation)
	if r.Signal != "" {
		fmt.Fprintf(&b, " signal=%q", r.Signal)
	}
	fmt.Fprintf(&b, " wall=%s cpu=%s peak=%s layers=%s", shortDuration(r.Wall), shortDuration(r.CPU),
		mib(r.PeakMemory), strings.Join(r.Layers, ","))
	if len(r.Unavailable) > 0 {
		fmt.Fprintf(&b, " unavailable=%q", strings.Join(r.Unavailable, "; "))
	}
	if r.Truncated {
		b.WriteString(" truncated=true")
	}
	if r.PidsLimitHit {
		b.WriteString(" pids-limit-hit=true")
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, " reason=%q", r.Reason)
	}
	return b.String()
}

func shortDuration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return d.Round(10 * time.Millisecond).String()
}

func mib(n uint64) string { return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20)) }

// execJSON is the --json form: output as text, times in milliseconds,
// named as the HTTP API's RunResult names them (run_time_ms,
// peak_memory_bytes, correlation_id).
func execJSON(r *native.Result, correlation string) any {
	// Output that is not UTF-8 is base64, both streams, with encoding
	// saying so: what POST /v1/runs does (server.RunResult), where JSON
	// would otherwise replace the bytes with U+FFFD.
	stdout, stderr, encoding := string(r.Stdout), string(r.Stderr), ""
	if !utf8.Valid(r.Stdout) || !utf8.Valid(r.Stderr) {
		stdout, stderr, encoding = base64.StdEncoding.EncodeToString(r.Stdout), base64.StdEncoding.EncodeToString(r.Stderr), "base64"
	}
	return struct {
		Status       native.Status `json:"status"`
		ExitCode     int           `json:"exit_code"`
		Signal       string        `json:"signal,omitempty"`
		Stdout       string        `json:"stdout"`
		Stderr       string        `json:"stderr"`
		Encoding     string        `json:"encoding,omitempty"`
		Truncated    bool          `json:"truncated"`
		WallMS       float64       `json:"run_time_ms"`
		CPUMS        float64       `json:"cpu_time_ms"`
		PeakMemory   uint64        `json:"peak_memory_bytes"`
		PidsLimitHit bool          `json:"pids_limit_hit"`
		Layers       []string      `json:"layers"`
		Unavailable  []string      `json:"unavailable"`
		Reason       string        `json:"reason,omitempty"`
		Correlation  string        `json:"correlation_id"`
	}{r.Status, r.ExitCode, r.Signal, stdout, stderr, encoding, r.Truncated,
		float64(r.Wall.Microseconds()) / 1000, float64(r.CPU.Microseconds()) / 1000, r.PeakMemory,
		r.PidsLimitHit, r.Layers, r.Unavailable, r.Reason, correlation}
}

// auditNative records the run and every kernel denial the host observed in
// the audit trail of the data directory, under one correlation id.
func auditNative(ctx context.Context, g *globalFlags, correlation string, spec *native.Spec, res *native.Result) error {
	return withAudit(ctx, g, func(a *audit.Log) {
		module := "native:" + filepath.Base(spec.Command[0])
		who := loginName()
		deny := native.AuditDenials(a, audit.Event{CorrelationID: correlation, Module: module, Action: "exec", User: who, Org: "local"})
		for _, d := range res.Denials(spec) {
			deny(d, correlation)
		}
		a.Record(ctx, audit.Event{Kind: audit.KindInvocation, Decision: audit.Allow, CorrelationID: correlation, Module: module,
			Action: "exec", User: who, Org: "local", Code: string(res.Status), DurationNS: int64(res.Wall),
			Attrs: map[string]string{"exit": strconv.Itoa(res.ExitCode), "layers": strings.Join(res.Layers, ","),
				"unavailable": strings.Join(res.Unavailable, "; "), "argv": strings.Join(spec.Command, " ")}})
	})
}

// auditSurvivors records a run whose processes survived its kill
// (native.SurvivorsError) as a denied confinement event.
func auditSurvivors(ctx context.Context, g *globalFlags, correlation string, spec *native.Spec, se *native.SurvivorsError) error {
	return withAudit(ctx, g, func(a *audit.Log) {
		a.Record(ctx, audit.Event{Kind: audit.KindConfinement, Decision: audit.Deny, CorrelationID: correlation,
			Module: "native:" + filepath.Base(spec.Command[0]), Action: "exec", User: loginName(), Org: "local",
			Rule: "job-survived", Code: "survivors", Reason: se.Error()})
	})
}

// withAudit runs record with the audit trail of the data directory (or,
// with --config, of the server's store), flushed and closed afterwards.
func withAudit(ctx context.Context, g *globalFlags, record func(a *audit.Log)) error {
	where := g.data()
	if g.server != nil { // --config: the server's store, be it PostgreSQL
		where = g.server.StoreLocation()
	}
	st, err := store.Open(ctx, where)
	if err != nil {
		return err
	}
	defer st.Close()
	log, err := g.logger()
	if err != nil {
		return err
	}
	a := audit.New(st, log)
	defer a.Close(context.Background())
	record(a)
	return nil
}

// languageNames are the names of the registered languages, sorted. It
// asks no language for its Info (languages.Names): the exec command's help
// text is built by every moat process, and a language's Info may run its
// toolchain for the version.
func languageNames() []string { return languages.Names() }

// addGrantFlags adds --dir, --file and --workdir.
func addGrantFlags(fl *pflag.FlagSet, g *grantFlags) {
	fl.StringArrayVar(&g.dirs, "dir", nil, "a host directory the program sees: HOST[:GUEST][:ro|rw], read-only unless :rw (repeatable)")
	fl.StringArrayVar(&g.files, "file", nil, "a host file the program may read: HOST[:GUEST] (repeatable)")
	fl.StringVar(&g.workDir, "workdir", "", "the working directory of a native run: a --dir or a directory under one (default: the job's own empty directory)")
}
