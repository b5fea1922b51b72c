package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newAICmd) }

// aiFlags are the flags every ai subcommand shares.
type aiFlags struct {
	configFile string
	org        string
	asJSON     bool
}

func newAICmd(g *globalFlags) *cobra.Command {
	var f aiFlags
	cmd := &cobra.Command{
		Use:   "ai",
		Short: "Show model-call usage and set organizations' daily token budgets",
		Long: `Ai reads and sets what model calls (ai.complete, ai.embed, knowledge's
embeddings) may spend, in the store in --data or the server's (--config: its
data_dir or database_url; $MOAT_DATABASE_URL wins over both). The defaults
are the server configuration's ai.budgets; an organization's override lives
in the database, so every replica applies it at once.`,
		Example: "  moat ai usage --config moat-server.yaml\n  moat ai usage --org acme --days 7\n" +
			"  moat ai budget set --org acme --org-daily-tokens 2000000 --module-daily-tokens 500000\n" +
			"  moat ai budget show --org acme\n  moat ai budget reset --org acme",
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.configFile, "config", "", "the server's configuration file (YAML): its store and its ai.budgets")
	pf.StringVar(&f.org, "org", "", "the organization")
	pf.BoolVar(&f.asJSON, "json", false, "print JSON")
	budget := &cobra.Command{Use: "budget", Short: "Show, set or reset an organization's daily token budgets", Args: cobra.NoArgs}
	budget.AddCommand(newAIBudgetShowCmd(g, &f), newAIBudgetSetCmd(g, &f), newAIBudgetResetCmd(g, &f))
	cmd.AddCommand(newAIUsageCmd(g, &f), budget)
	return cmd
}

// openAI opens the store and reads the default budgets the flags name.
func openAI(ctx context.Context, g *globalFlags, f *aiFlags) (*store.Store, server.Config, error) {
	cfg, err := g.serverConfig(f.configFile)
	if err != nil {
		return nil, cfg, err
	}
	st, err := store.Open(ctx, cfg.StoreLocation())
	return st, cfg, err
}

func needOrg(f *aiFlags) error {
	if f.org == "" {
		return usagef("name the organization with --org")
	}
	if err := (policy.Principal{Org: f.org, User: "x"}).Validate(); err != nil {
		return usagef("--org: %v", err)
	}
	return nil
}

