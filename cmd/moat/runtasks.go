package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/tasks"
)

// The tasks a plugin enqueues under moat run. Its module is read from a
// directory or a file: no server has it, so its tasks belong to this
// process (ops.TasksConfig.Origin "run:" and the module's absolute
// path), and no moat serve sharing the store claims them (it could only
// fail them: it has no such module, or another under the same name).
// moat run says so as it exits, or, with --wait, runs them itself before
// it does. A later moat run --wait of the same plugin runs what an
// earlier run left queued.

// defaultTaskWait bounds --wait given without a duration.
const defaultTaskWait = 5 * time.Minute

// runOrigin is the task origin of the module moat run loads from path.
func runOrigin(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return "run:" + filepath.Clean(path)
}

// cliOrigin is the task origin of a host made by any other command
// (inspect, build): tasks its modules' top levels enqueue run nowhere
// else either.
const cliOrigin = "cli"

// afterRun follows the invocation of mod: with --wait it runs the tasks
// of this run's origin until none is left (or the wait ends); without,
// it says where the tasks this run enqueued will run.
func afterRun(ctx context.Context, g *globalFlags, f *runFlags, h *host.Host, mod *host.Module) error {
	if g.store == nil || g.taskOrigin == "" {
		return nil
	}
	if f.wait > 0 {
		return waitTasks(ctx, g, f, h, mod)
	}
	// A listing that fails says nothing: the run itself succeeded.
	queued, _ := originTasks(ctx, g.store, g.taskOrigin)
	mine := 0
	for _, t := range queued {
		if t.CorrelationID != f.correlate {
			continue
		}
		mine++
		fmt.Fprintf(os.Stderr, "moat: task %s (%s %s) is queued; it runs only in a moat run of this plugin with --wait (a moat serve on the same store never runs it)\n",
			t.ID, t.Module, t.Action)
	}
	if earlier := len(queued) - mine; earlier > 0 {
		fmt.Fprintf(os.Stderr, "moat: %d earlier task(s) of this plugin are queued too (moat tasks ls --state queued); --wait runs them\n", earlier)
	}
	return nil
}

// originTasks are the tasks of origin not finished yet (queued or
// running), oldest first.
func originTasks(ctx context.Context, st *store.Store, origin string) ([]store.Task, error) {
	var out []store.Task
	for _, state := range []string{abi.TaskQueued, abi.TaskRunning} {
		ts, err := st.TaskList(ctx, store.TaskFilter{Origin: origin, State: state, Limit: store.MaxTaskLimit})
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// waitTasks runs the tasks of this run's origin in this process, one at
// a time, printing each attempt and outcome, until none is queued or
// running (tasks may enqueue tasks) or f.wait has passed. It fails when
// a task failed or is left.
func waitTasks(ctx context.Context, g *globalFlags, f *runFlags, h *host.Host, mod *host.Module) error {
	st, origin := g.store, g.taskOrigin
	log, err := g.logger()
	if err != nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	deadline := time.Now().Add(f.wait)
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// The tasks waited for: those queued now, and each the runner starts
	// (a task may enqueue tasks), so that each one's end is reported
	// however soon it comes.
	var mu sync.Mutex
	seen := map[string]bool{}
	left, err := originTasks(ctx, st, origin)
	if err != nil {
		return fmt.Errorf("--wait: list the tasks: %w", err)
	}
	for _, t := range left {
		seen[t.ID] = true
	}
	r, err := tasks.New(tasks.Config{
		Store:  st,
		Origin: origin,
		Resolve: func(_ context.Context, _, name string) (*host.Module, error) {
			if name != mod.Name() {
				return nil, fmt.Errorf("%w: this moat run has module %s, not %s", tasks.ErrModuleGone, mod.Name(), name)
			}
			return mod, nil
		},
		Concurrency: 1,
		Poll:        100 * time.Millisecond,
		Logger:      log,
		OnStart: func(t *store.Task) {
			mu.Lock()
			seen[t.ID] = true
			mu.Unlock()
			fmt.Fprintf(os.Stderr, "moat: task %s (%s %s): attempt %d of %d\n", t.ID, t.Module, t.Action, t.Attempts, t.MaxAttempts)
		},
	})
	if err != nil {
		return err
	}
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = r.Run(wctx)
	}()
	var failed []string
	report := func(t *store.Task) {
		switch t.State {
		case abi.TaskDone:
			fmt.Fprintf(os.Stderr, "moat: task %s (%s %s): done\n", t.ID, t.Module, t.Action)
		case abi.TaskCancelled:
			fmt.Fprintf(os.Stderr, "moat: task %s (%s %s): cancelled\n", t.ID, t.Module, t.Action)
		default:
			failed = append(failed, t.ID)
			fmt.Fprintf(os.Stderr, "moat: task %s (%s %s): failed after %d attempt(s): %s\n", t.ID, t.Module, t.Action, t.Attempts, t.Error)
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		left, err = originTasks(ctx, st, origin)
		if err != nil {
			cancel()
			<-runDone
			return fmt.Errorf("--wait: list the tasks: %w", err)
		}
		open := map[string]bool{}
		later := 0 // queued to run after the wait ends
		for _, t := range left {
			open[t.ID] = true
			if t.State == abi.TaskQueued && t.RunAt.After(deadline) {
				later++
			}
		}
		mu.Lock()
		var ended []string
		for id := range seen {
			if !open[id] {
				ended = append(ended, id)
				delete(seen, id)
			}
		}
		for _, t := range left {
			seen[t.ID] = true
		}
		mu.Unlock()
		for _, id := range ended {
			if t := originTask(ctx, st, origin, id); t != nil {
				report(t)
			}
		}
		if len(left) == later {
			break // nothing left, or nothing due before the wait ends
		}
		select {
		case <-tick.C:
			continue
		case <-wctx.Done():
		}
		break
	}
	cancel()
	<-runDone
	// The runner gave back what it was running as it stopped: list again.
	if left, err = originTasks(ctx, st, origin); err == nil && len(left) > 0 {
		var ids []string
		for _, t := range left {
			ids = append(ids, fmt.Sprintf("%s (%s %s, due %s)", t.ID, t.Module, t.Action, t.RunAt.Local().Format(time.TimeOnly)))
		}
		return fmt.Errorf("--wait: %d task(s) still queued after %s: %s; run this plugin again with --wait (a longer --wait=DURATION) to run them",
			len(left), f.wait, strings.Join(ids, ", "))
	}
	if len(failed) > 0 {
		return fmt.Errorf("--wait: %d task(s) failed: %s (moat tasks show ID has each one's error)", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

// originTask returns the task id of origin (of any organization), or nil.
func originTask(ctx context.Context, st *store.Store, origin, id string) *store.Task {
	ts, err := st.TaskList(ctx, store.TaskFilter{Origin: origin, ID: id, Limit: 1})
	if err != nil || len(ts) == 0 {
		return nil
	}
	return &ts[0]
}
