package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/execdaemon"
	"github.com/moat-sandbox/moat/languages"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// A warm moat per user (docs/RATIONALE.md, "A warm moat per user"): the
// first `moat exec --lang` of a WASM language runs in process and starts
// `moat exec-daemon` detached; the daemon loads what runs need (a host
// on the data directory's store and compile cache, the language's
// interpreter and snapshot) and serves the next `moat exec` processes of
// the same user, binary and settings over a socket in the data directory
// (internal/execdaemon), each run in a fresh instance as in process, its
// output written on the client's own descriptors and its events in the
// same store. It exits after execdaemon.DefaultIdle without a job, or
// when its binary was replaced.

// envDaemonIdle shortens the daemon's idle time (a Go duration): for tests
// of its exit, and for an operator who wants it gone sooner.
const envDaemonIdle = "MOAT_DAEMON_IDLE"

// envDaemonSay makes the client say on stderr which process ran the job
// ("moat: run by the warm moat, pid N"): the tests' way to tell.
const envDaemonSay = "MOAT_DAEMON_SAY"

// daemonServes says whether a --lang run may go to the warm moat: no
// file of the host's handed to it (--dir, --file, --workdir, --files-out:
// those are opened in process, never by another process), no server
// configuration (--config: its store may be PostgreSQL, its secrets
// another key), and the daemon not turned off. The daemon itself turns
// away a native language's run (daemonAdmits), which then runs here.
func daemonServes(g *globalFlags, f *execFlags) bool {
	return !execdaemon.Off() && g.server == nil &&
		len(f.grant.dirs) == 0 && len(f.grant.files) == 0 && f.grant.workDir == "" && f.filesOut == ""
}

// daemonIdentity is the identity a client and its daemon share: this
// binary and the settings the run depends on, resolved to absolute paths
// so that two working directories never meet each other's daemon.
func daemonIdentity(g *globalFlags) (execdaemon.Identity, string, error) {
	data, err := filepath.Abs(g.data())
	if err != nil {
		return execdaemon.Identity{}, "", err
	}
	cache, err := resolveCache(g.cacheDir, "", "", data)
	if err != nil {
		return execdaemon.Identity{}, "", err
	}
	profile := g.profile
	if fi, err := os.Stat(profile); err == nil { // a file: its version too
		abs, _ := filepath.Abs(profile)
		profile = fmt.Sprintf("%s:%d:%d", abs, fi.Size(), fi.ModTime().UnixNano())
	}
	key := execdaemon.ConfigKey(data, cache.dir, profile, g.logFormat, g.logLevel,
		os.Getenv("HOME"), os.Getenv("XDG_DATA_HOME"), strconv.Itoa(os.Geteuid()))
	id, err := execdaemon.SelfIdentity(key)
	return id, data, err
}

// daemonSocket is the socket of the daemon of id in data.
func daemonSocket(id execdaemon.Identity, data string) (string, error) {
	dir, err := execdaemon.Dir(data)
	if err != nil {
		return "", err
	}
	return execdaemon.SocketPath(dir, id), nil
}

