package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"text/tabwriter"

	"github.com/moat-sandbox/moat/policy/kernel"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// newConfineCheckCmd proves on this machine that a confined moat host is
// held by its layers: it confines itself as `moat run` does, then tries
// what a compromised host would, and shows each refusal.
func newConfineCheckCmd(g *globalFlags) *cobra.Command {
	var mode string
	cmd := &cobra.Command{
		Use:   "confine-check",
		Short: "Confine this process as moat run does, then verify each layer refuses what it should",
		Long: `Confine-check applies the host's own kernel layers (Landlock with only the
data directory and the compile cache (--cache-dir, $MOAT_CACHE_DIR) writable,
seccomp without execve) to itself, then attempts what a compromised host
would: execve, reading /etc/shadow, writing outside the data directory, a TCP
connection, ptrace, unshare, setuid, an MPTCP socket. Each must be refused
with the expected errno, and writing in the data directory and the compile
cache must work.

Exit status 0 when every check holds, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := kernel.ParseConfineMode(mode)
			if err != nil {
				return usagef("%v", err)
			}
			data := g.data()
			cache, err := g.cache()
			if err != nil {
				return err
			}
			// A listener opened before confinement, to connect to after.
			l, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				return err
			}
			defer l.Close()
			port := l.Addr().(*net.TCPAddr).Port
			// And one the confinement allows (ConnectTCP: a granted target).
			granted, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				return err
			}
			defer granted.Close()
			grantedPort := granted.Addr().(*net.TCPAddr).Port
			// Outside the data dir: the temporary directory itself (a file
			// in a directory made for the check could not be removed once
			// confined, and would be left behind by every run).
			outside := filepath.Join(os.TempDir(), fmt.Sprintf("moat-confine-check-%d", os.Getpid()))
			defer os.Remove(outside) // created only if the layer failed to refuse it
			rep, err := kernel.ConfineHost(kernel.HostConfinement{Mode: m, ReadWrite: []string{data, cache.dir}, MemoryBytes: 1 << 30, Pids: 256,
				ConnectTCP: []uint16{uint16(grantedPort)}})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "applied: %v\n", rep.Applied)
			for layer, why := range rep.Missing {
				fmt.Fprintf(cmd.OutOrStdout(), "missing: %s: %s\n", layer, why)
			}
			checks := []struct {
				what string
				want error
				try  func() error
			}{
				{"execve /bin/true", unix.EPERM, func() error { return exec.Command("/bin/true").Run() }},
				{"read /etc/shadow", unix.EACCES, func() error { _, err := os.ReadFile("/etc/shadow"); return err }},
				{"write outside the data dir", unix.EACCES, func() error { return os.WriteFile(outside, nil, 0o600) }},
				{"write in the data dir", nil, func() error {
					p := filepath.Join(data, "confine-check")
					defer os.Remove(p)
					return os.WriteFile(p, []byte("ok"), 0o600)
				}},
				{"write in the compile cache", nil, func() error {
					p := filepath.Join(cache.dir, fmt.Sprintf("confine-check-%d", os.Getpid()))
					defer os.Remove(p)
					return os.WriteFile(p, []byte("ok"), 0o600)
				}},
				{"tcp connect 127.0.0.1:" + strconv.Itoa(port), unix.EACCES, func() error {
					c, err := net.Dial("tcp4", l.Addr().String())
					if err == nil {
						c.Close()
					}
					return err
				}},
				{"tcp connect to a granted port " + strconv.Itoa(grantedPort), nil, func() error {
					c, err := net.Dial("tcp4", granted.Addr().String())
					if err == nil {
						c.Close()
					}
					return err
				}},
				{"ptrace(ATTACH parent)", unix.EPERM, func() error { return unix.PtraceAttach(os.Getppid()) }},
				{"unshare(CLONE_NEWUSER)", unix.EPERM, func() error { return unix.Unshare(unix.CLONE_NEWUSER) }},
				{"setuid(0)", unix.EPERM, func() error { return unix.Setuid(0) }},
				{"socket(MPTCP)", unix.EPERM, func() error {
					fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 262)
					if err == nil {
						unix.Close(fd)
					}
					return err
				}},
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CHECK\tWANT\tGOT\tRESULT")
			failed := 0
			for _, c := range checks {
				err := c.try()
				ok := c.want == nil && err == nil || c.want != nil && errors.Is(err, c.want)
				want, got, res := "ok", "ok", "held"
				if c.want != nil {
					want = unix.ErrnoName(c.want.(unix.Errno))
				}
				if err != nil {
					var en unix.Errno
					if errors.As(err, &en) {
						got = unix.ErrnoName(en)
					} else {
						got = err.Error()
					}
				}
				if !ok {
					res, failed = "NOT HELD", failed+1
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.what, want, got, res)
			}
			tw.Flush()
			if failed > 0 {
				return fmt.Errorf("%d of %d checks not held", failed, len(checks))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&mode, "confine", string(kernel.ConfineStrict), "strict or best-effort")
	return g.withServerConfig(cmd, "check with its data_dir as the writable directory")
}
