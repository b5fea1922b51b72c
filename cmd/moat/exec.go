package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

const maxExecStdin = 16 << 20

type execFlags struct {
	native    bool
	timeout   time.Duration
	memoryMB  int
	pids      int
	allowExec []string
	allowNet  []string
	json      bool
}

func newExecCmd(g *globalFlags) *cobra.Command {
	f := &execFlags{}
	cmd := &cobra.Command{
		Use:   "exec --native [flags] -- CMD [ARGS...]",
		Short: "Run a native program (no WebAssembly path) confined by kernel layers",
		Long: `Run CMD as a confined native child, for languages without a WebAssembly path
(an interpreter with a script, a compiled binary, a toolchain).

The layers, in order: its own cgroup (memory, CPU, pids); new pid, mount,
network, ipc and uts namespaces (and a user namespace when moat is not root);
rlimits; the unprivileged uid 65534 (when moat is root); Landlock (system
directories read-only, execute only CMD, its loader and --allow-exec, write
only the job dir); a seccomp filter. The network namespace is empty: no
egress at all, unless --allow-net grants targets: then CMD shares the host's
network and a per-job iptables chain (matched by its cgroup) and Landlock let
it reach exactly those targets. CMD without a slash is looked up in /usr/bin:/bin.

stdin is passed through (up to 16 MiB). CMD's stdout and stderr are printed,
then one summary line on stderr. Layers that could not be applied (as
non-root: cgroup, uid) are listed there.

Exit status: CMD's own exit code; 124 on timeout; 125 at the memory limit;
1 when it was killed or confinement was refused; 2 for bad usage.`,
		Example: `  moat exec --native -- python3 -c 'print(1+1)'
  moat exec --native --timeout 2s --memory 64 --allow-exec /usr/bin/cat -- sh -c 'echo hi > f; cat f'
  echo data | moat exec --native --json -- /usr/bin/wc -c`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !f.native {
				return usagef("moat exec runs native programs only: add --native (WebAssembly modules use `moat run`)")
			}
			if d := cmd.ArgsLenAtDash(); d != 0 {
				return usagef("put the command after --, e.g. moat exec --native -- python3 script.py")
			}
			return execNative(cmd, g, f, args)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.native, "native", false, "run CMD as a confined native child (required)")
	fl.DurationVar(&f.timeout, "timeout", native.DefaultTimeout, "wall-clock limit, e.g. 500ms, 30s")
	fl.IntVar(&f.memoryMB, "memory", native.DefaultMemory>>20, "memory limit in MiB (cgroup; needs root)")
	fl.IntVar(&f.pids, "pids", native.DefaultPids, "limit on processes and threads")
	fl.StringArrayVar(&f.allowExec, "allow-exec", nil, "a binary CMD may execute, e.g. /usr/bin/cat for a shell script (repeatable)")
	fl.StringArrayVar(&f.allowNet, "allow-net", nil, "a TCP target host:port CMD may connect to; enforced by a per-job iptables chain and Landlock (repeatable; needs root)")
	fl.BoolVar(&f.json, "json", false, "print the result (status, output, times, layers) as JSON on stdout")
	return cmd
}

func execNative(cmd *cobra.Command, g *globalFlags, f *execFlags, args []string) error {
	switch {
	case f.timeout <= 0:
		return usagef("--timeout %s: give a positive duration such as 500ms or 30s", f.timeout)
	case f.memoryMB <= 0 || f.memoryMB > 1<<20:
		return usagef("--memory %d: give a size in MiB, at least 1", f.memoryMB)
	case f.pids <= 0:
		return usagef("--pids %d: give a positive number", f.pids)
	}
	var stdin []byte
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, maxExecStdin+1))
		if err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
		if len(b) > maxExecStdin {
			return usagef("stdin is over %d MiB: give the command a file instead", maxExecStdin>>20)
		}
		stdin = b
	}
	spec := native.Spec{
		Command:     args,
		Stdin:       stdin,
		Timeout:     f.timeout,
		MemoryBytes: int64(f.memoryMB) << 20,
		Pids:        int64(f.pids),
		ExtraExec:   f.allowExec,
		AllowNet:    f.allowNet,
	}
	correlation := newCorrelationID()
	res, err := native.Run(cmd.Context(), spec)
	if err != nil {
		return err
	}
	if err := auditNative(cmd.Context(), g, correlation, &spec, res); err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(execJSON(res)); err != nil {
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

// execJSON is the --json form: output as text, times in milliseconds.
func execJSON(r *native.Result) any {
	return struct {
		Status       native.Status `json:"status"`
		ExitCode     int           `json:"exit_code"`
		Signal       string        `json:"signal,omitempty"`
		Stdout       string        `json:"stdout"`
		Stderr       string        `json:"stderr"`
		Truncated    bool          `json:"truncated"`
		WallMS       float64       `json:"wall_ms"`
		CPUMS        float64       `json:"cpu_ms"`
		PeakMemory   uint64        `json:"peak_memory_bytes"`
		PidsLimitHit bool          `json:"pids_limit_hit"`
		Layers       []string      `json:"layers"`
		Unavailable  []string      `json:"unavailable"`
		Reason       string        `json:"reason,omitempty"`
	}{r.Status, r.ExitCode, r.Signal, string(r.Stdout), string(r.Stderr), r.Truncated,
		float64(r.Wall.Microseconds()) / 1000, float64(r.CPU.Microseconds()) / 1000, r.PeakMemory,
		r.PidsLimitHit, r.Layers, r.Unavailable, r.Reason}
}

// auditNative records the run and every kernel denial the host observed in
// the audit trail of the data directory, under one correlation id.
func auditNative(ctx context.Context, g *globalFlags, correlation string, spec *native.Spec, res *native.Result) error {
	dir := g.data()
	st, err := store.Open(ctx, dir)
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
	return nil
}
