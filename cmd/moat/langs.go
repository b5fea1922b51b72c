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
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/all" // every language registers itself
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/toolchains"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newLangsCmd) }

func newLangsCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "langs",
		Short: "List the languages `moat exec --lang` runs, their versions and how each runs",
		Long: `List every language moat knows: its name and aliases (either works with
--lang), the version of its compiler or interpreter, the path it takes to run,
and whether it can run on this machine: "available" only when its toolchain is
present and usable; if not, what is missing and what to run (` + "`moat toolchains install LANG`" + `).

Paths: compiled (built to a WASI module, run by wazero), interpreted (an
interpreter compiled to WebAssembly runs the script), native (a confined
native process; for languages without a WebAssembly path).`,
		Example: `  moat langs
  moat langs --json | jq '.[] | select(.available) | .name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st := languages.Statuses()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tALIASES\tVERSION\tPATH\tTOOLCHAIN\tSTATUS")
			for _, s := range st {
				status := "available"
				if !s.Available {
					status = "missing: " + s.Missing
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(s.Name), termSafe(strings.Join(s.Aliases, ",")), termSafe(s.Version), termSafe(string(s.Path)),
					termSafe(s.Toolchain), termSafe(status))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			// Why a language takes its path, for those whose path a reader
			// would question (a native one, say).
			for _, s := range st {
				if s.Why != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "\n%s is %s: %s", termSafe(s.Name), termSafe(string(s.Path)), termSafe(s.Why))
				}
			}
			if slices.ContainsFunc(st, func(s languages.LanguageStatus) bool { return s.Why != "" }) {
				fmt.Fprintln(cmd.OutOrStdout())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

// execLang is `moat exec --lang`: validate, build (cached), run, report.
func execLang(cmd *cobra.Command, g *globalFlags, f *execFlags, args []string) error {
	files, progArgs := args, []string(nil)
	if d := cmd.ArgsLenAtDash(); d >= 0 {
		files, progArgs = args[:d], args[d:]
	}
	switch {
	case f.timeout <= 0:
		return usagef("--timeout %s: give a positive duration such as 500ms or 30s", f.timeout)
	case f.compileTimeout <= 0:
		return usagef("--compile-timeout %s: give a positive duration such as 60s", f.compileTimeout)
	case f.memoryMB <= 0 || f.memoryMB > 4096:
		return usagef("--memory-mib %d: give a size in MiB between 1 and 4096", f.memoryMB)
	case f.maxOutput <= 0:
		return usagef("--max-output %d: give a positive number of bytes", f.maxOutput)
	case f.eval != "" && len(files) > 0:
		return usagef("give either -e CODE or FILE..., not both (program arguments go after --)")
	case f.eval == "" && len(files) == 0:
		return usagef("give the source: FILE... or -e CODE, e.g. moat exec --lang %s main%s", f.lang, firstExt(f.lang))
	case f.diskMB <= 0 || f.diskMB > 1<<20:
		return usagef("--disk-mib %d: give a size in MiB, at least 1", f.diskMB)
	case len(f.filesMatch) > 0 && f.filesOut == "":
		return usagef("--files-match names files for --files-out DIR: give the directory to copy them into")
	}
	var filesOut []string
	var outRoot *os.Root
	if f.filesOut != "" {
		filesOut = f.filesMatch
		if len(filesOut) == 0 {
			filesOut = []string{"*"}
		}
		if err := languages.ValidateFilesOut(filesOut); err != nil {
			return usagef("--files-match: %v", strings.TrimPrefix(err.Error(), "files_out: "))
		}
		r, err := os.OpenRoot(f.filesOut)
		if err != nil {
			return usagef("--files-out %s: %v; give an existing directory", f.filesOut, errors.Unwrap(err))
		}
		defer r.Close()
		outRoot = r
	}
	lang, err := languages.Lookup(f.lang)
	if err != nil {
		return usagef("--lang: %v", err)
	}
	var srcFiles []languages.File
	if f.eval == "" {
		if srcFiles, err = readSourceFiles(files); err != nil {
			return err
		}
	}
	env := map[string]string{}
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usagef("--env %q: write it as NAME=value", kv)
		}
		env[k] = v
	}
	lim := languages.ExecLimits{Timeout: f.timeout, CompileTimeout: f.compileTimeout,
		MemoryBytes: int64(f.memoryMB) << 20, MaxOutputBytes: int64(f.maxOutput)}
	if mibChanged(cmd.Flags().Changed, "disk") {
		lim.ScratchBytes = int64(f.diskMB) << 20 // else the executor's 64 MiB
	}
	job := &execJob{Lang: f.lang, Args: progArgs, Env: env, Limits: lim,
		Validation: languages.ValidationProfile{MaxSourceBytes: f.maxSource, Deny: f.deny}, JSON: f.json}
	job.Source.Files = srcFiles
	// A run without the host's files goes to this user's warm moat when
	// one is up (execdaemon.go), before anything here asks the language
	// for its Info (which may run its compiler for the version); without
	// one, it runs here, and a warm moat is started for the next.
	daemon := daemonServes(g, f)
	if daemon {
		handled, err := execByDaemon(cmd.Context(), g, job, f.eval, f.stdinFile)
		if handled {
			return err
		}
	}
	job.Name = lang.Info().Name
	if f.eval != "" {
		job.Source.Files = []languages.File{{Name: "main" + firstExt(job.Name), Content: []byte(f.eval)}}
	}
	if daemon && lang.Info().Path != languages.PathNative {
		// The environment as the client found it: newHost takes the
		// secrets key out of it, and the daemon's identity hashes it.
		env := os.Environ()
		defer startDaemon(g, job.Name, env)
	}
	stdin, err := readExecStdin(f.stdinFile)
	if err != nil {
		return err
	}
	gr, err := f.grant.parse()
	if err != nil {
		return err
	}
	var mounts []host.Mount
	var grantedFiles []string
	var workDir string
	if lang.Info().Path == languages.PathNative {
		ng, err := gr.native()
		if err != nil {
			return err
		}
		workDir = ng.workDir
		for _, m := range ng.mounts {
			mounts = append(mounts, host.Mount{HostDir: m.Source, GuestPath: m.Target, ReadOnly: !m.RW})
		}
		for _, p := range ng.ro {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				mounts = append(mounts, host.Mount{HostDir: p, GuestPath: p, ReadOnly: true})
			} else {
				grantedFiles = append(grantedFiles, p)
			}
		}
		for _, p := range ng.rw {
			mounts = append(mounts, host.Mount{HostDir: p, GuestPath: p})
		}
	} else {
		var cleanup func()
		if mounts, cleanup, err = gr.wasm(); err != nil {
			return err
		}
		defer cleanup()
		for _, m := range mounts {
			if filepath.Clean(m.GuestPath) == "/" {
				return usagef("--dir %s:/: / is the run's working directory, its own scratch directory; show the directory elsewhere, e.g. --dir %s:/data", m.HostDir, m.HostDir)
			}
		}
	}
	ex, closeHost, err := newExecutor(cmd, g)
	if err != nil {
		return err
	}
	defer closeHost()
	return runExecJob(cmd.Context(), ex, job, stdin, execGrants{mounts: mounts, files: grantedFiles, workDir: workDir,
		filesOut: filesOut, outRoot: outRoot, outDir: f.filesOut}, execStreams{stdout: cmd.OutOrStdout(), stderr: os.Stderr, progress: g.progress()})
}

// execJob is a --lang run as the command line asked for it: what
// execByDaemon hands a warm moat, and what runExecJob runs.
type execJob struct {
	Lang       string                      `json:"lang"` // as given: a name or an alias
	Name       string                      `json:"name"` // the language's name
	Source     languages.Source            `json:"source"`
	Args       []string                    `json:"args,omitempty"`
	Env        map[string]string           `json:"env,omitempty"`
	Limits     languages.ExecLimits        `json:"limits"`
	Validation languages.ValidationProfile `json:"validation"`
	JSON       bool                        `json:"json,omitempty"`
}

// execGrants are what a run is handed of the host's files (--dir, --file,
// --workdir, --files-out): in process only.
type execGrants struct {
	mounts   []host.Mount
	files    []string
	workDir  string
	filesOut []string
	outRoot  *os.Root
	outDir   string
}

// execStreams are where a run's output and moat's lines go: the process's
// own streams, or in a warm moat the client's.
type execStreams struct {
	stdout, stderr io.Writer
	progress       *progress
}

// runExecJob runs job on ex and reports it on out as `moat exec --lang`
// does: the output as it is written, then the summary line (or the JSON
// result), and the exit status as an error.
func runExecJob(ctx context.Context, ex *languages.Executor, job *execJob, stdin []byte, gr execGrants, out execStreams) error {
	correlation := newCorrelationID()
	// Without --json the program's output goes to the terminal as it is
	// written, native and WASM runs alike; what a runner did not stream
	// is written after the run.
	var streamed [2]int
	var output func(string, []byte)
	if !job.JSON {
		output = func(stream string, b []byte) {
			if stream == "stderr" {
				streamed[1] += len(b)
				out.stderr.Write(b)
				return
			}
			streamed[0] += len(b)
			out.stdout.Write(b)
		}
	}
	res, err := ex.Exec(ctx, languages.ExecRequest{
		Language: job.Lang, Source: job.Source, Stdin: stdin, Args: job.Args, Env: job.Env,
		Limits:        job.Limits,
		Validation:    job.Validation,
		Principal:     localPrincipal(),
		CorrelationID: correlation,
		Mounts:        gr.mounts,
		Files:         gr.files,
		WorkDir:       gr.workDir,
		FilesOut:      gr.filesOut,
		Preparing:     out.progress.preparer(job.Name),
		Output:        output,
	})
	if err != nil {
		return err
	}
	if gr.outRoot != nil {
		if err := copyFilesOut(gr.outRoot, gr.outDir, res.Files); err != nil {
			return err
		}
	}
	if job.JSON {
		enc := json.NewEncoder(out.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(execResultJSON(res, correlation)); err != nil {
			return err
		}
	} else {
		if len(res.Stdout) > streamed[0] {
			out.stdout.Write(res.Stdout[streamed[0]:])
		}
		if len(res.Stderr) > streamed[1] {
			out.stderr.Write(res.Stderr[streamed[1]:])
		}
		if res.CompileOutput != "" && res.Status == languages.StatusCompileError {
			fmt.Fprintln(out.stderr, strings.TrimRight(res.CompileOutput, "\n"))
		}
		for _, v := range res.Violations {
			fmt.Fprintf(out.stderr, "moat: %s\n", termSafe(v.String()))
		}
		fmt.Fprintln(out.stderr, langSummary(res, correlation))
	}
	switch res.Status {
	case languages.StatusOK:
		return nil
	case languages.StatusRuntimeError:
		if res.ExitCode > 0 && res.ExitCode < 256 {
			return exitError{code: res.ExitCode}
		}
		return exitError{code: exitFailure}
	case languages.StatusTimeout:
		return exitError{code: exitTimeout}
	case languages.StatusMemoryLimit:
		return exitError{code: exitMemory}
	case languages.StatusInvalid:
		return exitError{code: exitUsage}
	default:
		return exitError{code: exitFailure}
	}
}

// readSourceFiles reads the source files of a run. Files keep their names
// relative to the first file's directory, so `moat exec --lang c
// src/main.c src/lib/util.h` sends main.c and lib/util.h. Anything outside
// that directory is sent by base name.
func readSourceFiles(files []string) ([]languages.File, error) {
	var out []languages.File
	base := filepath.Dir(files[0])
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, usagef("reading %s: %v", p, err)
		}
		name, err := filepath.Rel(base, p)
		if err != nil || strings.HasPrefix(name, "..") {
			name = filepath.Base(p)
		}
		out = append(out, languages.File{Name: filepath.ToSlash(name), Content: b})
	}
	return out, nil
}

