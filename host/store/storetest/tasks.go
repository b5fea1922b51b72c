package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// The task queue's conformance tests. Claims are made at explicit times,
// so backoffs and lapsed leases are tested without sleeping.

var taskScope = store.Scope{Org: "acme", Module: "billing"}

func newTask(action string) store.NewTask {
	return store.NewTask{Org: taskScope.Org, Module: taskScope.Module, Action: action, Input: []byte(`{"n":1}`),
		User: "alice", Roles: []string{"editor", "admin"}, CorrelationID: "corr-1"}
}

func enqueue(t *testing.T, s *store.Store, nt store.NewTask) string {
	t.Helper()
	id, existing, err := s.TaskEnqueue(context.Background(), nt, 0)
	if err != nil || existing || id == "" {
		t.Fatalf("TaskEnqueue(%s/%s %s): %q, existing %v, %v", nt.Org, nt.Module, nt.Action, id, existing, err)
	}
	return id
}

func getTask(t *testing.T, s *store.Store, sc store.Scope, id string) *store.Task {
	t.Helper()
	tk, err := s.TaskGet(context.Background(), sc, id)
	if err != nil {
		t.Fatalf("TaskGet(%v, %s): %v", sc, id, err)
	}
	return tk
}

func claim(t *testing.T, s *store.Store, at time.Time, limit int) []store.Task {
	t.Helper()
	got, err := s.TaskClaim(context.Background(), at, time.Minute, limit)
	if err != nil {
		t.Fatalf("TaskClaim(%s): %v", at.Format(time.RFC3339), err)
	}
	return got
}

func wantTaskCode(t *testing.T, what string, err error, code abi.Code) {
	t.Helper()
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != code {
		t.Errorf("%s: error = %v, want an *abi.Error with code %s", what, err, code)
	}
}