func newAIUsageCmd(g *globalFlags, f *aiFlags) *cobra.Command {
	var days int
	cmd := &cobra.Command{
		Use:   "usage [--org ORG] [--days N]",
		Short: "Tokens spent and held per organization and module, per UTC day, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if days < 1 || days > 366 {
				return usagef("--days %d: give 1 to 366", days)
			}
			st, _, err := openAI(cmd.Context(), g, f)
			if err != nil {
				return err
			}
			defer st.Close()
			now := time.Now()
			rows, err := st.AIUsage(cmd.Context(), store.AIUsageFilter{Org: f.org, Since: now.AddDate(0, 0, 1-days), Until: now, Limit: 10000})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if f.asJSON {
				enc := json.NewEncoder(w)
				for _, r := range rows {
					// GET /v1/ai/usage's names, with the organization
					// (the API's is its caller's, given once).
					row := struct {
						Org string `json:"org"`
						server.AIUsageEntry
					}{r.Org, server.AIUsageEntry{Day: r.Day, Module: r.Module, Used: r.Used, Reserved: r.Reserved, Calls: r.Calls}}
					if err := enc.Encode(row); err != nil {
						return err
					}
				}
				return nil
			}
			if len(rows) == 0 {
				fmt.Fprintln(w, "no model calls in these days")
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DAY\tORG\tMODULE\tUSED\tHELD\tCALLS")
			for _, r := range rows {
				module := r.Module
				if module == "" {
					module = "(all)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", r.Day, termSafe(r.Org), termSafe(module), r.Used, r.Reserved, r.Calls)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&days, "days", 1, "today and the days before it")
	return cmd
}

// effectiveBudget is what applies to org: its override's fields, the
// defaults for the rest.
func effectiveBudget(def ai.BudgetConfig, b store.AIBudget) store.AIBudget {
	out := store.AIBudget{OrgDailyTokens: int64(def.OrgDailyTokens), ModuleDailyTokens: int64(def.ModuleDailyTokens)}
	if b.OrgDailyTokens > 0 {
		out.OrgDailyTokens = b.OrgDailyTokens
	}
	if b.ModuleDailyTokens > 0 {
		out.ModuleDailyTokens = b.ModuleDailyTokens
	}
	return out
}

func printBudget(cmd *cobra.Command, f *aiFlags, cfg server.Config, st *store.Store) error {
	b, found, err := st.AIBudgetGet(cmd.Context(), f.org)
	if err != nil {
		return err
	}
	eff := effectiveBudget(cfg.AI.Budgets, b)
	w := cmd.OutOrStdout()
	if f.asJSON {
		return json.NewEncoder(w).Encode(map[string]any{"org": f.org, "org_daily_tokens": eff.OrgDailyTokens,
			"module_daily_tokens": eff.ModuleDailyTokens, "override": found})
	}
	from := "the defaults (ai.budgets)"
	if found {
		from = "an override (moat ai budget reset removes it)"
	}
	fmt.Fprintf(w, "organization %s: %d tokens a day, %d per module, from %s\n", termSafe(f.org), eff.OrgDailyTokens, eff.ModuleDailyTokens, from)
	return nil
}

func newAIBudgetShowCmd(g *globalFlags, f *aiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show --org ORG",
		Short: "The daily budgets that apply to an organization, and where they come from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needOrg(f); err != nil {
				return err
			}
			st, cfg, err := openAI(cmd.Context(), g, f)
			if err != nil {
				return err
			}
			defer st.Close()
			return printBudget(cmd, f, cfg, st)
		},
	}
}

func newAIBudgetSetCmd(g *globalFlags, f *aiFlags) *cobra.Command {
	var orgDaily, moduleDaily int64
	cmd := &cobra.Command{
		Use:   "set --org ORG [--org-daily-tokens N] [--module-daily-tokens N]",
		Short: "Give an organization its own daily budgets (a limit left out keeps the default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needOrg(f); err != nil {
				return err
			}
			for name, v := range map[string]int64{"--org-daily-tokens": orgDaily, "--module-daily-tokens": moduleDaily} {
				if v < 0 || v > ai.MaxDailyTokens {
					return usagef("%s %d: give 1 to %d, or leave it out for the default", name, v, int64(ai.MaxDailyTokens))
				}
			}
			if orgDaily == 0 && moduleDaily == 0 {
				return usagef("give --org-daily-tokens, --module-daily-tokens or both (moat ai budget reset returns to the defaults)")
			}
			st, cfg, err := openAI(cmd.Context(), g, f)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.AIBudgetPut(cmd.Context(), f.org, store.AIBudget{OrgDailyTokens: orgDaily, ModuleDailyTokens: moduleDaily}); err != nil {
				return err
			}
			return printBudget(cmd, f, cfg, st)
		},
	}
	cmd.Flags().Int64Var(&orgDaily, "org-daily-tokens", 0, "tokens the organization's modules may spend together in a UTC day")
	cmd.Flags().Int64Var(&moduleDaily, "module-daily-tokens", 0, "tokens each of its modules may spend in a UTC day")
	return cmd
}

func newAIBudgetResetCmd(g *globalFlags, f *aiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "reset --org ORG",
		Short: "Return an organization to the default budgets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needOrg(f); err != nil {
				return err
			}
			st, cfg, err := openAI(cmd.Context(), g, f)
			if err != nil {
				return err
			}
			defer st.Close()
			if _, err := st.AIBudgetDelete(cmd.Context(), f.org); err != nil {
				return err
			}
			return printBudget(cmd, f, cfg, st)
		},
	}
}
