package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func init() { registerCommand(newDevCmd) }

func newDevCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev DIR [ACTION] [moat run flags]",
		Short: "Rebuild and run a plugin again on every change to its sources",
		Long: `Watch the plugin in DIR: on start and whenever a source file changes
(polled every --interval, default 500ms), run ` + "`moat run DIR ACTION ...`" + ` again,
which builds a compiled plugin first when a source is newer than its module.
Without ACTION, only build (compiled languages). Every flag after DIR is
moat run's (--input, --config, --data, ...). Stop with Ctrl-C.

Each run is a process of its own, so each is confined as moat run confines
itself, and a plugin that crashes or hangs (until --timeout) ends that run
only.`,
		Example: `  moat dev hello greet --input World
  moat dev hello greet --input World --config greeting=Hi --interval 1s`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			interval := 500 * time.Millisecond
			var rest []string
			for i := 0; i < len(args); i++ {
				a := args[i]
				switch {
				case a == "-h" || a == "--help":
					return cmd.Help()
				case a == "--interval" && i+1 < len(args):
					i++
					a = "--interval=" + args[i]
					fallthrough
				case strings.HasPrefix(a, "--interval="):
					d, err := time.ParseDuration(strings.TrimPrefix(a, "--interval="))
					if err != nil || d < 50*time.Millisecond || d > time.Minute {
						return usagef("--interval %q: give a duration from 50ms to 1m, e.g. 500ms", strings.TrimPrefix(a, "--interval="))
					}
					interval = d
				default:
					rest = append(rest, a)
				}
			}
			if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
				return usagef("give the plugin's directory first: moat dev DIR [ACTION] [moat run flags]")
			}
			return devLoop(cmd.Context(), rest[0], rest[1:], interval)
		},
	}
	return cmd
}

// devLoop runs moat run (or moat build) on dir at once and after every
// change of its sources, until ctx ends or an interrupt.
func devLoop(ctx context.Context, dir string, rest []string, interval time.Duration) error {
	if st, err := os.Stat(filepath.Join(dir, "moat.yaml")); err != nil || st.IsDir() {
		return usagef("%s holds no moat.yaml: moat dev watches a plugin directory (make one with moat new NAME --lang LANG)", dir)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := append([]string{"run", dir}, rest...)
	if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
		args = append([]string{"build", dir}, rest...)
	}
	last := ""
	for {
		state, err := sourceState(dir)
		if err != nil {
			return fmt.Errorf("dev %s: %w", dir, err)
		}
		if state != last {
			if last != "" {
				fmt.Fprintf(os.Stderr, "==> %s changed: moat %s\n", dir, strings.Join(args, " "))
			}
			last = state
			c := exec.CommandContext(ctx, self, args...)
			c.Stdin, c.Stdout, c.Stderr = nil, os.Stdout, os.Stderr
			err := c.Run()
			if ctx.Err() != nil {
				return nil
			}
			if ee, ok := err.(*exec.ExitError); ok {
				fmt.Fprintf(os.Stderr, "==> exit %d; watching %s for changes\n", ee.ExitCode(), dir)
			} else if err != nil {
				return err
			} else {
				fmt.Fprintf(os.Stderr, "\n==> watching %s for changes (Ctrl-C to stop)\n", dir)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// sourceState is a digest of the names, sizes and modification times of
// the files moat build would copy from dir: it changes when one is
// edited, added or removed (the module written by a build is not one).
func sourceState(dir string) (string, error) {
	h := sha256.New()
	err := walkSources(dir, func(p string, fi fs.FileInfo) error {
		fmt.Fprintf(h, "%q %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}
