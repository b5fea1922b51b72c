package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/audit"
	_ "github.com/moat-sandbox/moat/host/extism" // runs Extism plug-ins (kind extism)
	"github.com/moat-sandbox/moat/host/media"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/kernel"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

type runFlags struct {
	input      string
	inputSet   bool
	inputFile  string
	config     []string
	env        []string
	inheritEnv bool
	org, usr   string
	roles      []string
	timeout    time.Duration
	memoryMB   int
	hostMB     int
	// compileRoom is host memory a kind of plugin needs beyond the
	// default margin (not a flag): see runInterpretedPlugin.
	compileRoom int64
	maxOutput   int
	maxTable    int
	correlate   string
	confirm     string
	confine     string
	// serverConfig is a moat serve configuration to run with: its store,
	// profile, secrets key, model providers and media settings.
	serverConfig string
	changed      func(string) bool
	// wait bounds --wait: how long moat run runs the tasks its plugin
	// enqueued after the action (0: it does not; runtasks.go).
	wait time.Duration

	grant grantFlags // --dir, --file (WASI commands)
}

func newRunCmd(g *globalFlags) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run MODULE [ACTION] [flags] [-- ARGS...]",
		Short: "Invoke a plugin action, or run a WASI command module",
		Long: `Run a module. MODULE is a .wasm file or a plugin directory (holding DIR.wasm
or exactly one .wasm file, or, for an interpreted plugin, a moat.yaml with
language javascript or python beside main.js or main.py, or, for a native
plugin, a moat.yaml with kind: native and the command that starts its
worker, like command: python3 main.py).

With an ACTION, MODULE must be a moat plugin, an interpreted plugin, a native
plugin (its workers run confined: their own uid, cgroup, root filesystem, no
network; as root) or an Extism plug-in (ACTION is then the exported
function): the manifest's roles are checked against --role, an action
marked confirm: true prints a token to pass back with --confirm, the
action's input comes from --input,
--input-file, or stdin (when it is not a terminal), and its output is printed
on stdout, as the Extism CLI prints it. The guest's log records go to stderr;
an Extism plug-in's error (error_set) fails the run with its message.

Without an ACTION, MODULE must be a WASI command: its _start runs with moat's
stdin, the ARGS after --, and the variables given with --env; its stdout and
stderr are printed, and moat exits with the module's exit code.

Once everything is read, moat confines itself (--confine, default
best-effort): Landlock and seccomp, and as root a cgroup of its own capped at
--host-memory-mib. Each layer it runs without is a warning and an audit event
(moat audit --kind confinement); were the host ever killed at its ceiling, a
watcher process says so on stderr and in the audit trail.

Exit status: the command's own code; 1 when the invocation fails (trap, guest
error, bad module); 2 for bad usage; 124 on timeout; 125 at the memory limit.`,
		Example: `  moat run examples/hello-go greet --input World --config greeting=Hi
  echo -n World | moat run examples/hello-go greet --org acme --user ann
  moat run hello.wasm --env GREETING=hi -- a b < in.txt
  moat run plugin.wasm greet --input World --config greeting=Hi   # an Extism plug-in
  echo World | moat run examples/hello-js greet                     # an interpreted plugin
  moat run examples/notes/go summarize --server-config examples/notes/moat-server.yaml --user ann  # its models too`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.inputSet = cmd.Flags().Changed("input")
			f.changed = cmd.Flags().Changed
			own, cmdArgs := args, []string(nil)
			if d := cmd.ArgsLenAtDash(); d >= 0 {
				own, cmdArgs = args[:d], args[d:]
			}
			if len(own) == 0 || len(own) > 2 {
				return usagef("give MODULE and at most one ACTION before --, got %d words; the words after -- are a command's arguments", len(own))
			}
			return runModule(cmd.Context(), g, f, own, cmdArgs)
		},
	}
	cmd.Flags().SetInterspersed(true)
	fl := cmd.Flags()
	fl.StringVar(&f.input, "input", "", "the action's input as text")
	fl.StringVar(&f.inputFile, "input-file", "", "read the action's input from this file")
	fl.StringArrayVar(&f.config, "config", nil, "module configuration key=value, read by config.get (repeatable)")
	fl.StringArrayVar(&f.env, "env", nil, "command environment: NAME=VALUE, or NAME to pass moat's own value (repeatable)")
	fl.BoolVar(&f.inheritEnv, "inherit-env", false, "pass moat's whole environment to a command (off by default: env often holds secrets)")
	fl.StringVar(&f.org, "org", "local", "organization the call runs for; it scopes the module's storage")
	fl.StringVar(&f.usr, "user", "", "user the call runs for (default: your login name)")
	fl.StringArrayVar(&f.roles, "role", nil, "a role of the user (repeatable)")
	fl.DurationVar(&f.timeout, "timeout", host.DefaultLimits.Timeout, "wall-clock limit, e.g. 500ms, 30s")
	mibFlag(fl, &f.memoryMB, "memory", int(host.DefaultLimits.MemoryLimitPages/16), "memory limit in MiB (at most 4096)")
	fl.IntVar(&f.maxOutput, "max-output", host.DefaultLimits.MaxOutputBytes, "output limit in bytes (for commands: per stream)")
	fl.IntVar(&f.maxTable, "max-table-elements", wasmrewrite.DefaultMaxTableElements, fmt.Sprintf("references the module's tables may hold, 8 bytes of host memory each (at most %d)", wasmrewrite.MaxTableElementsCeiling))
	fl.StringVar(&f.correlate, "correlation-id", "", "correlation id for logs and audit (default: a random one)")
	mibFlag(fl, &f.hostMB, "host-memory", 0, "the confined host's own memory ceiling in MiB (its backstop cgroup; needs root; default: --memory-mib + 512, and 512 more for a Ruby plugin)")
	fl.StringVar(&f.confine, "confine", string(kernel.ConfineBestEffort), "confine moat itself with Landlock and seccomp once the module is read: off, best-effort or strict")
	fl.StringVar(&f.confirm, "confirm", "", "run a confirm-required action with the token moat printed when it asked")
	fl.StringArrayVar(&f.grant.dirs, "dir", nil, "a host directory a WASI command sees: HOST[:GUEST][:ro|rw], read-only unless :rw (repeatable; a plugin's are its manifest's filesystem grants)")
	fl.StringArrayVar(&f.grant.files, "file", nil, "a host file a WASI command may read: HOST[:GUEST] (repeatable)")
	fl.DurationVar(&f.wait, "wait", 0, "after the action, run the background tasks it enqueued (task.enqueue) here, for up to this long (--wait alone: "+defaultTaskWait.String()+"); no server runs a moat run plugin's tasks")
	fl.Lookup("wait").NoOptDefVal = defaultTaskWait.String()
	fl.StringVar(&f.serverConfig, "server-config", "", "run as a server configured by this file would (moat serve's YAML): its store (data_dir or database_url), profile, secrets key, model providers (ai:) and media settings; --data and --profile still win")
	return cmd
}