// execByDaemon hands job to the warm moat, when one is up: handled says
// whether it did (err is then the run's outcome, as runExecJob's); when
// not, the caller runs the job in process, as if there were no daemon.
func execByDaemon(ctx context.Context, g *globalFlags, job *execJob, eval, stdinFile string) (handled bool, err error) {
	id, data, err := daemonIdentity(g)
	if err != nil {
		return false, nil
	}
	sock, err := daemonSocket(id, data)
	if err != nil {
		return false, nil
	}
	c, err := execdaemon.Dial(sock, id)
	if err != nil {
		return false, nil
	}
	defer c.Close()
	// stdin: --stdin FILE opened here, by the client, as in process;
	// else the client's own (the daemon reads it unless it is a
	// terminal, as readExecStdin does).
	stdin := os.Stdin
	if stdinFile != "" {
		fh, err := os.Open(stdinFile)
		if err != nil {
			return true, usagef("--stdin: %v", err)
		}
		defer fh.Close()
		stdin = fh
	}
	b, err := json.Marshal(daemonJob{Job: job, Eval: eval, StdinFile: stdinFile != ""})
	if err != nil {
		return false, nil
	}
	cancel := make(chan string, 1)
	stop := context.AfterFunc(ctx, func() { cancel <- context.Cause(ctx).Error() })
	defer stop()
	code, err := c.Run(b, [3]*os.File{stdin, os.Stdout, os.Stderr}, cancel)
	if errors.Is(err, execdaemon.ErrUnavailable) {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	if os.Getenv(envDaemonSay) != "" {
		fmt.Fprintf(os.Stderr, "moat: run by the warm moat, pid %d\n", c.PeerPID())
	}
	if code != 0 {
		return true, exitError{code: code}
	}
	return true, nil
}

// daemonJob is the frame's job: the run, and whether stdin is a file
// the client opened (read whatever it is) or the client's own stdin
// (read unless it is a terminal).
type daemonJob struct {
	Job *execJob `json:"job"`
	// Eval is -e CODE: the daemon names its file (main and the
	// language's first extension), which the client would have to ask
	// the language for.
	Eval      string `json:"eval,omitempty"`
	StdinFile bool   `json:"stdin_file,omitempty"`
}

// decodeDaemonJob is the job of a frame, its language looked up and, for
// -e CODE, its file named, as execLang does in process. ok is false for a
// malformed job and for a native language's: the daemon turns those away
// unstarted, and the client runs them itself.
func decodeDaemonJob(b []byte) (dj daemonJob, ok bool) {
	if err := json.Unmarshal(b, &dj); err != nil || dj.Job == nil {
		return dj, false
	}
	lang, err := languages.Lookup(dj.Job.Lang)
	if err != nil {
		return dj, false // in process, which says so as it does
	}
	info := lang.Info()
	if info.Path == languages.PathNative {
		return dj, false
	}
	dj.Job.Name = info.Name
	if dj.Eval != "" {
		dj.Job.Source.Files = []languages.File{{Name: "main" + firstExt(info.Name), Content: []byte(dj.Eval)}}
	}
	return dj, true
}

// startDaemon starts the warm moat of this user and settings, detached
// (its own session, no terminal, its streams on /dev/null, / as its
// working directory), to load lang and serve the next runs. A daemon
// already there keeps the socket (execdaemon.Listen) and the new one
// exits. env is the client's environment as it began (the daemon's
// identity hashes it). Any failure is silent: the next run is in process
// again.
func startDaemon(g *globalFlags, lang string, env []string) {
	id, data, err := daemonIdentity(g)
	if err != nil {
		return
	}
	if sock, err := daemonSocket(id, data); err != nil {
		return
	} else if c, err := execdaemon.Dial(sock, id); err == nil {
		c.Close() // one is up (a race with another client): nothing to do
		return
	}
	args := []string{"exec-daemon", "--data", data, "--profile", g.profile, "--log-format", g.logFormat,
		"--log-level", g.logLevel, "--warm", lang}
	if g.cacheDir != "" {
		abs, err := filepath.Abs(g.cacheDir)
		if err != nil {
			return
		}
		args = append(args, "--cache-dir", abs)
	}
	if fi, err := os.Stat(g.profile); err == nil && !fi.IsDir() {
		abs, _ := filepath.Abs(g.profile)
		args[4] = abs
	}
	cmd := exec.Command(id.Binary, args...)
	cmd.Dir = "/"
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err == nil {
		cmd.Process.Release()
	}
}

func init() { registerCommand(newExecDaemonCmd) }

func newExecDaemonCmd(g *globalFlags) *cobra.Command {
	var warm []string
	cmd := &cobra.Command{
		Use:    "exec-daemon",
		Short:  "Serve the `moat exec --lang` runs of this user warm (started by moat exec itself)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serveExecDaemon(cmd.Context(), g, warm)
		},
	}
	cmd.Flags().StringArrayVar(&warm, "warm", nil, "a language to load before the first job (repeatable)")
	return cmd
}

