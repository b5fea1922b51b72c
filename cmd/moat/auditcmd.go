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
	"github.com/moat-sandbox/moat/host/server"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/spf13/cobra"
)

func newAuditCmd(g *globalFlags) *cobra.Command {
	var f audit.Filter
	var since time.Duration
	var asJSON bool
	var configFile string
	cmd := &cobra.Command{
		Use:   "audit [--correlation-id ID] [--module M] [--decision deny]",
		Short: "Query the audit trail: decisions, invocations, mutations, signatures, confirmations",
		Long: `Audit prints events from the audit trail, oldest first: every policy decision
(allow and deny), invocation, storage mutation, signature check and
confirmation, with its correlation id. The trail is the store in --data, or
the server's (--config: its data_dir or database_url; $MOAT_DATABASE_URL
wins over both).`,
		Example: "  moat audit --decision deny\n  moat audit --config moat-server.yaml --org acme\n  moat audit --correlation-id 9f1c2a... --json\n  moat audit --module hello-go --since 1h",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch f.Decision {
			case "", audit.Allow, audit.Deny:
			default:
				return usagef("--decision %q: use allow or deny", f.Decision)
			}
			if since < 0 {
				return usagef("--since %s: give a positive duration such as 1h", since)
			}
			if since > 0 {
				f.Since = time.Now().Add(-since)
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
	fl.StringVar(&f.Kind, "kind", "", "only this kind: decision, invocation, op, signature, confirmation, load, confinement")
	fl.StringVar(&f.Org, "org", "", "only events of this organization")
	fl.DurationVar(&since, "since", 0, "only events newer than this, e.g. 1h")
	fl.IntVar(&f.Limit, "limit", 100, "at most this many (the most recent)")
	fl.BoolVar(&asJSON, "json", false, "print JSON lines")
	fl.StringVar(&configFile, "config", "", "the server's configuration file (YAML): read its data_dir or database_url")
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