// The contract: a task is stored as given, claimed once, and ends as its
// attempt says.
func (su suite) testTaskContract(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	before := time.Now()
	id := enqueue(t, s, newTask("digest"))
	tk := getTask(t, s, taskScope, id)
	switch {
	case tk.ID != id, tk.Org != "acme", tk.Module != "billing", tk.Action != "digest", string(tk.Input) != `{"n":1}`,
		tk.User != "alice", strings.Join(tk.Roles, ",") != "editor,admin", tk.CorrelationID != "corr-1":
		t.Errorf("stored task = %+v, want the fields enqueued", tk)
	case tk.State != abi.TaskQueued, tk.Attempts != 0, tk.MaxAttempts != abi.DefaultTaskAttempts:
		t.Errorf("new task: state %s, attempts %d/%d; want queued, 0/%d", tk.State, tk.Attempts, tk.MaxAttempts, abi.DefaultTaskAttempts)
	case tk.RunAt.Before(before.Add(-time.Second)) || tk.RunAt.After(time.Now().Add(time.Second)), !tk.FinishedAt.IsZero(), tk.Claim != "":
		t.Errorf("new task: run at %s, finished %s, claim %q; want now, zero, none", tk.RunAt, tk.FinishedAt, tk.Claim)
	}
	if got := claim(t, s, time.Now().Add(-time.Hour), 10); len(got) != 0 {
		t.Errorf("a claim an hour ago took %d tasks; the task was not due then", len(got))
	}
	got := claim(t, s, time.Now(), 10)
	if len(got) != 1 || got[0].ID != id || got[0].State != abi.TaskRunning || got[0].Attempts != 1 || got[0].Claim == "" {
		t.Fatalf("claim = %+v; want the task, running, attempt 1, with a claim", got)
	}
	if again := claim(t, s, time.Now(), 10); len(again) != 0 {
		t.Errorf("a second claim took %+v; a claimed task is claimed once", again)
	}
	running := got[0]
	if err := s.TaskExtend(ctx, &running, time.Now().Add(time.Hour)); err != nil {
		t.Errorf("TaskExtend: %v", err)
	}
	if err := s.TaskSucceed(ctx, &running, []byte("the result")); err != nil {
		t.Fatalf("TaskSucceed: %v", err)
	}
	tk = getTask(t, s, taskScope, id)
	if tk.State != abi.TaskDone || string(tk.Result) != "the result" || tk.FinishedAt.IsZero() || tk.Claim != "" || !tk.LeaseUntil.IsZero() {
		t.Errorf("after success: %+v; want done with the result, finished, no claim or lease", tk)
	}
	if err := s.TaskSucceed(ctx, &running, []byte("twice")); !errors.Is(err, store.ErrTaskClaimLost) {
		t.Errorf("a second TaskSucceed: %v, want ErrTaskClaimLost", err)
	}
	after, changed, err := s.TaskCancel(ctx, taskScope, id)
	if err != nil || changed || after.State != abi.TaskDone {
		t.Errorf("cancel of a done task = %+v, changed %v, %v; want it left done", after, changed, err)
	}
	// A result past the bound is cut, and the cut said.
	id2 := enqueue(t, s, newTask("digest"))
	c := claim(t, s, time.Now(), 1)
	if len(c) != 1 || c[0].ID != id2 {
		t.Fatalf("claim = %+v", c)
	}
	if err := s.TaskSucceed(ctx, &c[0], bytes.Repeat([]byte("r"), abi.MaxTaskResultLen+10)); err != nil {
		t.Fatal(err)
	}
	if tk := getTask(t, s, taskScope, id2); len(tk.Result) != abi.MaxTaskResultLen || !strings.Contains(tk.Error, "first 65536") {
		t.Errorf("an oversized result: %d bytes kept, error %q", len(tk.Result), tk.Error)
	}
	// Listing: newest first, filtered by state, paginated.
	all, err := s.TaskList(ctx, store.TaskFilter{Org: "acme"})
	if err != nil || len(all) != 2 || all[0].ID != id2 || all[1].ID != id {
		t.Fatalf("TaskList = %+v, %v; want both, newest first", all, err)
	}
	page, err := s.TaskList(ctx, store.TaskFilter{Org: "acme", Before: &all[0], Limit: 1})
	if err != nil || len(page) != 1 || page[0].ID != id {
		t.Errorf("TaskList after the first = %+v, %v", page, err)
	}
	if q, err := s.TaskList(ctx, store.TaskFilter{Org: "acme", State: abi.TaskQueued}); err != nil || len(q) != 0 {
		t.Errorf("TaskList(queued) = %+v, %v; want none", q, err)
	}
	if _, err := s.TaskList(ctx, store.TaskFilter{Org: "acme", State: "queued' OR 1=1 --"}); err == nil {
		t.Error("TaskList with a made-up state succeeded")
	}
	// By the enqueuer's user: the server's listing for a caller without
	// tasks.read.
	other := newTask("digest")
	other.User = "bob"
	id3 := enqueue(t, s, other)
	for _, tt := range []struct {
		user string
		want []string
	}{{"bob", []string{id3}}, {"alice", []string{id2, id}}, {"eve", nil}, {"alice' OR 1=1 --", nil}} {
		l, err := s.TaskList(ctx, store.TaskFilter{Org: "acme", User: tt.user})
		var got []string
		for _, x := range l {
			got = append(got, x.ID)
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("TaskList(user %q) = %v, %v; want %v", tt.user, got, err, tt.want)
		}
	}
}

