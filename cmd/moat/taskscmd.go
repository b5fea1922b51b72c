package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newTasksCmd) }

// tasksFlags are the flags every tasks subcommand shares.
type tasksFlags struct {
	configFile string
	org        string
	asJSON     bool
}

func newTasksCmd(g *globalFlags) *cobra.Command {
	var f tasksFlags
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List, show, cancel and retry background tasks",
		Long: `Tasks reads and changes the background tasks modules enqueue (task.enqueue)
and their schedules fire, in the store in --data or the server's (--config:
its data_dir or database_url; $MOAT_DATABASE_URL wins over both). It is the
operator's view: every organization's tasks, unless --org narrows it.`,
		Example: "  moat tasks ls --state failed\n  moat tasks ls --config moat-server.yaml --org acme --module billing\n" +
			"  moat tasks show t019a...\n  moat tasks retry t019a...\n  moat tasks cancel t019a...",
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.configFile, "config", "", "the server's configuration file (YAML): read its data_dir or database_url")
	pf.StringVar(&f.org, "org", "", "only this organization's tasks")
	pf.BoolVar(&f.asJSON, "json", false, "print JSON lines")
	cmd.AddCommand(newTasksLsCmd(g, &f), newTasksShowCmd(g, &f), newTasksChangeCmd(g, &f, "cancel"), newTasksChangeCmd(g, &f, "retry"))
	return cmd
}

// openTaskStore opens the store the flags name.
func openTaskStore(ctx context.Context, g *globalFlags, f *tasksFlags) (*store.Store, error) {
	cfg, err := g.serverConfig(f.configFile)
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, cfg.StoreLocation())
}

func newTasksLsCmd(g *globalFlags, f *tasksFlags) *cobra.Command {
	var filter store.TaskFilter
	cmd := &cobra.Command{
		Use:   "ls [--org ORG] [--module M] [--state STATE]",
		Short: "List tasks, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if filter.Limit < 1 || filter.Limit > store.MaxTaskLimit {
				return usagef("--limit %d: give 1 to %d", filter.Limit, store.MaxTaskLimit)
			}
			st, err := openTaskStore(cmd.Context(), g, f)
			if err != nil {
				return err
			}
			defer st.Close()
			filter.Org = f.org
			tasks, err := st.TaskList(cmd.Context(), filter)
			if err != nil {
				return err
			}
			if f.asJSON {
				return printTasksJSON(cmd.OutOrStdout(), tasks)
			}
			printTasks(cmd.OutOrStdout(), tasks)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&filter.Module, "module", "", "only this module's tasks")
	fl.StringVar(&filter.State, "state", "", "only tasks in this state: queued, running, done, failed or cancelled")
	fl.IntVar(&filter.Limit, "limit", 100, "at most this many (the newest)")
	return cmd
}

// findTask finds a task by id, in --org when given, else in any
// organization (the operator's view).
func findTask(ctx context.Context, st *store.Store, org, id string) (*store.Task, error) {
	tasks, err := st.TaskList(ctx, store.TaskFilter{Org: org, ID: id, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		where := "any organization"
		if org != "" {
			where = "organization " + org
		}
		return nil, fmt.Errorf("no task %q in %s; `moat tasks ls` lists them", termSafe(clipArg(id)), where)
	}
	return &tasks[0], nil
}

func clipArg(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func newTasksShowCmd(g *globalFlags, f *tasksFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one task: its state, attempts, input, result and last error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := openTaskStore(cmd.Context(), g, f)
			if err != nil {
				return err
			}
			defer st.Close()
			t, err := findTask(cmd.Context(), st, f.org, args[0])
			if err != nil {
				return err
			}
			if f.asJSON {
				return printTasksJSON(cmd.OutOrStdout(), []store.Task{*t})
			}
			printTask(cmd.OutOrStdout(), t)
			return nil
		},
	}
}