func runModule(ctx context.Context, g *globalFlags, f *runFlags, args, cmdArgs []string) error {
	if (len(f.grant.dirs) > 0 || len(f.grant.files) > 0) && (len(args) == 2 || isPluginDir(args[0])) {
		return usagef("--dir and --file are for WASI commands; a plugin's files are its manifest's filesystem grants (see moat policy check)")
	}
	limits, err := f.limits()
	if err != nil {
		return err
	}
	defer g.closeAll() // after the host, which the paths below close
	// As moat serve would run it: the file's store, keys and models;
	// --data and --profile given on the command line still win.
	if err := g.useServerConfig(f.serverConfig, f.changed != nil && f.changed("profile")); err != nil {
		return err
	}
	cfg, err := keyValues("--config", f.config)
	if err != nil {
		return err
	}
	principal := policy.Principal{User: f.usr, Org: f.org, Roles: f.roles}
	if principal.User == "" {
		principal.User = loginName()
	}
	if err := principal.Validate(); err != nil {
		return usagef("%v", err)
	}
	if f.correlate == "" {
		f.correlate = newCorrelationID()
	}
	if f.wait < 0 {
		return usagef("--wait %s: give a positive duration such as 30s or 5m", f.wait)
	}
	if f.wait > 0 && len(args) != 2 {
		return usagef("--wait runs the tasks an action enqueues: name an ACTION")
	}
	// The tasks this plugin enqueues are this process's: no server that
	// shares the store has its module (runtasks.go).
	g.taskOrigin = runOrigin(args[0])
	// A plugin from source whose module is missing or stale is built
	// first, before anything is read or the process confines itself.
	if _, err := buildIfStale(ctx, g, args[0]); err != nil {
		return err
	}
	// The plugin's kind is decided once, by package bundle, as moat
	// serve decides it for the same plugin uploaded.
	b, err := bundle.Open(args[0])
	if err != nil {
		return usagef("%v", err)
	}
	switch b.Kind {
	case bundle.Native, bundle.Script:
		if len(cmdArgs) > 0 {
			return usagef("arguments after -- are for WASI commands; an action takes --input")
		}
		if b.Kind == bundle.Native {
			return runNativePlugin(ctx, g, f, args[0], b, args, principal, cfg, limits)
		}
		return runInterpretedPlugin(ctx, g, f, args[0], b, args, principal, cfg, limits)
	}
	gr, err := f.grant.parse()
	if err != nil {
		return err
	}
	mounts, cleanupMounts, err := gr.wasm()
	if err != nil {
		return err
	}
	defer cleanupMounts()
	for i := range mounts {
		mounts[i].Granted = true
	}
	grantRO := []string{filepath.Dir(b.Path)}
	var grantFiles []policy.FileGrant // a WASI command's --dir and --file
	for _, mt := range mounts {
		grantFiles = append(grantFiles, policy.FileGrant{Path: mt.HostDir, RW: !mt.ReadOnly})
	}
	var input []byte
	if len(args) == 2 && f.confirm == "" {
		if len(cmdArgs) > 0 {
			return usagef("arguments after -- are for WASI commands; an action takes --input")
		}
		if input, err = f.readInput(); err != nil {
			return err
		}
	}
	// Everything moat reads from outside its data directory has been read
	// (module, manifest, signature, input, profile): from here on the
	// process confines itself.
	if _, err := g.loadProfile(); err != nil {
		return err
	}
	if err := confineHost(g, f, grantRO, b, grantFiles); err != nil {
		return err
	}
	h, err := newHost(ctx, g)
	if err != nil {
		return err
	}
	defer h.Close(context.Background())
	wasm, opts, err := b.LoadOptions(ctx, bundle.LoadEnv{})
	if err != nil {
		return err
	}
	opts.Config, opts.Limits, opts.Isolation, opts.CorrelationID = cfg, limits, host.IsolationFresh, f.correlate
	mod, err := h.Load(ctx, wasm, opts)
	if err != nil {
		return err
	}
	if f.confirm != "" {
		if len(args) != 2 || f.inputSet || f.inputFile != "" {
			return usagef("--confirm runs the action and input the token was issued for: give MODULE ACTION and no input")
		}
		res, err := mod.Confirm(ctx, host.ConfirmRequest{Token: f.confirm, Principal: principal, CorrelationID: f.correlate})
		if err != nil {
			return err
		}
		if err := writeOutput(os.Stdout, res.Output); err != nil {
			return err
		}
		return afterRun(ctx, g, f, h, mod)
	}

	if len(args) == 2 {
		res, err := mod.Invoke(ctx, host.Request{Action: args[1], Input: input, Principal: principal, CorrelationID: f.correlate})
		if err != nil {
			return err
		}
		if err := writeOutput(os.Stdout, res.Output); err != nil {
			return err
		}
		return afterRun(ctx, g, f, h, mod)
	}

	if mod.Kind() == host.KindPlugin || mod.Kind() == host.KindExtism {
		return usagef("%s is a plugin: name an action (%s)", args[0], strings.Join(mod.Actions(), ", "))
	}
	if f.inputSet || f.inputFile != "" {
		return usagef("--input and --input-file are for actions; a command reads stdin")
	}
	env, err := f.environment()
	if err != nil {
		return err
	}
	res, err := mod.Run(ctx, host.RunRequest{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Args: cmdArgs, Env: env, Principal: principal, CorrelationID: f.correlate, Mounts: mounts,
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return exitError{code: int(res.ExitCode)}
	}
	return nil
}

func newHost(ctx context.Context, g *globalFlags) (*host.Host, error) {
	log, err := g.logger()
	if err != nil {
		return nil, err
	}
	profile, err := g.loadProfile()
	if err != nil {
		return nil, err
	}
	cache, err := g.cache()
	if err != nil {
		return nil, err
	}
	origin := g.taskOrigin
	if origin == "" {
		origin = cliOrigin
	}
	cfg := host.Config{DataDir: g.dataDir, CacheDir: cache.dir, MachineCacheDir: machineCacheDir(), Logger: log, Profile: profile,
		Families: map[string]any{"tasks": &ops.TasksConfig{Origin: origin}}}
	if s := g.server; s != nil {
		return newServerHost(ctx, g, cfg, s)
	}
	// The secrets a grant injects, under $MOAT_SECRETS_KEY, from the
	// data directory's store (`moat secrets set --data DIR`).
	key, err := secrets.LoadKey("")
	if err != nil {
		return nil, usagef("%v", err)
	}
	os.Unsetenv(secrets.EnvKey) // no child needs it
	// The store and trail the host runs on are the command's: it reads
	// its tasks there (runtasks.go) and records its own events.
	st, err := store.Open(ctx, g.data())
	if err != nil {
		return nil, err
	}
	g.useTrail(st, log)
	cfg.Store, cfg.Audit = st, g.trail
	if key != nil {
		cfg.Families["secrets"] = &ops.SecretsConfig{Source: secrets.NewVault(st, key, nil)}
	}
	h, err := host.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	recordConfinement(ctx, log, g.trail, "moat run", g.confined)
	return h, nil
}

// useTrail makes st and an audit trail on it the command's, the ones its
// host runs on, closed by closeAll (the trail first) after the host.
func (g *globalFlags) useTrail(st *store.Store, log *slog.Logger) {
	trail := audit.New(st, log)
	g.store, g.trail = st, trail
	g.closers = append(g.closers, func() { st.Close() }, func() { trail.Close(context.Background()) })
}

// closeHost closes h, then what the command opened for it.
func (g *globalFlags) closeHost(h *host.Host) {
	h.Close(context.Background())
	g.closeAll()
}

// newServerHost is newHost under a server configuration (--server-config):
// the host runs on the configuration's store (a data directory or
// PostgreSQL), with its secrets key, its model providers and budgets, and
// its media quota and the sections of other op families, so a plugin run
// from the command line reaches what it would reach served. The store
// closes with the host.
func newServerHost(ctx context.Context, g *globalFlags, cfg host.Config, s *server.Config) (*host.Host, error) {
	st, err := store.Open(ctx, s.StoreLocation())
	if err != nil {
		return nil, err
	}
	cfg.Store = st
	models := &ai.FamilyConfig{}
	cfg.Families["secrets"] = &ops.SecretsConfig{Source: secrets.NewVault(st, s.SecretsKey, nil)}
	cfg.Families["media"] = &media.FamilyConfig{QuotaBytes: s.Media.QuotaBytes}
	cfg.Families["ai"] = models
	cfg.Families = s.FamilyConfigs(cfg.Families) // other families' sections; those it disables
	if s.AI.Enabled() {
		if models.Service, err = ai.New(s.AI, st, cfg.Logger); err != nil {
			st.Close()
			var ce *ai.ConfigError
			if errors.As(err, &ce) {
				return nil, usagef("%s: %v", s.File, ce) // ce says ai.FIELD: what and how to fix it
			}
			return nil, err
		}
	}
	g.useTrail(st, cfg.Logger)
	cfg.Audit = g.trail
	h, err := host.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	recordConfinement(ctx, cfg.Logger, g.trail, "moat run", g.confined)
	return h, nil
}

// limits returns the limits given on the command line; flags left at
// their defaults do not override the manifest.
func (f *runFlags) limits() (host.Limits, error) {
	switch {
	case f.timeout <= 0:
		return host.Limits{}, usagef("--timeout %s: give a positive duration such as 500ms or 30s", f.timeout)
	case f.memoryMB <= 0 || f.memoryMB > 4096:
		return host.Limits{}, usagef("--memory-mib %d: give a size in MiB between 1 and 4096", f.memoryMB)
	case f.maxOutput <= 0:
		return host.Limits{}, usagef("--max-output %d: give a positive number of bytes", f.maxOutput)
	case f.maxTable <= 0 || f.maxTable > wasmrewrite.MaxTableElementsCeiling:
		return host.Limits{}, usagef("--max-table-elements %d: give a number of elements between 1 and %d", f.maxTable, wasmrewrite.MaxTableElementsCeiling)
	}
	var l host.Limits
	if f.changed == nil || f.changed("timeout") {
		l.Timeout = f.timeout
	}
	if f.changed == nil || mibChanged(f.changed, "memory") {
		l.MemoryLimitPages = uint32(f.memoryMB) * 16
	}
	if f.changed == nil || f.changed("max-output") {
		l.MaxOutputBytes = f.maxOutput
	}
	if f.changed == nil || f.changed("max-table-elements") {
		l.MaxTableElements = uint32(f.maxTable)
	}
	return l, nil
}

// readInput takes the action's input from --input, --input-file or a
// non-terminal stdin, in that order; giving two of them is a mistake.
func (f *runFlags) readInput() ([]byte, error) {
	if f.inputSet && f.inputFile != "" {
		return nil, usagef("give --input or --input-file, not both")
	}
	switch {
	case f.inputSet:
		return []byte(f.input), nil
	case f.inputFile != "":
		b, err := os.ReadFile(f.inputFile)
		if err != nil {
			return nil, usagef("--input-file: %v", err)
		}
		return b, nil
	case !term.IsTerminal(int(os.Stdin.Fd())):
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, fmt.Errorf("read input from stdin: %w", err)
		}
		return b, nil
	default:
		return nil, nil
	}
}