// The same key enqueues once per organization and module, whatever the
// key holds.
func (su suite) testTaskIdempotency(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	for _, key := range []string{"order-7", "'; DROP TABLE tasks; --", `%_\`, "ключ 🔑", `" OR ""="`, strings.Repeat("k", abi.MaxTaskKeyLen)} {
		nt := newTask("digest")
		nt.Key = key
		first := enqueue(t, s, nt)
		id, existing, err := s.TaskEnqueue(ctx, nt, 0)
		if err != nil || !existing || id != first {
			t.Errorf("key %q again: %q, existing %v, %v; want %s, existing", key, id, existing, err, first)
		}
		for _, other := range []store.Scope{{Org: "acme", Module: "other"}, {Org: "globex", Module: "billing"}} {
			o := nt
			o.Org, o.Module = other.Org, other.Module
			if oid := enqueue(t, s, o); oid == first {
				t.Errorf("key %q in %v returned %v's task", key, other, taskScope)
			}
		}
	}
	// A finished task still holds its key (until it is pruned).
	nt := newTask("digest")
	nt.Key = "once"
	id := enqueue(t, s, nt)
	for _, c := range claim(t, s, time.Now(), 100) {
		if err := s.TaskSucceed(ctx, &c, nil); err != nil {
			t.Fatal(err)
		}
	}
	if again, existing, err := s.TaskEnqueue(ctx, nt, 0); err != nil || !existing || again != id {
		t.Errorf("key of a done task: %q, %v, %v; want the done task", again, existing, err)
	}
}

// A task belongs to its organization and module: every other scope gets
// not found, the same error as an id nobody holds.
func (su suite) testTaskScoping(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	id := enqueue(t, s, newTask("digest"))
	for _, sc := range []store.Scope{{Org: "globex", Module: "billing"}, {Org: "acme", Module: "other"}, {Org: "globex"}, {Org: "acme2", Module: "billing"}} {
		if _, err := s.TaskGet(ctx, sc, id); !errors.Is(err, store.ErrTaskNotFound) {
			t.Errorf("TaskGet from %v: %v, want ErrTaskNotFound", sc, err)
		}
		if _, _, err := s.TaskCancel(ctx, sc, id); !errors.Is(err, store.ErrTaskNotFound) {
			t.Errorf("TaskCancel from %v: %v, want ErrTaskNotFound", sc, err)
		}
		if l, err := s.TaskList(ctx, store.TaskFilter{Org: sc.Org, Module: sc.Module}); err != nil || len(l) != 0 {
			t.Errorf("TaskList of %v = %+v, %v; want none", sc, l, err)
		}
	}
	if _, _, err := s.TaskRetry(ctx, "globex", id); !errors.Is(err, store.ErrTaskNotFound) {
		t.Errorf("TaskRetry from globex: %v, want ErrTaskNotFound", err)
	}
	if tk := getTask(t, s, store.Scope{Org: "acme"}, id); tk.State != abi.TaskQueued {
		t.Errorf("the organization's view: %+v, want it queued: nobody else's cancel touched it", tk)
	}
	for _, bad := range []string{"", "t", id + "0", strings.ToUpper(id), "' OR '1'='1", id[:len(id)-1] + "'", strings.Repeat("t", 1<<16)} {
		if _, err := s.TaskGet(ctx, taskScope, bad); !errors.Is(err, store.ErrTaskNotFound) {
			t.Errorf("TaskGet(%.40q): %v, want ErrTaskNotFound", bad, err)
		}
	}
	if _, err := s.TaskGet(ctx, store.Scope{}, id); err == nil {
		t.Error("TaskGet with an empty organization succeeded")
	}
}

// A failed attempt is retried after its backoff; the last attempt's
// failure fails the task with its error.
func (su suite) testTaskRetries(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	nt := newTask("flaky")
	nt.MaxAttempts = 3
	id := enqueue(t, s, nt)
	now := time.Now()
	for attempt := 1; attempt <= 3; attempt++ {
		got := claim(t, s, now, 10)
		if len(got) != 1 || got[0].Attempts != attempt {
			t.Fatalf("attempt %d: claimed %+v", attempt, got)
		}
		final, err := s.TaskFail(ctx, &got[0], string(abi.CodeGuestError), fmt.Sprintf("failure %d", attempt), false, now.Add(time.Hour))
		if err != nil || final != (attempt == 3) {
			t.Fatalf("attempt %d: TaskFail = %v, %v", attempt, final, err)
		}
		tk := getTask(t, s, taskScope, id)
		if attempt < 3 {
			if tk.State != abi.TaskQueued || tk.Error != fmt.Sprintf("failure %d", attempt) || tk.RunAt.Before(now.Add(59*time.Minute)) {
				t.Errorf("after attempt %d: %+v; want queued an hour later with its error", attempt, tk)
			}
			if early := claim(t, s, now.Add(30*time.Minute), 10); len(early) != 0 {
				t.Errorf("after attempt %d: claimed within the backoff: %+v", attempt, early)
			}
		}
		now = now.Add(2 * time.Hour)
	}
	tk := getTask(t, s, taskScope, id)
	if tk.State != abi.TaskFailed || tk.Error != "failure 3" || tk.Code != string(abi.CodeGuestError) || tk.Attempts != 3 || tk.FinishedAt.IsZero() {
		t.Errorf("after the last attempt: %+v; want failed with the last error", tk)
	}
	if again := claim(t, s, now.Add(48*time.Hour), 10); len(again) != 0 {
		t.Errorf("a failed task was claimed: %+v", again)
	}
	// A permanent failure fails at once, attempts left or not.
	id2 := enqueue(t, s, newTask("gone"))
	got := claim(t, s, time.Now(), 10)
	if len(got) != 1 || got[0].ID != id2 {
		t.Fatalf("claim = %+v", got)
	}
	if final, err := s.TaskFail(ctx, &got[0], string(abi.CodeNoSuchAction), "no action gone", true, time.Time{}); err != nil || !final {
		t.Fatalf("permanent TaskFail = %v, %v", final, err)
	}
	if tk := getTask(t, s, taskScope, id2); tk.State != abi.TaskFailed || tk.Attempts != 1 {
		t.Errorf("after a permanent failure: %+v", tk)
	}
	// The operator's retry queues it from its first attempt; a done
	// task is left alone.
	tk, changed, err := s.TaskRetry(ctx, "acme", id)
	if err != nil || !changed || tk.State != abi.TaskQueued || tk.Attempts != 0 || tk.Error != "" || !tk.FinishedAt.IsZero() {
		t.Errorf("TaskRetry = %+v, %v, %v; want queued from scratch", tk, changed, err)
	}
	// A released claim gives its attempt back.
	got = claim(t, s, time.Now(), 10)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("claim after retry = %+v", got)
	}
	if err := s.TaskRelease(ctx, &got[0], time.Now()); err != nil {
		t.Fatal(err)
	}
	if tk := getTask(t, s, taskScope, id); tk.State != abi.TaskQueued || tk.Attempts != 0 {
		t.Errorf("after a release: %+v; want queued, 0 attempts", tk)
	}
	got = claim(t, s, time.Now(), 10)
	if err := s.TaskSucceed(ctx, &got[0], []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if _, changed, err := s.TaskRetry(ctx, "acme", id); err != nil || changed {
		t.Errorf("TaskRetry of a done task: changed %v, %v; want left alone", changed, err)
	}
}

// A running attempt whose lease lapsed is claimed again (its runner
// died); the old attempt can no longer touch the task; a lapsed last
// attempt fails the task.
func (su suite) testTaskLease(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	nt := newTask("slow")
	nt.MaxAttempts = 2
	id := enqueue(t, s, nt)
	now := time.Now()
	first, err := s.TaskClaim(ctx, now, time.Second, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim = %+v, %v", first, err)
	}
	if got := claim(t, s, now.Add(500*time.Millisecond), 10); len(got) != 0 {
		t.Errorf("claimed within the lease: %+v", got)
	}
	second := claim(t, s, now.Add(2*time.Second), 10)
	if len(second) != 1 || second[0].ID != id || second[0].Attempts != 2 || second[0].Claim == first[0].Claim {
		t.Fatalf("claim after the lease lapsed = %+v; want attempt 2 under a new claim", second)
	}
	if err := s.TaskExtend(ctx, &first[0], now.Add(time.Hour)); !errors.Is(err, store.ErrTaskClaimLost) {
		t.Errorf("the lapsed attempt's extend: %v, want ErrTaskClaimLost", err)
	}
	if _, err := s.TaskFail(ctx, &first[0], "trap", "late", false, time.Now()); !errors.Is(err, store.ErrTaskClaimLost) {
		t.Errorf("the lapsed attempt's fail: %v, want ErrTaskClaimLost", err)
	}
	// The second attempt lapses too: no attempt is left, so the next
	// claim fails the task instead of running it a third time.
	if got := claim(t, s, now.Add(5*time.Minute), 10); len(got) != 0 {
		t.Errorf("a task with no attempt left was claimed: %+v", got)
	}
	tk := getTask(t, s, taskScope, id)
	if tk.State != abi.TaskFailed || !strings.Contains(tk.Error, "lease lapsed") || tk.Code != string(abi.CodeUnavailable) {
		t.Errorf("after its last attempt lapsed: %+v; want failed, saying why", tk)
	}
	// Cancelling a running task takes it from its attempt.
	id2 := enqueue(t, s, newTask("slow"))
	run := claim(t, s, time.Now(), 10)
	if len(run) != 1 || run[0].ID != id2 {
		t.Fatalf("claim = %+v", run)
	}
	tk, changed, err := s.TaskCancel(ctx, taskScope, id2)
	if err != nil || !changed || tk.State != abi.TaskCancelled || tk.FinishedAt.IsZero() {
		t.Errorf("cancel of a running task = %+v, %v, %v", tk, changed, err)
	}
	if err := s.TaskExtend(ctx, &run[0], time.Now().Add(time.Hour)); !errors.Is(err, store.ErrTaskClaimLost) {
		t.Errorf("extend after cancel: %v, want ErrTaskClaimLost", err)
	}
	if err := s.TaskSucceed(ctx, &run[0], []byte("too late")); !errors.Is(err, store.ErrTaskClaimLost) {
		t.Errorf("success after cancel: %v, want ErrTaskClaimLost", err)
	}
	if tk := getTask(t, s, taskScope, id2); tk.State != abi.TaskCancelled || len(tk.Result) != 0 {
		t.Errorf("after a late success: %+v; want still cancelled, no result", tk)
	}
}

// Hostile enqueues are refused with the field named, before anything is
// stored.
func (su suite) testTaskHostile(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now()
	tests := []struct {
		name string
		edit func(*store.NewTask)
		code abi.Code
		want string
	}{
		{"huge input", func(n *store.NewTask) { n.Input = make([]byte, abi.MaxTaskInputLen+1) }, abi.CodeTooLarge, "input"},
		{"16 MiB input", func(n *store.NewTask) { n.Input = make([]byte, 16<<20) }, abi.CodeTooLarge, "input"},
		{"negative attempts", func(n *store.NewTask) { n.MaxAttempts = -1 }, abi.CodeInvalidArgument, "max_attempts"},
		{"10^9 attempts", func(n *store.NewTask) { n.MaxAttempts = 1_000_000_000 }, abi.CodeInvalidArgument, "max_attempts"},
		{"31 days ahead", func(n *store.NewTask) { n.RunAt = now.Add(31 * 24 * time.Hour) }, abi.CodeInvalidArgument, "30 days"},
		{"year 9999", func(n *store.NewTask) { n.RunAt = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC) }, abi.CodeInvalidArgument, "30 days"},
		{"long key", func(n *store.NewTask) { n.Key = strings.Repeat("k", abi.MaxTaskKeyLen+1) }, abi.CodeTooLarge, "key"},
		{"key with NUL", func(n *store.NewTask) { n.Key = "a\x00b" }, abi.CodeInvalidArgument, "key"},
		{"key not UTF-8", func(n *store.NewTask) { n.Key = "\xff\xfe" }, abi.CodeInvalidArgument, "key"},
		{"action with SQL", func(n *store.NewTask) { n.Action = "x'); DELETE FROM tasks; --" }, abi.CodeInvalidArgument, "action"},
		{"empty action", func(n *store.NewTask) { n.Action = "" }, abi.CodeInvalidArgument, "action"},
		{"empty org", func(n *store.NewTask) { n.Org = "" }, abi.CodeInvalidArgument, "org"},
		{"empty module", func(n *store.NewTask) { n.Module = "" }, abi.CodeInvalidArgument, "module"},
		{"empty user", func(n *store.NewTask) { n.User = "" }, abi.CodeInvalidArgument, "user"},
	}
	for _, tt := range tests {
		nt := newTask("digest")
		tt.edit(&nt)
		_, _, err := s.TaskEnqueue(ctx, nt, 0)
		wantTaskCode(t, tt.name, err, tt.code)
		if err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %q does not name %q", tt.name, err, tt.want)
		}
	}
	if l, err := s.TaskList(ctx, store.TaskFilter{}); err != nil || len(l) != 0 {
		t.Errorf("after hostile enqueues: %d tasks stored, %v; want none", len(l), err)
	}
	// Edges that are allowed: the past means now, the bounds themselves.
	nt := newTask("digest")
	nt.RunAt, nt.MaxAttempts, nt.Input = now.Add(-24*time.Hour*365*50), abi.MaxTaskAttempts, make([]byte, abi.MaxTaskInputLen)
	id := enqueue(t, s, nt)
	if tk := getTask(t, s, taskScope, id); tk.RunAt.Before(now.Add(-time.Second)) || tk.MaxAttempts != abi.MaxTaskAttempts || len(tk.Input) != abi.MaxTaskInputLen {
		t.Errorf("edge task = run at %s, %d attempts, %d bytes", tk.RunAt, tk.MaxAttempts, len(tk.Input))
	}
	nt = newTask("digest")
	nt.RunAt = now.Add(29 * 24 * time.Hour)
	enqueue(t, s, nt)
}

// The queue bound holds per organization and module, counts queued and
// running tasks, and holds under racing enqueues.
func (su suite) testTaskQuota(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	const limit = 3
	for i := range limit {
		nt := newTask("digest")
		nt.Key = fmt.Sprint("k", i)
		if _, _, err := s.TaskEnqueue(ctx, nt, limit); err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
	}
	_, _, err := s.TaskEnqueue(ctx, newTask("digest"), limit)
	wantTaskCode(t, "enqueue past the bound", err, abi.CodeTooLarge)
	if err != nil && !strings.Contains(err.Error(), "tasks.max_queued") {
		t.Errorf("the refusal %q does not name its knob", err)
	}
	known := newTask("digest")
	known.Key = "k0"
	if _, existing, err := s.TaskEnqueue(ctx, known, limit); err != nil || !existing {
		t.Errorf("a known key at the bound: existing %v, %v; want its task", existing, err)
	}
	other := newTask("digest")
	other.Module = "other"
	if _, _, err := s.TaskEnqueue(ctx, other, limit); err != nil {
		t.Errorf("another module at acme/billing's bound: %v", err)
	}
	// A running task still counts; a finished one does not.
	got := claim(t, s, time.Now(), 1)
	if _, _, err := s.TaskEnqueue(ctx, newTask("digest"), limit); err == nil {
		t.Error("a running task did not count against the bound")
	}
	if err := s.TaskSucceed(ctx, &got[0], nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.TaskEnqueue(ctx, newTask("digest"), limit); err != nil {
		t.Errorf("after a task finished: %v", err)
	}
	// Racing enqueues on a fresh scope: exactly the bound gets in.
	raceTaskQuota(t, []*store.Store{s}, "race")
}

// raceTaskQuota races 40 enqueues of one scope over stores against a
// bound of 7.
func raceTaskQuota(t *testing.T, stores []*store.Store, module string) {
	ctx := context.Background()
	const limit = 7
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	start := make(chan struct{})
	for i := range 40 {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			nt := newTask("digest")
			nt.Module = module
			_, _, err := s.TaskEnqueue(ctx, nt, limit)
			mu.Lock()
			defer mu.Unlock()
			var ae *abi.Error
			switch {
			case err == nil:
				ok++
			case !errors.As(err, &ae) || ae.Code != abi.CodeTooLarge:
				t.Errorf("racing enqueue: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok != limit {
		t.Errorf("%d racing enqueues succeeded, want exactly the bound %d", ok, limit)
	}
	l, err := stores[0].TaskList(ctx, store.TaskFilter{Org: "acme", Module: module})
	if err != nil || len(l) != limit {
		t.Errorf("the scope holds %d tasks (%v), want %d", len(l), err, limit)
	}
}

// A schedule's tick fires once; a tick over the queue bound is recorded
// without its task.
func (su suite) testScheduleFire(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	tick := time.Date(2030, 1, 1, 7, 0, 0, 0, time.UTC)
	nt := newTask("digest")
	nt.User, nt.Roles = "moat.service", []string{"service"}
	id, fired, err := s.ScheduleFire(ctx, nt, "digest 0 7 * * *", tick, 0)
	if err != nil || !fired || id == "" {
		t.Fatalf("first fire = %q, %v, %v", id, fired, err)
	}
	if tk := getTask(t, s, taskScope, id); tk.Schedule != "digest 0 7 * * *" || tk.User != "moat.service" || tk.State != abi.TaskQueued {
		t.Errorf("the schedule's task = %+v", tk)
	}
	if _, fired, err := s.ScheduleFire(ctx, nt, "digest 0 7 * * *", tick, 0); err != nil || fired {
		t.Errorf("the same tick again: fired %v, %v; want not fired", fired, err)
	}
	for _, other := range []struct {
		org, module, schedule string
		tick                  time.Time
	}{
		{"acme", "billing", "digest 0 7 * * *", tick.Add(24 * time.Hour)},
		{"acme", "billing", "report 0 7 * * *", tick},
		{"acme", "other", "digest 0 7 * * *", tick},
		{"globex", "billing", "digest 0 7 * * *", tick},
	} {
		o := nt
		o.Org, o.Module = other.org, other.module
		if _, fired, err := s.ScheduleFire(ctx, o, other.schedule, other.tick, 0); err != nil || !fired {
			t.Errorf("%+v: fired %v, %v; want its own tick fired", other, fired, err)
		}
	}
	// Over the bound: the tick is used up, no task stored.
	full := nt
	full.Module = "full"
	enqueue(t, s, full)
	_, fired, err = s.ScheduleFire(ctx, full, "digest 0 7 * * *", tick, 1)
	wantTaskCode(t, "a tick over the bound", err, abi.CodeTooLarge)
	if !fired {
		t.Error("a tick over the bound was not recorded as fired")
	}
	if _, fired, err := s.ScheduleFire(ctx, full, "digest 0 7 * * *", tick, 0); err != nil || fired {
		t.Errorf("that tick again: fired %v, %v; want used up", fired, err)
	}
	if l, _ := s.TaskList(ctx, store.TaskFilter{Org: "acme", Module: "full"}); len(l) != 1 {
		t.Errorf("the full module holds %d tasks, want only the one enqueued", len(l))
	}
	// Pruning removes old ticks and old finished tasks, nothing else.
	got := claim(t, s, time.Now(), 100)
	for i := range got {
		if err := s.TaskSucceed(ctx, &got[i], nil); err != nil {
			t.Fatal(err)
		}
	}
	queued := enqueue(t, s, newTask("later"))
	n, err := s.TaskPrune(ctx, tick.Add(48*time.Hour), 1000)
	if err != nil || n != len(got) {
		t.Errorf("TaskPrune = %d, %v; want the %d finished tasks", n, err, len(got))
	}
	getTask(t, s, taskScope, queued)
	if _, fired, err := s.ScheduleFire(ctx, nt, "digest 0 7 * * *", tick, 0); err != nil || !fired {
		t.Errorf("a pruned tick fires again (fired %v, %v): pruning keeps only ticks that can still come", fired, err)
	}
}

// Many tasks claimed from several handles at once: each is claimed
// exactly once.
func testSharedTaskClaim(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ctx := context.Background()
	stores := open(t, 3)
	warm(t, stores)
	const n = 300
	for i := range n {
		nt := newTask("digest")
		nt.Key = fmt.Sprint("task-", i)
		if _, _, err := stores[i%3].TaskEnqueue(ctx, nt, n); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range 9 {
		s := stores[w%3]
		wg.Go(func() {
			<-start
			for {
				got, err := s.TaskClaim(ctx, time.Now(), time.Minute, 5)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				for i := range got {
					mu.Lock()
					seen[got[i].ID]++
					mu.Unlock()
					if err := s.TaskSucceed(ctx, &got[i], []byte(fmt.Sprint(w))); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d distinct tasks claimed, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("task %s claimed %d times", id, c)
		}
	}
	done, err := stores[1].TaskList(ctx, store.TaskFilter{Org: "acme", State: abi.TaskDone, Limit: store.MaxTaskLimit})
	if err != nil || len(done) != n {
		t.Errorf("%d tasks done (%v), want %d", len(done), err, n)
	}
}

// Each tick of a schedule, fired from several handles at once, fires
// once.
func testSharedScheduleFire(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ctx := context.Background()
	stores := open(t, 3)
	warm(t, stores)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const ticks, tries = 20, 6
	var mu sync.Mutex
	fires := map[int]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range tries {
		s := stores[w%3]
		wg.Go(func() {
			<-start
			for i := range ticks {
				nt := newTask("digest")
				_, fired, err := s.ScheduleFire(ctx, nt, "digest * * * * *", base.Add(time.Duration(i)*time.Minute), 1000)
				if err != nil {
					t.Error(err)
					continue
				}
				if fired {
					mu.Lock()
					fires[i]++
					mu.Unlock()
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range ticks {
		if fires[i] != 1 {
			t.Errorf("tick %d fired %d times, want once", i, fires[i])
		}
	}
	if l, err := stores[2].TaskList(ctx, store.TaskFilter{Org: "acme", Limit: 1000}); err != nil || len(l) != ticks {
		t.Errorf("%d tasks enqueued (%v), want one per tick: %d", len(l), err, ticks)
	}
}

// Enqueues racing on several handles keep the bound, and one key
// enqueues once.
func testSharedTaskEnqueue(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ctx := context.Background()
	stores := open(t, 3)
	warm(t, stores)
	raceTaskQuota(t, stores, "shared")
	ids := make([]string, 24)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range ids {
		s := stores[i%3]
		wg.Go(func() {
			<-start
			nt := newTask("digest")
			nt.Key = "the-one"
			id, _, err := s.TaskEnqueue(ctx, nt, 0)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	close(start)
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("one key, racing on three handles, gave ids %v", ids)
		}
	}
}

// testTaskOrigin: a claim takes only the tasks of its origin
// (Task.Origin), queued or lapsed, and fails only its own origin's lapsed
// tasks with no attempt left; an origin is matched exactly (a hostile one
// is a value, not SQL), kept on the task and listed by; an origin that is
// no text is refused.
func (su suite) testTaskOrigin(t *testing.T) {
	s := su.open(t)
	ctx := context.Background()
	origins := []string{"", "run:/home/ann/a", "run:/home/ann/b", "' OR 1=1 --", "run:/home/ann/a/"}
	ids := map[string]string{}
	for _, o := range origins {
		nt := newTask("work")
		nt.Origin, nt.MaxAttempts = o, 1
		ids[o] = enqueue(t, s, nt)
		if got := getTask(t, s, taskScope, ids[o]); got.Origin != o {
			t.Errorf("task of origin %q has origin %q", o, got.Origin)
		}
	}
	now := time.Now().Add(time.Second) // every task is due
	if got, err := s.TaskClaimOrigin(ctx, "run:/home/ann", now, time.Minute, 10); err != nil || len(got) != 0 {
		t.Errorf("claim of an origin no task has = %v, %v; want none", got, err)
	}
	for _, o := range origins {
		got, err := s.TaskClaimOrigin(ctx, o, now, time.Second, 10)
		if err != nil || len(got) != 1 || got[0].ID != ids[o] || got[0].Origin != o {
			t.Fatalf("claim of origin %q = %+v, %v; want its one task", o, got, err)
		}
	}
	// Every lease lapses with no attempt left: a claim of one origin fails
	// that origin's task alone.
	later := now.Add(time.Hour)
	if got, err := s.TaskClaimOrigin(ctx, "run:/home/ann/a", later, time.Minute, 10); err != nil || len(got) != 0 {
		t.Fatalf("claim after the leases lapsed = %v, %v", got, err)
	}
	for _, o := range origins {
		want := abi.TaskRunning
		if o == "run:/home/ann/a" {
			want = abi.TaskFailed
		}
		if got := getTask(t, s, taskScope, ids[o]); got.State != want {
			t.Errorf("origin %q's lapsed task is %s, want %s", o, got.State, want)
		}
	}
	for _, o := range origins {
		got, err := s.TaskList(ctx, store.TaskFilter{Org: taskScope.Org, Origin: o})
		// Origin "" lists every origin (the filter's zero value).
		if n := map[bool]int{true: len(origins), false: 1}[o == ""]; err != nil || len(got) != n {
			t.Errorf("TaskList(origin %q) = %d tasks, %v; want %d", o, len(got), err, n)
		}
	}
	for _, bad := range []string{"run:\x00", "run:\xff", strings.Repeat("x", 4097)} {
		nt := newTask("work")
		nt.Origin = bad
		_, _, err := s.TaskEnqueue(ctx, nt, 0)
		wantTaskCode(t, fmt.Sprintf("enqueue with origin %q", clipStr(bad)), err, abi.CodeInvalidArgument)
	}
}

func clipStr(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

// TaskStats counts the queue by state and says how long the oldest due
// task has waited; a task not yet due does not count as waiting.
func (su suite) testTaskStats(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	if by, wait, ok, err := s.TaskStats(ctx, time.Now()); err != nil || !ok || len(by) != 0 || wait != 0 {
		t.Fatalf("an empty queue: %v, %v, %v, %v", by, wait, ok, err)
	}
	enqueue(t, s, newTask("a"))
	enqueue(t, s, newTask("b"))
	later := newTask("c")
	later.RunAt = time.Now().Add(time.Hour)
	enqueue(t, s, later)
	claim(t, s, time.Now(), 1)
	by, wait, _, err := s.TaskStats(ctx, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if by[abi.TaskQueued] != 2 || by[abi.TaskRunning] != 1 {
		t.Errorf("by state = %v; want 2 queued (one not due), 1 running", by)
	}
	if wait < 59*time.Second || wait > 2*time.Minute {
		t.Errorf("the oldest due task waited %v a minute after it was enqueued", wait)
	}
}