// newTasksChangeCmd is cancel or retry.
func newTasksChangeCmd(g *globalFlags, f *tasksFlags, verb string) *cobra.Command {
	short := "Cancel a queued or running task (an attempt in flight is stopped at its next lease extension)"
	if verb == "retry" {
		short = "Queue a failed or cancelled task again, from its first attempt"
	}
	return &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, err := openTaskStore(ctx, g, f)
			if err != nil {
				return err
			}
			defer st.Close()
			t, err := findTask(ctx, st, f.org, args[0])
			if err != nil {
				return err
			}
			var changed bool
			if verb == "cancel" {
				t, changed, err = st.TaskCancel(ctx, store.Scope{Org: t.Org}, t.ID)
			} else {
				t, changed, err = st.TaskRetry(ctx, t.Org, t.ID)
			}
			if errors.Is(err, store.ErrTaskNotFound) {
				return fmt.Errorf("task %s was pruned meanwhile", t.ID)
			}
			if err != nil {
				return err
			}
			if !changed {
				what := "queued or running"
				if verb == "retry" {
					what = "failed or cancelled"
				}
				return fmt.Errorf("task %s is %s, not %s: nothing to %s", t.ID, t.State, what, verb)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s of %s/%s is %s\n", t.ID, termSafe(t.Org), termSafe(t.Module), t.State)
			return nil
		},
	}
}

func printTasksJSON(w io.Writer, tasks []store.Task) error {
	enc := json.NewEncoder(w)
	for i := range tasks {
		// As GET /v1/tasks names its fields; never the claim token.
		if err := enc.Encode(server.TaskJSONOf(&tasks[i])); err != nil {
			return err
		}
	}
	return nil
}

func printTasks(w io.Writer, tasks []store.Task) {
	if len(tasks) == 0 {
		fmt.Fprintln(w, "no matching tasks")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tORG\tMODULE\tACTION\tSTATE\tATTEMPTS\tRUN AT\tERROR")
	for i := range tasks {
		t := &tasks[i]
		runAt := ""
		if t.State == "queued" {
			runAt = t.RunAt.Local().Format("2006-01-02 15:04:05")
		}
		// Names, actions and errors are stored text a module or a client
		// wrote: one row per task, whatever they hold.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", t.ID, t.CreatedAt.Local().Format("2006-01-02 15:04:05"),
			termSafe(t.Org), termSafe(t.Module), termSafe(t.Action), t.State, t.Attempts, t.MaxAttempts, runAt, termSafe(clipArg(t.Error)))
	}
	tw.Flush()
}

func printTask(w io.Writer, t *store.Task) {
	line := func(k, v string) { fmt.Fprintf(w, "%-15s%s\n", k+":", v) }
	line("id", t.ID)
	line("organization", termSafe(t.Org))
	line("module", termSafe(t.Module))
	line("action", termSafe(t.Action))
	line("state", t.State)
	line("attempts", fmt.Sprintf("%d of %d", t.Attempts, t.MaxAttempts))
	line("runs as", termSafe(t.User)+" ["+termSafe(strings.Join(t.Roles, ","))+"]")
	line("correlation", termSafe(t.CorrelationID))
	if t.Key != "" {
		line("key", termSafe(t.Key))
	}
	if t.Schedule != "" {
		line("schedule", termSafe(t.Schedule))
	}
	if dir, ok := strings.CutPrefix(t.Origin, "run:"); ok {
		line("runs in", "moat run "+termSafe(dir)+" ... --wait (no server runs it)")
	} else if t.Origin != "" {
		line("origin", termSafe(t.Origin))
	}
	line("created", t.CreatedAt.Local().Format(time.RFC3339))
	switch {
	case t.State == "queued":
		line("runs at", t.RunAt.Local().Format(time.RFC3339))
	case t.State == "running":
		line("lease until", t.LeaseUntil.Local().Format(time.RFC3339))
	case !t.FinishedAt.IsZero():
		line("finished", t.FinishedAt.Local().Format(time.RFC3339))
	}
	line("input", shown(t.Input))
	if len(t.Result) > 0 {
		line("result", shown(t.Result))
	}
	if t.Error != "" {
		line("error", termSafe(strings.TrimSpace(t.Code+" "+t.Error)))
	}
}

// shown is bytes for a terminal: text as it is (made safe), else a note.
func shown(b []byte) string {
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes, not text; --json shows them in base64)", len(b))
	}
	if len(b) > 2048 {
		return termSafe(string(b[:2048])) + fmt.Sprintf(" ... (%d bytes)", len(b))
	}
	return termSafe(string(b))
}
