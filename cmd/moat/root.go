package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/kernel"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

// registered holds the subcommands that files of this package add with
// registerCommand from their init functions, so a new command is one new
// file rather than an edit here.
var registered []func(*globalFlags) *cobra.Command

// registerCommand adds a subcommand to the root command. Call it from init.
func registerCommand(c func(*globalFlags) *cobra.Command) { registered = append(registered, c) }

// globalFlags are shared by every subcommand.
type globalFlags struct {
	profile  string
	loaded   *policy.Profile // read once, before the process confines itself
	dataDir  string
	cacheDir string // --cache-dir; cache() resolves it
	// cacheOpened is the compile cache cache() resolved and made.
	cacheOpened *cacheSetting
	logLevel    string
	logFormat   string
	// confined is what confineHost applied and lacks: newHost logs it and
	// writes it to the audit trail once the host (and its store) exists.
	confined *kernel.HostReport
	// server is the server configuration moat run was given
	// (--server-config); nil: none.
	server *server.Config
	// closers release what a command opened for its host (its store and
	// audit trail), after the host is closed.
	closers []func()
	// store and trail are what the command's host runs on (useTrail):
	// the command reads its tasks and records its own events there.
	store *store.Store
	trail *audit.Log
	// backstop is the write end of the backstop watcher's pipe: held for
	// the life of the process (closing it tells the watcher the host is
	// gone; see backstop.go).
	backstop *os.File
	// taskOrigin is where the tasks of the modules this command's host
	// loads run (ops.TasksConfig.Origin): moat run's runOrigin, else
	// cliOrigin.
	taskOrigin string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "moat",
		Short: "moat runs untrusted code as WebAssembly, with host functions as the only door out",
		Long: `moat is a WebAssembly-first polyglot sandbox host. Plugins are WASM modules
(moat plugins in Go, C, C++, Rust or AssemblyScript, or stock Extism plug-ins)
that export actions and reach storage, logs and configuration only through
moat's op table; WASI command modules run like programs, with stdin, stdout,
args and env; source code in ten languages runs as WASM or, without a WASM
path, as a confined native process.

Start here:
  moat run examples/hello-go greet --input World     invoke a plugin action
  moat run prog.wasm -- arg1 arg2 < input.txt        run a WASI command
  moat inspect prog.wasm                             show kind, imports, exports, digest
  moat policy check examples/hello-go/moat.yaml      what the profile grants a module
  moat keygen --out release; moat sign DIR --key release.key
  moat audit --decision deny                         what was refused, and why
  moat doctor                                        which kernel layers this machine offers
  moat exec --native -- python3 script.py            a native program under those layers
  moat exec --lang c main.c < input.txt              source code in any language of moat langs
  moat new hello --lang go                           a new plugin (any of 8 languages), SDK included
  moat build examples/hello-go                       a plugin from source, by its moat.yaml
  moat dev hello greet --input World                 run again on every change
  moat serve; moat keys create --org O --user U      the HTTP API and web console
  MOAT_API_KEY=KEY moat deploy hello                 a plugin onto a running server

Data (the key-value store and the compilation cache) lives in --data, default
$MOAT_DATA, else moat's home: $XDG_DATA_HOME/moat/data, /var/lib/moat/data as
root, ~/.local/share/moat/data otherwise; the same from any directory.
The compilation cache (machine code, interpreter snapshots) can live apart:
--cache-dir, else a server configuration's cache_dir, else $MOAT_CACHE_DIR,
else DATA/cache. Put it on fast local disk, or share it between processes
(moat run, exec and serve on one machine): each module then compiles once.
Toolchains: moat toolchains install.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// The log is set up before any command runs, so that what is
		// logged before a command builds its host (a confinement
		// report, the backstop watcher) has the format asked for.
		PersistentPreRunE: func(*cobra.Command, []string) error {
			_, err := g.logger()
			return err
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.dataDir, "data", "", "data directory for the store, the build cache and (without --cache-dir) the compile cache (default $MOAT_DATA, else ~/.local/share/moat/data; /var/lib/moat/data as root)")
	pf.StringVar(&g.cacheDir, "cache-dir", "", "directory for the compile cache, apart from --data (default $MOAT_CACHE_DIR, else DATA/cache); processes may share one")
	pf.StringVar(&g.profile, "profile", "minimal", "operator profile: a built-in name (minimal, dev) or a YAML file")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format on stderr: text or json")
	root.AddCommand(newRunCmd(g), newInspectCmd(g), newVersionCmd(),
		newKeygenCmd(), newSignCmd(), newVerifyCmd(g), newAuditCmd(g), newPolicyCmd(g), newConfineCheckCmd(g), newDoctorCmd(), newExecCmd(g))
	for _, c := range registered {
		root.AddCommand(c(g))
	}
	suggestCommands(root)
	explainArgs(root)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usagef("%v (see `%s --help`)", err, c.CommandPath())
	})
	return root
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	return newLogger(g.logFormat, g.logLevel)
}

// newLogger is the log on stderr in format (text or json) at level. It
// also becomes slog's default, so that every line the process writes
// (the confinement report, the backstop, a package logging through
// slog.Default or the log package) has the one format: a plain-text line
// among JSON ones breaks the operator's log pipeline.
func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	// DEL, which both handlers leave raw (host.SafeLogAttr).
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: host.SafeLogAttr}
	var log *slog.Logger
	switch format {
	case "text":
		log = slog.New(slog.NewTextHandler(os.Stderr, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	default:
		return nil, usagef("--log-format %q: use text or json", format)
	}
	slog.SetDefault(log)
	logFormat = format
	return log, nil
}

// logFormat is the format newLogger last set up: processes this one
// starts (the backstop watcher) write theirs alike.
var logFormat = "text"

// closeAll runs the closers, newest first.
func (g *globalFlags) closeAll() {
	for i := len(g.closers) - 1; i >= 0; i-- {
		g.closers[i]()
	}
	g.closers = nil
}

func (g *globalFlags) loadProfile() (*policy.Profile, error) {
	if g.loaded != nil {
		return g.loaded, nil
	}
	p, err := policy.LoadProfile(g.profile)
	if err != nil {
		return nil, usagef("--profile %s: %v", g.profile, err)
	}
	g.loaded = p
	return p, nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print moat's version, ABI version and runtime versions",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), versionString())
		},
	}
}

// explainArgs makes every command's refusal of its arguments say what the
// command takes: cobra's own message ("accepts 2 arg(s), received 0")
// names neither the arguments nor the fix, so the usage line and the
// --help to read follow it.
func explainArgs(c *cobra.Command) {
	for _, sub := range c.Commands() {
		explainArgs(sub)
	}
	if c.Args == nil {
		return
	}
	check := c.Args
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usagef("%v: usage: %s (see `%s --help`)", err, cmd.UseLine(), cmd.CommandPath())
		}
		return nil
	}
}