// newExecutor opens the host and an executor whose build cache and
// language state live in the data directory.
func newExecutor(cmd *cobra.Command, g *globalFlags) (*languages.Executor, func(), error) {
	h, err := newHost(cmd.Context(), g)
	if err != nil {
		return nil, nil, err
	}
	data := g.data()
	ex, err := languages.NewExecutor(languages.ExecutorConfig{
		Host: h, Audit: g.trail, BuildCacheDir: filepath.Join(data, "build-cache"), StateDir: filepath.Join(data, "lang-state"),
		MachineStateDir: toolchains.StateDir(),
	})
	if err != nil {
		g.closeHost(h)
		return nil, nil, err
	}
	return ex, func() { g.closeHost(h) }, nil
}

// firstExt is a language's first file extension, or "".
func firstExt(name string) string {
	l, err := languages.Lookup(name)
	if err != nil || len(l.Info().Extensions) == 0 {
		return ""
	}
	return l.Info().Extensions[0]
}

// langSummary is the one line on stderr after the program's output.
func langSummary(r *languages.ExecResult, correlation string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "moat: status=%s exit=%d lang=%s", r.Status, r.ExitCode, r.Language)
	if r.Version != "" {
		fmt.Fprintf(&b, "@%s", r.Version)
	}
	fmt.Fprintf(&b, " compile=%s cached=%t run=%s", fineDuration(r.CompileTime), r.BuildCached, fineDuration(r.RunTime))
	if r.PeakMemory > 0 {
		fmt.Fprintf(&b, " peak=%s", mib(r.PeakMemory))
	}
	if r.Signal != "" {
		fmt.Fprintf(&b, " signal=%q", r.Signal)
	}
	if r.Message != "" && r.Status != languages.StatusOK {
		fmt.Fprintf(&b, " reason=%q", oneLineString(r.Message))
	}
	if r.ScratchFull != "" {
		fmt.Fprintf(&b, " scratch_full=%s", r.ScratchFull)
	}
	fmt.Fprintf(&b, " correlation_id=%s", correlation)
	return b.String()
}

