package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newMigrateCmd) }

func newMigrateCmd(g *globalFlags) *cobra.Command {
	var configFile string
	var dryRun bool
	var to int
	cmd := &cobra.Command{
		Use:   "migrate [--config moat-server.yaml] [--dry-run] [--to N]",
		Short: "Upgrade the store's schema to this moat's (the step moat serve on PostgreSQL leaves to the operator)",
		Long: `Migrate applies the schema steps the store (--data, or the server's
--config: its data_dir or database_url; $MOAT_DATABASE_URL wins) has not seen
yet, in one transaction, logging each step (from→to, name, duration).

On PostgreSQL, moat serve does not upgrade a shared schema at start (unless
migrate: auto): replicas of the previous release may be serving from it.
Run this once per upgrade, before or while the new replicas roll out (on
Kubernetes, deploy/kubernetes/deployment.yaml's init container runs it in
each new pod before moat serve starts). It takes an advisory
lock, so a second moat migrate waits for the first and then finds nothing
to do. On SQLite it copies moat.db beside itself first.

Every step is an expand step (it only adds) unless it says contract: after
an expand step the previous release keeps working on the database, so a
rollback is only a matter of running the old binary; after a contract step,
releases older than the version it names refuse to start.

--dry-run lists the steps and applies none; --to N stops at version N.`,
		Example: "  moat migrate --config moat-server.yaml --dry-run\n  MOAT_DATABASE_URL=postgres://moat@db/moat moat migrate\n  moat migrate --data /var/lib/moat/data",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to < 0 {
				return usagef("--to %d: give a schema version (1 or more), or leave it out for the newest", to)
			}
			cfg, err := g.serverConfig(configFile)
			if err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			start := time.Now()
			r, err := store.Migrate(cmd.Context(), cfg.StoreLocation(), store.MigrateOptions{DryRun: dryRun, To: to, Log: log})
			if err != nil {
				return err
			}
			printMigration(cmd, storeName(cfg), r, dryRun, time.Since(start))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configFile, "config", "", "the server's configuration file (YAML): migrate its data_dir or database_url")
	fl.BoolVar(&dryRun, "dry-run", false, "list the steps that would be applied; apply none")
	fl.IntVar(&to, "to", 0, "stop at this schema version (default: the newest this moat knows)")
	return cmd
}

func printMigration(cmd *cobra.Command, where string, r store.MigrationReport, dryRun bool, took time.Duration) {
	w := cmd.OutOrStdout()
	switch {
	case r.From > r.Known:
		fmt.Fprintf(w, "%s: schema version %d is newer than this moat's (%d); its newer steps only added to it, so this moat runs on it; nothing to do\n", where, r.From, r.Known)
		return
	case len(r.Steps) == 0:
		fmt.Fprintf(w, "%s: schema version %d is up to date; nothing to do\n", where, r.From)
		return
	}
	verb := "applied"
	if dryRun {
		verb = "would apply"
	}
	fmt.Fprintf(w, "%s: schema version %d; %s %d step(s):\n", where, r.From, verb, len(r.Steps))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range r.Steps {
		kind := "expand (the previous release keeps working)"
		if s.MinReader > 0 {
			kind = fmt.Sprintf("contract (moat older than schema %d stops working)", s.MinReader)
		}
		d := ""
		if !dryRun {
			d = s.Duration.Round(time.Microsecond).String()
		}
		fmt.Fprintf(tw, "  %d → %d\t%s\t%s\t%s\n", s.From, s.To, s.Name, kind, d)
	}
	tw.Flush()
	if r.Backup != "" {
		fmt.Fprintf(w, "copied the database first to %s\n", r.Backup)
	}
	if dryRun {
		fmt.Fprintf(w, "run without --dry-run to apply them\n")
		return
	}
	fmt.Fprintf(w, "schema version %d now (took %s)\n", r.To, took.Round(time.Millisecond))
}

// newAuditPruneCmd is `moat audit prune`.
func newAuditPruneCmd(g *globalFlags) *cobra.Command {
	var configFile, before string
	cmd := &cobra.Command{
		Use:   "prune --before 90d|2026-01-02T00:00:00Z",
		Short: "Remove audit events older than a time, in small batches",
		Long: `Prune removes the audit events older than --before from the store (--data,
or the server's --config), in batches of a few thousand rows, each its own
short transaction, so the server keeps serving meanwhile; replicas and this
command may prune at once. It prints how many events it removed.

--before takes an RFC 3339 time, or an age: days (90d) or a duration (720h).
moat serve prunes by itself when audit.retention is set.`,
		Example: "  moat audit prune --before 365d --config moat-server.yaml\n  moat audit prune --before 2026-01-01T00:00:00Z",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cutoff, err := parseBefore(before, time.Now())
			if err != nil {
				return usagef("--before: %v", err)
			}
			cfg, err := g.serverConfig(configFile)
			if err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			st, err := store.Open(cmd.Context(), cfg.StoreLocation())
			if err != nil {
				return err
			}
			defer st.Close()
			p, err := server.PruneAudit(cmd.Context(), st, cutoff, log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d audit event(s) older than %s from %s (%d batch(es))\n",
				p.Events, cutoff.UTC().Format(time.RFC3339), storeName(cfg), p.Batches)
			return nil
		},
	}
	cmd.Flags().StringVar(&before, "before", "", "remove events older than this: an RFC 3339 time, or an age like 90d or 720h (required)")
	cmd.Flags().StringVar(&configFile, "config", "", "the server's configuration file (YAML): prune its data_dir or database_url")
	return cmd
}

// parseBefore reads --before (parseTimeOrAgo): an RFC 3339 time, or an
// age back from now as audit.retention writes it (90d, 720h). Neither may
// name the future or now: that would remove every event.
func parseBefore(s string, now time.Time) (time.Time, error) {
	if strings.TrimSpace(s) == "" {
		return time.Time{}, fmt.Errorf("give the cutoff: an age like 90d or an RFC 3339 time")
	}
	t, err := parseTimeOrAgo(s, now, func(s string) (time.Duration, error) {
		d, err := server.ParseRetention(s)
		if err != nil {
			return 0, fmt.Errorf("%v; or give an RFC 3339 time (2026-01-02T15:04:05Z)", err)
		}
		if d == 0 {
			return 0, fmt.Errorf("%q would remove every event; give an age like 90d", s)
		}
		return d, nil
	})
	if err != nil {
		return time.Time{}, err
	}
	if t.After(now) {
		return time.Time{}, fmt.Errorf("%s is in the future: that would remove every event", s)
	}
	return t, nil
}
