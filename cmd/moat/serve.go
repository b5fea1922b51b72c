package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/internal/tracing"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/all"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/kernel"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/toolchains"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newServeCmd) }

func newServeCmd(g *globalFlags) *cobra.Command {
	var configFile, listen, confine, migrate string
	var hostMB int
	var printConfig bool
	cmd := &cobra.Command{
		Use:   "serve [--config moat-server.yaml] [--listen ADDR]",
		Short: "Serve the HTTP API and the web console",
		Long: `Serve runs moat as a server: the /v1 HTTP API (upload modules, invoke actions,
read the audit trail, run code), the web console at /, health and readiness
probes, and Prometheus metrics.

With no configuration it listens on 127.0.0.1:8080, keeps its data in --data
(default $MOAT_DATA, else ~/.local/share/moat/data; /var/lib/moat/data as
root) and applies the minimal profile. A
configuration file (--config) sets the listen address, TLS, data directory,
profiles per organization, limits, the log and the Piston-compatible routes;
its errors name the file, line and field.

Several servers are replicas of one service when their configurations give
the same database_url (a PostgreSQL URL; $MOAT_DATABASE_URL overrides it, so
the password can come from a secret): keys, modules and their bytes, kv,
audit, confirmations and rate limits live in the database, each replica
keeps only its compile cache on disk (in its data directory, or apart:
--cache-dir, cache_dir, $MOAT_CACHE_DIR; replicas on one machine may share
one), and a module uploaded
or deleted through one is served so by all within a second. The password is
never logged. Replicas given the same code key ($MOAT_CODE_KEY, or
code_key_file in the configuration; at least 32 characters: openssl rand
-hex 32) share compiled machine code through the database, authenticated
with it: a module one replica compiled loads on the others, and on a
replica restarted with an empty data directory, without compiling.

Every /v1 request needs an API key: create one with ` + "`moat keys create`" + `
(with the server's --config, it writes to the server's store).
SIGINT or SIGTERM shut the server down gracefully: requests in flight finish.

Once its port is bound the server confines itself (--confine, default
best-effort): Landlock lets it read the system and the toolchains and write
only its data, compile cache and scratch directories, bind only its own port; seccomp
denies execve, ptrace, namespaces, setuid, bpf, io_uring, mount and MPTCP;
as root, a cgroup of its own caps its memory (--host-memory-mib) and threads, a
backstop behind the per-invocation limits: should the server ever reach it,
a watcher process reports the kill on stderr and in the audit trail.
Compilers and native programs then start from a launcher process started
before the filter, under the native runner's own layers. Each layer the
server runs without is a warning and an audit event (moat audit --kind
confinement). --confine=strict refuses to start when a layer is missing;
--confine=off serves unconfined.`,
		Example: `  moat serve
  moat serve --print-config > moat-server.yaml   # a commented sample, every value the default
  moat keys create --org acme --user ann          # prints the API key
  moat serve --config moat-server.yaml
  MOAT_DATABASE_URL=postgres://moat:PW@db:5432/moat moat serve --config moat-server.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printConfig {
				_, err := cmd.OutOrStdout().Write(server.SampleConfig)
				return err
			}
			cfg, err := g.serverConfig(configFile)
			if err != nil {
				return err
			}
			flags := cmd.Flags()
			if flags.Changed("profile") || configFile == "" {
				cfg.Profile = g.profile
			}
			if flags.Changed("log-format") {
				cfg.Log.Format = g.logFormat
			}
			if flags.Changed("log-level") {
				cfg.Log.Level = g.logLevel
			}
			if listen != "" {
				cfg.Listen = listen
			}
			if migrate != "" {
				cfg.Migrate = migrate
				if _, err := cfg.MigrateMode(); err != nil {
					return usagef("--migrate: %v", err)
				}
			}
			if cfg.Logger == nil {
				if cfg.Logger, err = newLogger(cfg.Log.Format, cfg.Log.Level); err != nil {
					return err
				}
			}
			// The compile cache: --cache-dir, cache_dir, $MOAT_CACHE_DIR
			// or data_dir/cache, made (and its setting named, should that
			// fail) before the server confines itself to it.
			cache, err := openCache(g.cacheDir, cfg.CacheDir, cfg.File, cfg.DataDir)
			if err != nil {
				return err
			}
			cfg.CacheDir = cache.dir
			cfg.MachineCacheDir = machineCacheDir()
			cfg.Logger.Info("moat serve: compile cache", "dir", cache.dir, "from", cache.from, "machine", cfg.MachineCacheDir)
			mode, err := kernel.ParseConfineMode(confine)
			if err != nil {
				return usagef("--confine: %v", err)
			}
			// Code execution (/v1/runs, the console's Run tab, the Piston
			// routes) uses the languages executor on the server's host.
			// Confined, every native run (compilers, bash, python3) goes
			// through a launcher started before the seccomp filter. Either
			// way native runs start in wrappers kept warm (native.Pool).
			// What the server's confinement applied and lacks is logged
			// (a warning per missing layer) and audited once the store
			// is open.
			var srv *server.Server
			onConfined := func(rep *kernel.HostReport) {
				warnConfinement(slog.Default(), "moat serve", rep)
				if srv != nil {
					srv.SetConfinement(rep.Applied, rep.Missing)
					if err := srv.Store().AuditInsert(context.Background(), confinementEvents("moat serve", rep)); err != nil {
						slog.Error("moat serve: audit the confinement", "err", err)
					}
				}
			}
			if mode == kernel.ConfineOff {
				pool := native.NewPool(serveWarmWrappers, "")
				native.UsePool(pool)
				defer func() {
					native.UsePool(nil)
					pool.Close()
				}()
			} else {
				if hostMB <= 0 {
					return usagef("--host-memory-mib %d: give the server's memory ceiling in MiB", hostMB)
				}
				restore, err := prepareServeConfinement(&cfg, mode, int64(hostMB)<<20, onConfined)
				if err != nil {
					return err
				}
				defer restore()
			}
			// A build shared by identical jobs runs under the executor's
			// own context, bounded by the longest compile any profile
			// allows (and never less than the executor's default).
			var maxCompile time.Duration
			for _, name := range append([]string{cfg.Profile}, slices.Collect(maps.Values(cfg.Profiles))...) {
				p, err := policy.LoadProfile(name)
				if err != nil {
					return err
				}
				maxCompile = max(maxCompile, time.Duration(p.ExecMaxima().CompileTimeout))
			}
			cfg.NewExecutor = func(h *host.Host, trail *audit.Log) (server.Executor, error) {
				return languages.NewExecutor(languages.ExecutorConfig{Host: h, Audit: trail, BuildCacheDir: filepath.Join(cfg.DataDir, "build-cache"),
					BuildCacheMaxBytes: int64(cfg.BuildCacheBytes), StateDir: filepath.Join(cfg.DataDir, "lang-state"),
					MachineStateDir: toolchains.StateDir(), MaxCompileTimeout: max(maxCompile, languages.DefaultMaxCompileTimeout)})
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// Traces, when the OTEL_* variables ask for them (docs/OPERATIONS.md,
			// Traces); flushed at shutdown.
			stopTracing, err := tracing.Setup(ctx)
			if err != nil {
				return fmt.Errorf("moat serve: traces: %w", err)
			}
			defer func() {
				fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := stopTracing(fctx); err != nil {
					slog.Warn("moat serve: flushing the last spans", "err", err)
				}
			}()
			srv, err = server.New(ctx, cfg)
			if err != nil {
				return err
			}
			if mode == kernel.ConfineOff {
				onConfined(&kernel.HostReport{Missing: map[string]string{"all": "--confine=off: the server runs without its own Landlock and seccomp layers"}})
			}
			return srv.ListenAndServe(ctx)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "server configuration file (YAML)")
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print a commented sample configuration (every value the default) and exit: moat serve --print-config > moat-server.yaml")
	cmd.Flags().StringVar(&migrate, "migrate", "", "upgrade an older schema at start (auto) or never (manual), overriding migrate: in the config; left out, SQLite migrates and PostgreSQL refuses, naming moat migrate")
	cmd.Flags().StringVar(&listen, "listen", "", "listen address, overriding the config (default 127.0.0.1:8080)")
	mibFlag(cmd.Flags(), &hostMB, "host-memory", 4096, "the confined server's own memory ceiling in MiB (its backstop cgroup; needs root)")
	cmd.Flags().StringVar(&confine, "confine", string(kernel.ConfineBestEffort), "confine the server with Landlock and seccomp once its port is bound: off, best-effort or strict")
	return cmd
}

// prepareServeConfinement readies everything the confined server can no
// longer do itself, and sets cfg.BeforeServe to confine it once the port
// is bound: a scratch directory (TMPDIR, for build and job directories,
// reachable by the job uid), the toolchain versions probed (they run the
// compilers), and the launcher that starts every native process later.
// serveWarmWrappers is how many confined wrappers moat serve keeps started
// ahead of native runs: two, so a compile followed by its run, or two
// requests at once on this two-core machine kind, both start warm.
const serveWarmWrappers = 2

// removeStaleScratch removes the scratch dirs of servers that are gone
// (killed, so their launcher could not remove them): moat-serve-PID-*
// whose PID no longer exists. A PID reused by another process keeps its
// dir until that process ends too.
func removeStaleScratch() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "moat-serve-*-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(d), "moat-serve-"), "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

func prepareServeConfinement(cfg *server.Config, mode kernel.ConfineMode, hostMemory int64, onConfined func(*kernel.HostReport)) (restore func(), err error) {
	data, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	removeStaleScratch()
	scratch, err := os.MkdirTemp("", fmt.Sprintf("moat-serve-%d-", os.Getpid()))
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(scratch, 0o711); err != nil {
		return nil, err
	}
	oldTmp, hadTmp := os.LookupEnv("TMPDIR")
	os.Setenv("TMPDIR", scratch)
	languages.Statuses() // probes each toolchain's version while exec is allowed
	goroot, _, _ := toolchains.GoRoot()
	// The backstop's watcher, started while exec is allowed (backstop.go).
	// On PostgreSQL its audit event goes to the database, with the others.
	where := data
	if cfg.DatabaseURL != "" {
		where = cfg.StoreLocation()
	}
	watch, err := startBackstopWatch("moat serve", where)
	if err != nil {
		os.RemoveAll(scratch)
		return nil, err
	}
	// The launcher removes the scratch dir when it exits: the confined
	// server may not (nothing is granted on the dir's parent).
	l, err := native.StartLauncherWith(native.LauncherOptions{Warm: serveWarmWrappers, Scratch: scratch})
	if err != nil {
		os.RemoveAll(scratch)
		return nil, err
	}
	native.UseLauncher(l)
	restore = func() {
		// The watcher's pipe stays open until the process exits: closing
		// it earlier would tell the watcher the host is gone while it is
		// still in its cgroup, which the watcher then empties.
		defer runtime.KeepAlive(watch)
		native.UseLauncher(nil)
		l.Close()
		os.RemoveAll(scratch)
		if hadTmp {
			os.Setenv("TMPDIR", oldTmp)
		} else {
			os.Unsetenv("TMPDIR")
		}
	}
	readOnly := []string{}
	for _, p := range []string{toolchains.Dir(), goroot, cfg.TLS.Cert, cfg.TLS.Key} {
		if p != "" {
			readOnly = append(readOnly, p)
		}
	}
	readWrite := []string{data, scratch}
	if dir := cfg.SessionsDir(); dir != "" { // the sessions' workspaces
		if err := os.MkdirAll(dir, 0o700); err != nil {
			restore()
			return nil, fmt.Errorf("sessions.dir: %w", err)
		}
		readWrite = append(readWrite, dir)
		// A session's commands share one job uid, leased by the server
		// for the session's life (an flock in the uid lock directory).
		if os.Geteuid() == 0 && os.MkdirAll(native.UIDLockDir, 0o700) == nil {
			readWrite = append(readWrite, native.UIDLockDir)
		}
	}
	if cfg.CacheDir != "" { // resolved and made by the caller
		readWrite = append(readWrite, cfg.CacheDir)
	}
	if state := toolchains.StateDir(); state != "" { // the machine's: Go's standard library, the interpreters' code
		readWrite = append(readWrite, state)
	}
	// Modules arrive after start-up, so the kernel's connect rule covers
	// every target the profiles could grant; each dial is still checked
	// against the module's own grant in Go.
	// The same for the directories the profiles grant: each is opened,
	// and every name beneath it checked, by the host.
	var profiles []*policy.Profile
	for _, name := range append([]string{cfg.Profile}, slices.Collect(maps.Values(cfg.Profiles))...) {
		p, err := policy.LoadProfile(name)
		if err != nil {
			restore()
			return nil, err
		}
		profiles = append(profiles, p)
	}
	dial, err := serverDialPorts(*cfg)
	if err != nil {
		restore()
		return nil, err
	}
	k := bundle.HostKernelGrants(profiles...).Merge(policy.KernelGrants{ConnectTCP: dial})
	grantRead, grantWrite, connect, anyPort := k.Read, k.Write, k.ConnectTCP, k.ConnectAnyTCP
	cfg.BeforeServe = func(ln net.Listener) error {
		var ports []uint16
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			ports = append(ports, uint16(a.Port))
		}
		rep, err := kernel.ConfineHost(kernel.HostConfinement{Mode: mode, ReadOnly: readOnly, ReadWrite: readWrite, BindTCP: ports,
			ConnectTCP: connect, ConnectAnyTCP: anyPort, MemoryBytes: hostMemory, Pids: 4096, GrantRead: grantRead, GrantWrite: grantWrite})
		if err != nil {
			return err
		}
		onConfined(rep)
		return nil
	}
	return restore, nil
}

// databasePorts are the TCP ports a connection to the database of url may
// go to (server.DatabaseEndpoints: every host and fallback); a unix
// socket has none.
func databasePorts(url string) ([]uint16, error) {
	eps, err := server.DatabaseEndpoints(url)
	if err != nil {
		return nil, fmt.Errorf("database_url: %w", err)
	}
	var ports []uint16
	for _, e := range eps {
		if e.Socket == "" && !slices.Contains(ports, e.Port) {
			ports = append(ports, e.Port)
		}
	}
	return ports, nil
}

// serverDialPorts are the TCP ports a host under cfg dials for itself,
// which its kernel connect rule must allow: the database's (its pool opens
// connections for as long as the host runs, and its LISTEN connection
// reconnects; a unix socket needs no rule, Landlock does not govern
// connecting to one) and the model providers' (ai.providers).
func serverDialPorts(cfg server.Config) ([]uint16, error) {
	var ports []uint16
	if cfg.DatabaseURL != "" {
		db, err := databasePorts(cfg.DatabaseURL)
		if err != nil {
			return nil, err
		}
		ports = append(ports, db...)
	}
	for _, p := range cfg.AI.Ports() {
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}