// fineDuration keeps a tenth of a millisecond below 10 ms: a cached WASM
// run takes well under one.
func fineDuration(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
	}
	return shortDuration(d)
}

func oneLineString(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// execResultJSON is the --json form: the HTTP API's RunResult (POST
// /v1/runs), field for field: output as text, or base64 for both streams
// with "encoding": "base64" when either is not UTF-8; times in
// milliseconds.
func execResultJSON(r *languages.ExecResult, correlation string) any {
	return server.NewRunResult(r, correlation)
}

// localPrincipal is who a local `moat exec --lang` runs for: the login
// name in org "local", as `moat run` defaults.
func localPrincipal() policy.Principal {
	return policy.Principal{User: loginName(), Org: "local"}
}

// copyFilesOut writes the files a run returned (languages.OutFile) into
// root, the --files-out directory, each at its name beneath it (os.Root:
// no name leads out, whatever the guest called it), and says on stderr
// which were not returned and why.
func copyFilesOut(root *os.Root, dir string, files []languages.OutFile) error {
	for _, f := range files {
		if f.Omitted != "" {
			fmt.Fprintf(os.Stderr, "moat: --files-out: %s not copied: %s\n", termSafe(f.Name), f.Omitted)
			continue
		}
		b := []byte(f.Content)
		if f.Encoding == "base64" {
			var err error
			if b, err = base64.StdEncoding.DecodeString(f.Content); err != nil {
				return err
			}
		}
		name := filepath.FromSlash(f.Name)
		if d := filepath.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("--files-out %s: %w", dir, err)
			}
		}
		if err := root.WriteFile(name, b, 0o644); err != nil {
			return fmt.Errorf("--files-out %s: %w", dir, err)
		}
	}
	return nil
}
