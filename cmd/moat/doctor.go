package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy/kernel"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func newDoctorCmd() *cobra.Command {
	var (
		asJSON  bool
		require []string
		where   string
		config  string
	)
	names := kernel.ProbeLayerNames()
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report which kernel confinement layers this machine gives moat, and what a missing one costs",
		Long: `moat doctor tests, for real, each kernel layer moat uses to confine its host
process and the native children it starts (python3, bash, node fallbacks),
and prints one line per layer: ok, or missing with why (the errno or the
reason) and what moat loses without it. WebAssembly guests are confined by
the wasm runtime whatever this reports; these layers are the walls around
everything that is not wasm.

The layers:
  landlock        Landlock filesystem rules: children read only the system dirs,
                  write only their job dir, exec only allowlisted binaries; the
                  host itself is held to its data dir. Needs no privilege.
  landlock-net    Landlock TCP rules (ABI 4+): connect/bind only to allowed ports.
                  TCP only; UDP needs ABI 10 and MPTCP bypasses it, so moat blocks
                  MPTCP sockets with seccomp.
  landlock-scope  Landlock IPC scoping (ABI 6+): no signals to, and no abstract
                  unix sockets of, processes outside the sandbox.
  seccomp         syscall filters returning an errno: no mount, ptrace, namespaces,
                  keyrings or MPTCP for children; no execve for the host itself.
  cgroup          memory, CPU and process-count limits per child (v1, hybrid or v2;
                  the report lists the controllers moat can create groups in).
  userns          user namespaces: without root, the door to the other namespaces.
  netns           network namespaces: a child with only loopback has zero egress
                  by construction.
  procfs          a fresh /proc for each child's pid namespace; where a container
                  runtime masks /proc, a child in a user namespace cannot mount one:
                  native jobs are then refused, or with MOAT_NATIVE_PROC=bind get
                  the pod's /proc bound (its pids are the pod's; Landlock still
                  denies them every read of it).
  iptables        per-cgroup egress rules (-m cgroup --path) for children that
                  share the host network; the report names the backend.
  root            cgroups, iptables rules and dedicated uids need euid 0.

The probe leaves nothing behind: the scratch cgroup directories (moat-probe-*)
and the scratch iptables chain (MOAT-PROBE-*) it creates are removed at once.

With --store (a data directory or a postgres:// URL, as moat serve's store:)
it also opens that store and reports its backend and, for each op family
with storage of its own (knowledge, ai, tasks, secrets, db, media), whether
the backend implements it: a family it lacks fails its ops with an error
naming the backend and the family. Both of moat's backends implement every
one; a third-party backend may not. With --config (moat serve's
configuration file) it also lists the op families that configuration
disables (disable_families:), whose ops every module is refused there.

Exit status 0 even when layers are missing (it reports), unless --require
names a layer that is missing: then 1, with the layer named on stderr.

Examples:
  moat doctor
  moat doctor --json
  moat doctor --require landlock,seccomp,cgroup      (in CI or a start-up check)
  moat doctor --require all
  moat doctor --store /var/lib/moat
  moat doctor --store /var/lib/moat --config moat-server.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var want []string
			for _, r := range require {
				for n := range strings.SplitSeq(r, ",") {
					n = strings.TrimSpace(n)
					switch {
					case n == "":
					case n == "all":
						want = append(want, names...)
					case slices.Contains(names, n):
						want = append(want, n)
					default:
						return usagef("--require %s: unknown layer; use all or some of %s", n, strings.Join(names, ","))
					}
				}
			}

			res := kernel.Probe(cmd.Context())
			var storage *storeReport
			if where != "" {
				var err error
				if storage, err = reportStore(cmd.Context(), where); err != nil {
					return err
				}
			}
			if config != "" {
				sc, err := server.LoadConfig(config)
				if err != nil {
					return usagef("--config: %v", err)
				}
				if storage == nil {
					storage = &storeReport{}
				}
				storage.Disabled = append([]string{}, sc.DisableFamilies...)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				var v any = res
				if storage != nil {
					v = struct {
						kernel.ProbeResult
						Store *storeReport `json:"store"`
					}{res, storage}
				}
				b, err := json.MarshalIndent(v, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(out, string(b))
			} else {
				fmt.Fprint(out, res.Table())
				if storage != nil {
					fmt.Fprint(out, storage.table())
				}
			}

			var missing []string
			for _, n := range want {
				if slices.Contains(missing, n) {
					continue
				}
				if l, ok := res.Layer(n); !ok || !l.Available {
					missing = append(missing, n)
					why := "not probed"
					if ok {
						why = l.Missing
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "moat: required layer %s is missing: %s\n", n, why)
				}
			}
			if len(missing) > 0 {
				return exitError{code: exitFailure}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&where, "store", "", "also report which op families' storage the store at this data directory or postgres:// URL implements")
	f.StringVar(&config, "config", "", "also report the op families moat serve's configuration file disables (disable_families)")
	f.StringSliceVar(&require, "require", nil, "exit 1 if any of these layers (comma-separated, or all) is missing: "+strings.Join(names, ","))
	return cmd
}

// storeReport is what doctor --store says of a store: its backend and, per
// op family with storage of its own, whether the backend implements it.
type storeReport struct {
	Backend  string                `json:"backend"`
	Location string                `json:"location"`
	Families []store.FamilySupport `json:"families"`
	// Disabled are the op families the server's configuration disables
	// (--config: disable_families), whose ops every module is refused.
	Disabled []string `json:"disabled,omitempty"`
}

func reportStore(ctx context.Context, where string) (*storeReport, error) {
	st, err := store.Open(ctx, where)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return &storeReport{Backend: st.Backend(), Location: st.Path(), Families: st.Families()}, nil
}

func (r *storeReport) table() string {
	var b strings.Builder
	if r.Backend != "" {
		fmt.Fprintf(&b, "\nstore %s (%s): op families' storage\n", r.Backend, r.Location)
	}
	for _, f := range r.Families {
		state := "ok"
		if !f.Supported {
			state = "missing: the backend does not implement " + f.Interface + "; the " + f.Name + " ops fail on it"
		}
		if slices.Contains(r.Disabled, f.Name) {
			state = "disabled by the server's configuration (disable_families)"
		}
		fmt.Fprintf(&b, "  %-10s %s\n", f.Name, state)
	}
	if len(r.Disabled) > 0 {
		fmt.Fprintf(&b, "\nop families disabled by the server's configuration: %s: their ops are refused to every module\n", strings.Join(r.Disabled, ", "))
	}
	return b.String()
}