func (f *runFlags) environment() (map[string]string, error) {
	env := map[string]string{}
	if f.inheritEnv {
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				env[k] = v
			}
		}
	}
	for _, e := range f.env {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			v, ok = os.LookupEnv(k)
			if !ok {
				return nil, usagef("--env %s: moat's environment has no %s; write --env %s=VALUE", e, e, e)
			}
		}
		if k == "" {
			return nil, usagef("--env %q: the name is empty; write NAME=VALUE", e)
		}
		env[k] = v
	}
	return env, nil
}

func keyValues(flag string, pairs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usagef("%s %q: write key=value", flag, p)
		}
		m[k] = v
	}
	return m, nil
}

// writeOutput prints an action's output, ending it with a newline on a
// terminal so the shell prompt does not run into it.
func writeOutput(w *os.File, out []byte) error {
	if _, err := w.Write(out); err != nil {
		return err
	}
	if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n")) && term.IsTerminal(int(w.Fd())) {
		_, err := w.Write([]byte("\n"))
		return err
	}
	return nil
}

func loginName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return bundle.SanitizeName(u.Username)
	}
	return "local"
}

func newCorrelationID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// confineHost applies the host's own kernel layers (Landlock, seccomp) with
// the data directory and the compile cache (g.cache) writable, the
// module's directory (readOnly) readable, and what the module's effective
// grants under the profile need (bundle.Bundle.KernelGrants: the ports of
// its granted HTTP targets, the directories of its granted files) plus a
// WASI command's own --dir and --file (files). Every kind of plugin
// (compiled, interpreted, native, Extism) comes here with its manifest, so
// the kernel layer is derived from the grants policy decides ops by, in
// one place. The report is logged (a warning per missing layer) and
// audited by newHost; strict mode refuses to go on without every layer.
func confineHost(g *globalFlags, f *runFlags, readOnly []string, b *bundle.Bundle, files []policy.FileGrant) error {
	m, err := kernel.ParseConfineMode(f.confine)
	if err != nil {
		return usagef("%v", err)
	}
	data := g.data()
	// The compile cache may be apart from the data directory
	// (--cache-dir, $MOAT_CACHE_DIR): made now, with a message naming
	// its setting, rather than by Landlock's set-up.
	cache, err := g.cache()
	if err != nil {
		return err
	}
	// The host's own cgroup: the guest's memory limit plus room for the
	// runtime and compiled code, and enough pids for Go's threads.
	hostMemory := int64(f.memoryMB)<<20 + 512<<20 + f.compileRoom
	if f.hostMB < 0 {
		return usagef("--host-memory-mib %d: give a size in MiB", f.hostMB)
	} else if f.hostMB > 0 {
		hostMemory = int64(f.hostMB) << 20
	}
	if m != kernel.ConfineOff {
		// Its watcher reports an OOM kill at that ceiling (see backstop.go).
		if g.backstop, err = startBackstopWatch("moat run", data); err != nil {
			return err
		}
	}
	p, err := g.loadProfile()
	if err != nil {
		return err
	}
	k := b.KernelGrants(p)
	own := policy.KernelGrants{}
	own.Read, own.Write = fileGrantDirs(files)
	if g.server != nil { // --server-config: its database and model providers
		if own.ConnectTCP, err = serverDialPorts(*g.server); err != nil {
			return err
		}
	}
	k = k.Merge(own)
	rep, err := kernel.ConfineHost(kernel.HostConfinement{Mode: m, ReadOnly: readOnly, ReadWrite: append([]string{data, cache.dir}, machineStateDirs()...), MemoryBytes: hostMemory, Pids: 256,
		ConnectTCP: k.ConnectTCP, ConnectAnyTCP: k.ConnectAnyTCP, GrantRead: k.Read, GrantWrite: k.Write})
	if err != nil {
		return err
	}
	g.confined = rep
	return nil
}

// fileGrantDirs splits file grants into the directories the host's
// Landlock layer lets it read and those it lets it write too.
func fileGrantDirs(gs []policy.FileGrant) (read, write []string) {
	for _, g := range gs {
		if g.RW {
			write = append(write, g.Path)
		} else {
			read = append(read, g.Path)
		}
	}
	return read, write
}

// isPluginDir says whether p is a plugin directory of a kind that only
// serves actions (interpreted or native): --dir and --file are refused
// for it before anything runs.
func isPluginDir(p string) bool { return bundle.IsActionPlugin(p) }
