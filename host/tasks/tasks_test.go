package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	_ "github.com/moat-sandbox/moat/host/store/postgres"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/host/tasks"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// The profile of the task tests: kv and tasks, and the service role
// allowed what the fixture's actions ask (nothing).
const taskProfile = `
name: tasks
default:
  capabilities: {kv: true, tasks: true}
  limits: {memory: 256MiB, timeout: 10s, concurrency: 64}
`

const taskManifest = `
version: 1.0.0
actions: [{name: start}, {name: work}, {name: flaky}, {name: boom}, {name: slow}, {name: status}, {name: cancel},
  {name: runs}, {name: wipe, confirm: true}]
capabilities: {kv: true, tasks: true}
`

// ann is the principal of the tests' calls.
var ann = policy.Principal{User: "ann", Org: "acme", Roles: []string{"dev"}}

// policyHost is a host of its own data directory under profileYAML.
func policyHost(t *testing.T, profileYAML string) *host.Host {
	t.Helper()
	p, err := policy.ParseProfile("test-profile.yaml", []byte(profileYAML))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := hosttest.New(t, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

// taskBackend opens a store: SQLite in dir, or a PostgreSQL database.
type taskBackend struct {
	name string
	// location returns where the test's store lives (one per test; the
	// same location for every handle of one test).
	location func(t *testing.T) string
}

var taskBackends = []taskBackend{
	{"sqlite", func(t *testing.T) string { return t.TempDir() }},
	{"postgres", func(t *testing.T) string { return pgtest.Database(t) }},
}

// taskHost starts a host on its own handle of the store at loc, with the
// task profile.
func taskHost(t *testing.T, loc string) *host.Host {
	t.Helper()
	return taskHostOrigin(t, loc, "")
}

// taskHostOrigin is taskHost whose modules' tasks record origin
// (ops.TasksConfig.Origin).
func taskHostOrigin(t *testing.T, loc, origin string) *host.Host {
	t.Helper()
	ctx := context.Background()
	p, err := policy.ParseProfile("tasks.yaml", []byte(taskProfile))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := hosttest.New(t, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Store: st, Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Families: map[string]any{"tasks": &ops.TasksConfig{Origin: origin}}})
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

func loadTaskGuest(t *testing.T, h *host.Host, name, extra string) *host.Module {
	t.Helper()
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: "+name+taskManifest+extra))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(context.Background(), testwasm.BuildGo(t, "./testdata/taskguest", true), host.LoadOptions{Manifest: mf,
		Limits: host.Limits{MemoryLimitPages: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// startRunner runs a task runner over mods (by name, in every
// organization) until the test ends.
func startRunner(t *testing.T, h *host.Host, cfg tasks.Config, mods ...*host.Module) {
	t.Helper()
	byName := map[string]*host.Module{}
	for _, m := range mods {
		byName[m.Name()] = m
	}
	cfg.Store = hosttest.Store(h)
	if cfg.Resolve == nil {
		cfg.Resolve = func(_ context.Context, _, name string) (*host.Module, error) {
			if m := byName[name]; m != nil {
				return m, nil
			}
			return nil, fmt.Errorf("%w: %s", tasks.ErrModuleGone, name)
		}
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int) time.Duration { return 20 * time.Millisecond }
	}
	if cfg.Poll == 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := tasks.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// startTask invokes the fixture's start action and returns the task id.
func startTask(t *testing.T, m *host.Module, p policy.Principal, corr string, req map[string]any) string {
	t.Helper()
	in, _ := json.Marshal(req)
	res, err := m.Invoke(context.Background(), host.Request{Action: "start", Input: in, Principal: p, CorrelationID: corr})
	if err != nil {
		t.Fatalf("start %s: %v", in, err)
	}
	var out struct {
		ID       string `json:"id"`
		Existing bool   `json:"existing"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil || out.ID == "" {
		t.Fatalf("start %s = %s, %v", in, res.Output, err)
	}
	return out.ID
}

// waitTask waits until the task is in a final state and returns it.
func waitTask(t *testing.T, st *store.Store, sc store.Scope, id string) *store.Task {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tk, err := st.TaskGet(context.Background(), sc, id)
		if err != nil {
			t.Fatalf("TaskGet(%s): %v", id, err)
		}
		if tk.Finished() {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still %s (attempt %d, error %q) after 30s", id, tk.State, tk.Attempts, tk.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func invokeAs(m *host.Module, p policy.Principal, action, input string) (string, error) {
	res, err := m.Invoke(context.Background(), host.Request{Action: action, Input: []byte(input), Principal: p})
	return string(res.Output), err
}

func forBackends(t *testing.T, f func(t *testing.T, b taskBackend)) {
	for _, b := range taskBackends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// TestTaskEndToEnd: a Go guest enqueues a task through the SDK; the
// runner runs it as the enqueuer; the guest reads its status; and one
// audit query by the originating correlation id shows the action, the
// enqueue, the task's invocation and its mutation, the task's events
// carrying its id.
func TestTaskEndToEnd(t *testing.T) {
	t.Parallel() // its own store and hosts; it mostly waits on the runners
	forBackends(t, func(t *testing.T, b taskBackend) {
		h := taskHost(t, b.location(t))
		m := loadTaskGuest(t, h, "tasker", "")
		other := loadTaskGuest(t, h, "tasker2", "")
		startRunner(t, h, tasks.Config{}, m, other)
		ctx := context.Background()
		ann := policy.Principal{User: "ann", Org: "acme", Roles: []string{"dev"}}
		id := startTask(t, m, ann, "corr-e2e-"+b.name, map[string]any{"action": "work", "input": "x"})
		tk := waitTask(t, hosttest.Store(h), store.Scope{Org: "acme", Module: "tasker"}, id)
		if tk.State != abi.TaskDone || string(tk.Result) != "worked x" || tk.User != "ann" || strings.Join(tk.Roles, ",") != "dev" || tk.Attempts != 1 {
			t.Fatalf("task = %+v; want done as ann[dev], with the action's output", tk)
		}
		// The guest sees its status, result and all.
		out, err := invokeAs(m, ann, "status", id)
		var st abi.TaskStatusResponse
		if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.State != abi.TaskDone || string(st.Result) != "worked x" || st.Attempts != 1 {
			t.Errorf("status from the guest = %s, %v", out, err)
		}
		// Another organization, or another module, does not find it:
		// the error of an id nobody holds.
		for _, c := range []struct {
			m *host.Module
			p policy.Principal
		}{{m, policy.Principal{User: "ann", Org: "globex"}}, {other, ann}} {
			for _, action := range []string{"status", "cancel"} {
				_, err := invokeAs(c.m, c.p, action, id)
				if abi.CodeOf(err) != abi.CodeNotFound || !strings.Contains(err.Error(), "no task") {
					t.Errorf("%s from %s/%s: %v; want not_found", action, c.p.Org, c.m.Name(), err)
				}
				_, err = invokeAs(c.m, c.p, action, "tffffffffffffffffffffffffffff")
				if abi.CodeOf(err) != abi.CodeNotFound {
					t.Errorf("%s of an id nobody holds: %v", action, err)
				}
			}
		}
		// The kv write of the task is in acme's scope: ann's data.
		if out, err := invokeAs(m, ann, "runs", "nothing"); err != nil || out != "" {
			t.Errorf("runs = %q, %v", out, err)
		}
		events, err := hosttest.Audit(h).Query(ctx, audit.Filter{CorrelationID: "corr-e2e-" + b.name, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var saw []string
		for _, e := range events {
			saw = append(saw, fmt.Sprintf("%s/%s%s task=%q user=%s", e.Kind, e.Action, "."+e.Op, e.TaskID, e.User))
		}
		want := []string{
			`invocation/start. task="" user=ann`,
			`op/start.task.enqueue task="" user=ann`,
			`invocation/work. task="` + id + `" user=ann`,
			`op/work.kv.put task="` + id + `" user=ann`,
		}
		for _, w := range want {
			found := false
			for _, s := range saw {
				found = found || s == w
			}
			if !found {
				t.Errorf("the audit trail of the correlation id lacks %s; it has:\n%s", w, strings.Join(saw, "\n"))
			}
		}
	})
}

// TestTaskRetries: a failing action is retried with backoff until it
// succeeds; one that keeps failing fails after its last attempt, with
// its last error; an error no retry can fix fails at once.
func TestTaskRetries(t *testing.T) {
	t.Parallel() // its own store and hosts; it mostly waits on the runners
	forBackends(t, func(t *testing.T, b taskBackend) {
		h := taskHost(t, b.location(t))
		m := loadTaskGuest(t, h, "tasker", "")
		var mu sync.Mutex
		var backoffs []int
		startRunner(t, h, tasks.Config{Backoff: func(n int) time.Duration {
			mu.Lock()
			backoffs = append(backoffs, n)
			mu.Unlock()
			return time.Duration(n) * 30 * time.Millisecond
		}}, m)
		sc := store.Scope{Org: "acme", Module: "tasker"}
		flaky := startTask(t, m, ann, "corr-flaky", map[string]any{"action": "flaky", "input": "f:3", "max_attempts": 5})
		if tk := waitTask(t, hosttest.Store(h), sc, flaky); tk.State != abi.TaskDone || tk.Attempts != 3 || string(tk.Result) != "ran 3 times" || tk.Error != "" {
			t.Errorf("flaky task = %+v; want done on attempt 3", tk)
		}
		boom := startTask(t, m, ann, "corr-boom", map[string]any{"action": "boom", "input": "b", "max_attempts": 2})
		tk := waitTask(t, hosttest.Store(h), sc, boom)
		if tk.State != abi.TaskFailed || tk.Attempts != 2 || !strings.Contains(tk.Error, "boom: b") || tk.Code != string(abi.CodeGuestError) {
			t.Errorf("boom task = %+v; want failed after 2 attempts with its error", tk)
		}
		mu.Lock()
		if fmt.Sprint(backoffs) != "[1 2 1]" {
			t.Errorf("backoffs asked for attempts %v, want [1 2 1] (flaky's two failures, boom's first)", backoffs)
		}
		mu.Unlock()
		// The runner records a task's end in the store, then its audit
		// event: wait for the event rather than read the trail once.
		var ev []audit.Event
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			ev, err = hosttest.Audit(h).Query(context.Background(), audit.Filter{CorrelationID: "corr-boom", Kind: audit.KindTask})
			if err != nil || len(ev) >= 2 || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || len(ev) != 2 || ev[0].TaskID != boom || ev[1].TaskID != boom {
			t.Fatalf("task events of boom = %+v, %v", ev, err)
		}
		rules := ev[0].Rule + "," + ev[1].Rule
		if !strings.Contains(rules, "task retry") || !strings.Contains(rules, "task failed") {
			t.Errorf("task events of boom: %s; want a retry and the failure", rules)
		}
	})
}

// TestTaskModuleGone: a task of a module the store does not hold
// (deleted since it was enqueued, or never there) fails at once, on its
// first attempt, naming the module: no retry can bring it back.
func TestTaskModuleGone(t *testing.T) {
	h := taskHost(t, t.TempDir())
	m := loadTaskGuest(t, h, "tasker", "")
	id := startTask(t, m, ann, "corr", map[string]any{"action": "work", "input": "x", "max_attempts": 5})
	startRunner(t, h, tasks.Config{}) // knows no module
	tk := waitTask(t, hosttest.Store(h), store.Scope{Org: "acme", Module: "tasker"}, id)
	if tk.State != abi.TaskFailed || tk.Attempts != 1 || !strings.Contains(tk.Error, "module tasker of organization acme is not in the store") || tk.Code != string(abi.CodeNotFound) {
		t.Errorf("task of a deleted module = %+v", tk)
	}
}

// TestTaskSurvivesRestart: a task enqueued before the host (and its
// store) closed runs after they open again.
func TestTaskSurvivesRestart(t *testing.T) {
	t.Parallel() // its own store and hosts; it mostly waits on the runners
	forBackends(t, func(t *testing.T, b taskBackend) {
		loc := b.location(t)
		ctx := context.Background()
		h1 := taskHost(t, loc)
		id := startTask(t, loadTaskGuest(t, h1, "tasker", ""), ann, "corr-restart", map[string]any{"action": "work", "input": "persisted"})
		if err := h1.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := hosttest.Store(h1).Close(); err != nil {
			t.Fatal(err)
		}
		h2 := taskHost(t, loc)
		m := loadTaskGuest(t, h2, "tasker", "")
		startRunner(t, h2, tasks.Config{}, m)
		if tk := waitTask(t, hosttest.Store(h2), store.Scope{Org: "acme", Module: "tasker"}, id); tk.State != abi.TaskDone || string(tk.Result) != "worked persisted" {
			t.Errorf("after a restart: %+v", tk)
		}
	})
}

// TestTaskRunOnce: many tasks, two runners on two store handles of one
// database (two replicas): each task's action runs exactly once.
func TestTaskRunOnce(t *testing.T) {
	t.Parallel() // its own store and hosts; it mostly waits on the runners
	forBackends(t, func(t *testing.T, b taskBackend) {
		loc := b.location(t)
		h1, h2 := taskHost(t, loc), taskHost(t, loc)
		m1, m2 := loadTaskGuest(t, h1, "tasker", ""), loadTaskGuest(t, h2, "tasker", "")
		const n = 40
		ids := make([]string, n)
		for i := range ids {
			// flaky with N=1 counts its runs under its own key and succeeds.
			ids[i] = startTask(t, m1, ann, "corr-once", map[string]any{"action": "flaky", "input": fmt.Sprint("once-", i, ":1")})
		}
		startRunner(t, h1, tasks.Config{Concurrency: 3}, m1)
		startRunner(t, h2, tasks.Config{Concurrency: 3}, m2)
		for i, id := range ids {
			if tk := waitTask(t, hosttest.Store(h2), store.Scope{Org: "acme", Module: "tasker"}, id); tk.State != abi.TaskDone || tk.Attempts != 1 {
				t.Errorf("task %d = %+v", i, tk)
			}
			if runs, err := invokeAs(m2, ann, "runs", fmt.Sprint("once-", i, ":1")); err != nil || runs != "1" {
				t.Errorf("task %d ran %q times (%v), want exactly once", i, runs, err)
			}
		}
	})
}

// TestTaskSchedule: a manifest's schedule fires its tick once across two
// runners (replicas), as the organization's service principal.
func TestTaskSchedule(t *testing.T) {
	forBackends(t, func(t *testing.T, b taskBackend) {
		loc := b.location(t)
		h1, h2 := taskHost(t, loc), taskHost(t, loc)
		const sched = "schedules: [{action: work, cron: \"* * * * *\", input: tick}]\n"
		m1, m2 := loadTaskGuest(t, h1, "tasker", sched), loadTaskGuest(t, h2, "tasker", sched)
		start := time.Now()
		startRunner(t, h1, tasks.Config{Scheduled: func() []tasks.ScheduledModule { return []tasks.ScheduledModule{{Org: "acme", Module: m1}} }}, m1)
		startRunner(t, h2, tasks.Config{Scheduled: func() []tasks.ScheduledModule { return []tasks.ScheduledModule{{Org: "acme", Module: m2}} }}, m2)
		var tasks []store.Task
		deadline := time.Now().Add(20 * time.Second)
		for len(tasks) == 0 || !tasks[0].Finished() {
			if time.Now().After(deadline) {
				t.Fatalf("the schedule's task: %+v", tasks)
			}
			time.Sleep(20 * time.Millisecond)
			var err error
			if tasks, err = hosttest.Store(h1).TaskList(context.Background(), store.TaskFilter{Org: "acme", Module: "tasker"}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond) // both runners have passed over the tick by now
		tasks, _ = hosttest.Store(h1).TaskList(context.Background(), store.TaskFilter{Org: "acme", Module: "tasker"})
		// A minute boundary may pass during the test: one task per tick.
		ticks := 1
		if time.Now().Truncate(time.Minute).After(start.Truncate(time.Minute)) {
			ticks = len(tasks) // 1 or 2, checked below by schedule names being distinct ticks
		}
		if len(tasks) != ticks || len(tasks) > 2 {
			t.Fatalf("%d tasks for %d tick(s): %+v", len(tasks), ticks, tasks)
		}
		tk := tasks[len(tasks)-1]
		if tk.User != policy.ServiceUser || strings.Join(tk.Roles, ",") != policy.ServiceRole || tk.Schedule != "work * * * * *" || string(tk.Input) != "tick" {
			t.Errorf("the schedule's task = %+v; want it as the service principal", tk)
		}
		if tk.State != abi.TaskDone || string(tk.Result) != "worked tick" {
			t.Errorf("the schedule's task did not run: %+v", tk)
		}
		fired, err := hosttest.Audit(h1).Query(context.Background(), audit.Filter{Kind: audit.KindTask, Org: "acme", Decision: audit.Allow})
		if err != nil {
			t.Fatal(err)
		}
		fired2, _ := hosttest.Audit(h2).Query(context.Background(), audit.Filter{Kind: audit.KindTask, Org: "acme", Decision: audit.Allow})
		if len(fired) != len(tasks) || len(fired2) != len(tasks) { // one trail on one database, flushed by each
			t.Errorf("fired events: %d and %d, want %d", len(fired), len(fired2), len(tasks))
		}
	})
}

// TestTaskCancelRunning: cancelling a running task stops its attempt,
// and what the attempt returns is discarded.
func TestTaskCancelRunning(t *testing.T) {
	testenv.Timing(t)
	h := taskHost(t, t.TempDir())
	m := loadTaskGuest(t, h, "tasker", "")
	startRunner(t, h, tasks.Config{Lease: 300 * time.Millisecond}, m)
	id := startTask(t, m, ann, "corr-cancel", map[string]any{"action": "slow", "input": "5000"})
	sc := store.Scope{Org: "acme", Module: "tasker"}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tk, err := hosttest.Store(h).TaskGet(context.Background(), sc, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State == abi.TaskRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task never ran: %+v", tk)
		}
	}
	began := time.Now()
	if out, err := invokeAs(m, ann, "cancel", id); err != nil || out != "true cancelled" {
		t.Fatalf("cancel = %q, %v", out, err)
	}
	// The attempt is stopped at its next lease extension (100 ms here),
	// not after its 5 s.
	for {
		ev, err := hosttest.Audit(h).Query(context.Background(), audit.Filter{CorrelationID: "corr-cancel", Kind: audit.KindInvocation})
		if err != nil {
			t.Fatal(err)
		}
		if len(ev) == 2 {
			if ev[1].Action != "slow" || ev[1].Code != string(abi.CodeCanceled) || ev[1].TaskID != id {
				t.Errorf("the cancelled attempt ended %s/%s (task %q), want slow/canceled", ev[1].Action, ev[1].Code, ev[1].TaskID)
			}
			break
		}
		if time.Since(began) > 4*time.Second {
			t.Fatalf("the attempt was not stopped: %+v", ev)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tk := waitTask(t, hosttest.Store(h), sc, id); tk.State != abi.TaskCancelled || len(tk.Result) != 0 {
		t.Errorf("after cancel: %+v", tk)
	}
}

// TestTaskEnqueueHostile: what a guest asks of task.enqueue is bounded
// and checked, the refusal naming the field, and nothing is stored.
func TestTaskEnqueueHostile(t *testing.T) {
	t.Parallel() // its own store and hosts; it mostly waits on the runners
	h := taskHost(t, t.TempDir())
	m := loadTaskGuest(t, h, "tasker", "")
	tests := []struct {
		name string
		req  map[string]any
		code abi.Code
		want string
	}{
		{"unknown action", map[string]any{"action": "nosuch"}, abi.CodeInvalidArgument, "has no action \"nosuch\""},
		{"SQL action", map[string]any{"action": "x'; DROP TABLE tasks; --"}, abi.CodeInvalidArgument, "has no action"},
		{"confirm action", map[string]any{"action": "wipe"}, abi.CodeInvalidArgument, "needs confirmation"},
		{"negative delay", map[string]any{"action": "work", "delay": "-5s"}, abi.CodeInvalidArgument, "delay"},
		{"absurd delay", map[string]any{"action": "work", "delay": "100000h"}, abi.CodeInvalidArgument, "delay"},
		{"10^9 attempts", map[string]any{"action": "work", "max_attempts": 1_000_000_000}, abi.CodeInvalidArgument, "max_attempts"},
		{"negative attempts", map[string]any{"action": "work", "max_attempts": -1}, abi.CodeInvalidArgument, "max_attempts"},
		{"huge input", map[string]any{"action": "work", "input": strings.Repeat("x", 100<<10)}, abi.CodeTooLarge, "input"},
		{"huge key", map[string]any{"action": "work", "key": strings.Repeat("k", 300)}, abi.CodeTooLarge, "key"},
	}
	for _, tt := range tests {
		in, _ := json.Marshal(tt.req)
		_, err := m.Invoke(context.Background(), host.Request{Action: "start", Input: in, Principal: ann})
		var he *host.Error
		if !errors.As(err, &he) || he.Code != tt.code || !strings.Contains(he.Reason, tt.want) {
			t.Errorf("%s: %v; want %s naming %q", tt.name, err, tt.code, tt.want)
		}
	}
	if l, err := hosttest.Store(h).TaskList(context.Background(), store.TaskFilter{Org: "acme"}); err != nil || len(l) != 0 {
		t.Errorf("hostile enqueues stored %d tasks (%v)", len(l), err)
	}
	// A key built to break SQL is only a key: idempotent like any other.
	key := `'); DELETE FROM tasks; -- " OR 1=1`
	a := startTask(t, m, ann, "c", map[string]any{"action": "work", "key": key, "max_attempts": 0})
	b := startTask(t, m, ann, "c", map[string]any{"action": "work", "key": key})
	if a != b {
		t.Errorf("one key enqueued twice: %s and %s", a, b)
	}
	if tk, err := hosttest.Store(h).TaskGet(context.Background(), store.Scope{Org: "acme", Module: "tasker"}, a); err != nil || tk.MaxAttempts != abi.DefaultTaskAttempts || tk.Key != key {
		t.Errorf("keyed task = %+v, %v", tk, err)
	}
}

// TestTaskNotGranted: without the tasks grant the ops are denied (and
// audited) like any op outside the grants.
func TestTaskNotGranted(t *testing.T) {
	h := policyHost(t, "name: nogrant\non_ungranted: deny_at_call\ndefault:\n  capabilities: {kv: true}\n")
	m := loadTaskGuest(t, h, "tasker", "")
	in, _ := json.Marshal(map[string]any{"action": "work"})
	_, err := m.Invoke(context.Background(), host.Request{Action: "start", Input: in, Principal: ann, CorrelationID: "corr-deny"})
	if abi.CodeOf(err) != abi.CodeDenied {
		t.Fatalf("enqueue without the grant: %v", err)
	}
	ev, err := hosttest.Audit(h).Query(context.Background(), audit.Filter{CorrelationID: "corr-deny", Decision: audit.Deny})
	if err != nil || len(ev) == 0 || ev[0].Op != abi.OpTaskEnqueue {
		t.Errorf("deny events = %+v, %v", ev, err)
	}
}

// TestTaskModuleNotLoaded: a module that does not load on this host
// (yet) spends attempts, retried with backoff, and fails its tasks after
// the last, saying why, instead of bouncing them forever.
func TestTaskModuleNotLoaded(t *testing.T) {
	h := taskHost(t, t.TempDir())
	m := loadTaskGuest(t, h, "tasker", "")
	id := startTask(t, m, ann, "corr", map[string]any{"action": "work", "input": "x", "max_attempts": 2})
	startRunner(t, h, tasks.Config{Resolve: func(context.Context, string, string) (*host.Module, error) {
		return nil, errors.New("not loaded on this replica")
	}})
	tk := waitTask(t, hosttest.Store(h), store.Scope{Org: "acme", Module: "tasker"}, id)
	if tk.State != abi.TaskFailed || tk.Attempts != 2 || !strings.Contains(tk.Error, "not loaded on this replica") || tk.Code != string(abi.CodeUnavailable) {
		t.Errorf("task of a module not loaded = %+v", tk)
	}
}

// TestTaskRateLimited: a task whose module's calls per minute are used
// up waits for them, its attempt not spent.
func TestTaskRateLimited(t *testing.T) {
	h := taskHost(t, t.TempDir())
	m := loadTaskGuest(t, h, "tasker", "limits: {calls_per_minute: 3}\n")
	startRunner(t, h, tasks.Config{}, m)
	first := startTask(t, m, ann, "corr-rate", map[string]any{"action": "work", "input": "1", "max_attempts": 1}) // call 1
	sc := store.Scope{Org: "acme", Module: "tasker"}
	if tk := waitTask(t, hosttest.Store(h), sc, first); tk.State != abi.TaskDone { // call 2; the next start is call 3
		t.Fatalf("first task = %+v", tk)
	}
	second := startTask(t, m, ann, "corr-rate", map[string]any{"action": "work", "input": "2", "max_attempts": 1})
	time.Sleep(500 * time.Millisecond)
	tk, err := hosttest.Store(h).TaskGet(context.Background(), sc, second)
	if err != nil || tk.State != abi.TaskQueued || tk.Attempts != 0 || tk.RunAt.Before(time.Now()) {
		t.Errorf("a rate-limited task = %+v, %v; want queued again, no attempt spent, to run later", tk, err)
	}
}

// TestTaskOrigin: a runner claims only the tasks of its origin
// (store.Task.Origin), on both backends: a task enqueued by a module only
// one process has (moat run's "run:DIR") is never claimed by a runner
// serving the store's modules (moat serve, any replica), which could not
// run it, and it runs on the runner of its origin; the store's tasks are
// never claimed by a moat run. Two hosts share one store, as moat serve
// and moat run do on a data directory (SQLite) or replicas on one
// database (PostgreSQL).
func TestTaskOrigin(t *testing.T) {
	const runOrigin = "run:/home/ann/plugins/tasker"
	forBackends(t, func(t *testing.T, b taskBackend) {
		loc := b.location(t)
		served := loadTaskGuest(t, taskHostOrigin(t, loc, ""), "tasker", "")
		runHost := taskHostOrigin(t, loc, runOrigin)
		local := loadTaskGuest(t, runHost, "tasker", "")
		st := hosttest.Store(runHost)
		sc := store.Scope{Org: "acme", Module: "tasker"}
		var mu sync.Mutex
		ranOn := map[string]string{} // task id → runner
		onStart := func(name string) func(*store.Task) {
			return func(tk *store.Task) {
				mu.Lock()
				defer mu.Unlock()
				ranOn[tk.ID] += name
			}
		}
		// The server's runner first, alone: it must leave the run's task.
		fromRun := startTask(t, local, ann, "corr-run", map[string]any{"action": "work", "input": "r", "max_attempts": 3})
		fromServed := startTask(t, served, ann, "corr-served", map[string]any{"action": "work", "input": "s", "max_attempts": 3})
		if tk, err := st.TaskGet(context.Background(), sc, fromRun); err != nil || tk.Origin != runOrigin {
			t.Fatalf("the run's task = %+v, %v; want origin %q", tk, err, runOrigin)
		}
		startRunner(t, runHost, tasks.Config{OnStart: onStart("serve")}, served)
		if tk := waitTask(t, st, sc, fromServed); tk.State != abi.TaskDone || tk.Origin != "" {
			t.Fatalf("the served module's task = %+v; want done", tk)
		}
		time.Sleep(300 * time.Millisecond) // six polls of the server's runner
		tk, err := st.TaskGet(context.Background(), sc, fromRun)
		if err != nil || tk.State != abi.TaskQueued || tk.Attempts != 0 || tk.Error != "" {
			t.Fatalf("the run's task after the server's runner polled = %+v, %v; want queued, no attempt spent", tk, err)
		}
		// The runner of the run's origin runs it, and no other.
		startRunner(t, runHost, tasks.Config{Origin: runOrigin, OnStart: onStart("run")}, local)
		if tk := waitTask(t, st, sc, fromRun); tk.State != abi.TaskDone || tk.Attempts != 1 {
			t.Fatalf("the run's task = %+v; want done on its first attempt", tk)
		}
		again := startTask(t, served, ann, "corr-served-2", map[string]any{"action": "work", "input": "s2"})
		waitTask(t, st, sc, again)
		mu.Lock()
		defer mu.Unlock()
		if ranOn[fromRun] != "run" || ranOn[fromServed] != "serve" || ranOn[again] != "serve" {
			t.Errorf("attempts by runner = %v; want the run's task on the run's runner only, the served ones on the server's", ranOn)
		}
	})
}