// serveExecDaemon is the daemon: it takes the socket (or exits, when
// another daemon has it), loads the languages to warm, then serves jobs
// until it has been idle for the idle time.
func serveExecDaemon(ctx context.Context, g *globalFlags, warm []string) error {
	id, data, err := daemonIdentity(g)
	if err != nil {
		return err
	}
	sock, err := daemonSocket(id, data)
	if err != nil {
		return err
	}
	l, err := execdaemon.Listen(sock)
	if errors.Is(err, execdaemon.ErrRunning) {
		return nil
	}
	if err != nil {
		return err
	}
	defer os.Remove(sock)
	defer l.Close()
	// SIGTERM or SIGINT: no new job; those under way end first.
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	// The host lives as long as the daemon: a cobra command's context
	// would end it with a signal the daemon does not take from clients.
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	ex, closeHost, err := newExecutor(cmd, g)
	if err != nil {
		return err
	}
	defer closeHost()
	for _, name := range warm {
		if req, ok := languages.WarmRequest(name); ok {
			warmOne(context.Background(), ex, req)
		}
	}
	idle := execdaemon.DefaultIdle
	if d, err := time.ParseDuration(os.Getenv(envDaemonIdle)); err == nil && d > 0 {
		idle = d
	}
	srv := &execdaemon.Server{Identity: id, Idle: idle, Socket: sock,
		Admit: func(b []byte) bool { _, ok := decodeDaemonJob(b); return ok },
		Handle: func(ctx context.Context, b []byte, stdio [3]*os.File) int {
			return handleDaemonJob(ctx, g, ex, b, stdio)
		}}
	srv.Serve(l)
	return nil
}

// daemonMu serialises what runExecJob's callers share in the daemon: the
// audit trail's flush at the end of each job.
var daemonMu sync.Mutex

// handleDaemonJob runs one client's job as `moat exec` would in process,
// writing on the client's descriptors, and returns the exit status.
func handleDaemonJob(ctx context.Context, g *globalFlags, ex *languages.Executor, b []byte, stdio [3]*os.File) (code int) {
	stdout, stderr := stdio[1], stdio[2]
	defer func() {
		// As run does in process: one line for the user, and the daemon
		// goes on serving the other clients' runs.
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "moat: internal error: %v (please report this)\n", r)
			code = exitFailure
		}
	}()
	fail := func(err error) int {
		var exit exitError
		if errors.As(err, &exit) {
			return exit.code
		}
		fmt.Fprintf(stderr, "moat: %s\n", oneLine(err))
		return exitStatus(err)
	}
	dj, ok := decodeDaemonJob(b)
	if !ok {
		return fail(errors.New("exec-daemon: a malformed job"))
	}
	stdin, err := readDaemonStdin(stdio[0], dj.StdinFile)
	if err != nil {
		return fail(err)
	}
	out := execStreams{stdout: stdout, stderr: stderr, progress: newProgress(stderr)}
	if g.logFormat == "json" {
		out.progress = &progress{w: stderr, log: slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{ReplaceAttr: host.SafeLogAttr}))}
	}
	err = runExecJob(ctx, ex, dj.Job, stdin, execGrants{}, out)
	// The run's events are in the store before the client exits, as
	// they are when a process closes its trail.
	if g.trail != nil {
		daemonMu.Lock()
		g.trail.Flush(context.Background())
		daemonMu.Unlock()
	}
	if err == nil {
		return 0
	}
	return fail(err)
}

// readDaemonStdin is readExecStdin on the client's descriptor: a file the
// client opened (--stdin), or its stdin unless that is a terminal.
func readDaemonStdin(f *os.File, isFile bool) ([]byte, error) {
	if !isFile && term.IsTerminal(int(f.Fd())) {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxExecStdin+1))
	if err != nil {
		return nil, fmt.Errorf("reading stdin: %w", err)
	}
	if len(b) > maxExecStdin {
		return nil, usagef("stdin is over %d MiB: give the program a smaller input", maxExecStdin>>20)
	}
	return b, nil
}
