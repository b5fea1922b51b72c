package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func newAuditCmd(g *globalFlags) *cobra.Command {
	var f audit.Filter
	var asJSON bool
	var configFile string
	cmd := &cobra.Command{
		Use:   "audit [--correlation-id ID] [--module M] [--decision deny] [--since T] [--until T]",
		Short: "Query the audit trail: decisions, invocations, mutations, signatures, confirmations",
		Long: `Audit prints events from the audit trail, oldest first: every policy decision
(allow and deny), invocation, storage mutation, signature check and
confirmation, with its correlation id. The trail is the store in --data, or
the server's (--config: its data_dir or database_url; $MOAT_DATABASE_URL
wins over both).

The flags are /v1/audit's query parameters under the same names:
--correlation-id, --module, --decision, --kind, --since, --until, --limit.
--since and --until take an RFC 3339 time, as the API does, or a duration
back from now (1h); the range is [since, until).`,
		Example: "  moat audit --decision deny\n  moat audit --config moat-server.yaml --org acme\n  moat audit --correlation-id 9f1c2a... --json\n  moat audit --module hello-go --since 1h\n  moat audit --since 2026-01-02T00:00:00Z --until 2026-01-03T00:00:00Z",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch f.Decision {
			case "", audit.Allow, audit.Deny:
			default:
				return usagef("--decision %q: use allow or deny", f.Decision)
			}
			if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
				return usagef("--since %s is not before --until %s: the range is [since, until)", f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
			}
			if f.Limit < 1 || f.Limit > store.MaxAuditLimit {
				return usagef("--limit %d: give a number from 1 to %d", f.Limit, store.MaxAuditLimit)
			}
			cfg, err := g.serverConfig(configFile)
			if err != nil {
				return err
			}
			st, err := store.Open(cmd.Context(), cfg.StoreLocation())
			if err != nil {
				return err
			}
			defer st.Close()
			events, err := st.AuditQuery(context.Background(), f)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, e := range events {
					if err := enc.Encode(server.AuditEventOf(e)); err != nil {
						return err
					}
				}
				return nil
			}
			printEvents(cmd.OutOrStdout(), events)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.CorrelationID, "correlation-id", "", "only events of this correlation id (the X-Request-Id of a request, the correlation_id of a run)")
	// The flag's first name, kept for scripts; --correlation-id is the
	// name moat run and the HTTP API use.
	fl.StringVar(&f.CorrelationID, "correlation", "", "only events of this correlation id")
	fl.MarkHidden("correlation")
	fl.StringVar(&f.Module, "module", "", "only events of this module")
	fl.StringVar(&f.Decision, "decision", "", "only allow or deny decisions")
	fl.StringVar(&f.Kind, "kind", "", "only this kind: decision, invocation, op, signature, confirmation, load, confinement, route (a module's HTTP routes), ...")
	fl.StringVar(&f.Org, "org", "", "only events of this organization")
	fl.Var(newTimeOrAgo(&f.Since), "since", "only events at or after this: an RFC 3339 time (2026-01-02T15:04:05Z) or a duration back from now (1h)")
	fl.Var(newTimeOrAgo(&f.Until), "until", "only events before this: an RFC 3339 time or a duration back from now")
	fl.IntVar(&f.Limit, "limit", 100, "at most this many (the most recent)")
	fl.BoolVar(&asJSON, "json", false, "print JSON lines")
	fl.StringVar(&configFile, "config", "", "the server's configuration file (YAML): read its data_dir or database_url")
	cmd.AddCommand(newAuditPruneCmd(g))
	return cmd
}

func printEvents(w io.Writer, events []audit.Event) {
	if len(events) == 0 {
		fmt.Fprintln(w, "no matching audit events")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tDECISION\tMODULE\tACTION/OP\tWHO\tCORRELATION\tDETAIL")
	for _, e := range events {
		what := e.Action
		if e.Op != "" {
			what += "/" + e.Op
		}
		who := ""
		if e.User != "" || e.Org != "" {
			who = e.User + "@" + e.Org
		}
		detail := e.Reason
		if e.Code != "" && e.Code != "ok" || e.Kind == audit.KindInvocation {
			detail = strings.TrimSpace(e.Code + " " + detail)
		}
		if e.Rule != "" && e.Decision == audit.Deny {
			detail += " [rule: " + e.Rule + "]"
		}
		if e.MutationID != "" {
			detail += " mutation=" + e.MutationID
		}
		if e.ModelCallID != "" {
			detail += " model_call=" + e.ModelCallID
		}
		// Every field but the time is stored text, some of it written by
		// a module or a client: one row per event, whatever it holds.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02 15:04:05.000"), termSafe(e.Kind), termSafe(e.Decision),
			termSafe(e.Module), termSafe(what), termSafe(who), termSafe(e.CorrelationID), termSafe(detail))
	}
	tw.Flush()
}
