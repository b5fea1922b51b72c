package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
)

// TestTasksCmd: moat tasks ls, show, cancel and retry on a store holding
// two organizations' tasks, one failed, one with a hostile action error.
func TestTasksCmd(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	ctx := context.Background()
	data := t.TempDir()
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(org, action string) string {
		id, _, err := st.TaskEnqueue(ctx, store.NewTask{Org: org, Module: "billing", Action: action, Input: []byte("in\x1b[31mput"),
			User: "ann", Roles: []string{"dev"}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	failed := enqueue("acme", "digest")
	claimed, err := st.TaskClaim(ctx, time.Now(), time.Minute, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if _, err := st.TaskFail(ctx, &claimed[0], "guest_error", "bad\x1b[2J\nthing", true, time.Time{}); err != nil {
		t.Fatal(err)
	}
	queued := enqueue("acme", "report")
	other := enqueue("globex", "digest")
	st.Close()

	ls := moat(t, "", "tasks", "ls", "--data", data)
	if ls.code != 0 || !strings.Contains(ls.stdout, failed) || !strings.Contains(ls.stdout, queued) || !strings.Contains(ls.stdout, other) {
		t.Fatalf("tasks ls: %d\n%s%s", ls.code, ls.stdout, ls.stderr)
	}
	if strings.Contains(ls.stdout, "\x1b") || strings.Count(ls.stdout, "\n") != 4 {
		t.Errorf("tasks ls printed raw control bytes or split a row:\n%q", ls.stdout)
	}
	acme := moat(t, "", "tasks", "ls", "--data", data, "--org", "acme", "--state", "failed", "--json")
	var got server.TaskJSON
	dec := json.NewDecoder(strings.NewReader(acme.stdout))
	dec.DisallowUnknownFields() // GET /v1/tasks's names, no others
	if acme.code != 0 || dec.Decode(&got) != nil || got.Org != "acme" || strings.Count(acme.stdout, "\n") != 1 || got.ID != failed || got.State != "failed" {
		t.Errorf("tasks ls --org acme --state failed --json: %d %s %s", acme.code, acme.stdout, acme.stderr)
	}
	show := moat(t, "", "tasks", "show", "--data", data, failed)
	if show.code != 0 || !strings.Contains(show.stdout, "failed") || !strings.Contains(show.stdout, "1 of 3") || strings.Contains(show.stdout, "\x1b") {
		t.Errorf("tasks show: %d %q %s", show.code, show.stdout, show.stderr)
	}
	if r := moat(t, "", "tasks", "show", "--data", data, "--org", "globex", failed); r.code == 0 || !strings.Contains(r.stderr, "organization globex") {
		t.Errorf("tasks show of acme's task in globex: %d %s", r.code, r.stderr)
	}
	if r := moat(t, "", "tasks", "cancel", "--data", data, failed); r.code == 0 || !strings.Contains(r.stderr, "nothing to cancel") {
		t.Errorf("cancel of a failed task: %d %s", r.code, r.stderr)
	}
	if r := moat(t, "", "tasks", "retry", "--data", data, failed); r.code != 0 || !strings.Contains(r.stdout, "is queued") {
		t.Errorf("retry: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := moat(t, "", "tasks", "cancel", "--data", data, queued); r.code != 0 || !strings.Contains(r.stdout, "is cancelled") {
		t.Errorf("cancel: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := moat(t, "", "tasks", "show", "--data", data, "'; DROP TABLE tasks; --"); r.code == 0 || !strings.Contains(r.stderr, "no task") {
		t.Errorf("show of a hostile id: %d %s", r.code, r.stderr)
	}
	if r := moat(t, "", "tasks", "ls", "--data", data, "--state", "bogus"); r.code == 0 || !strings.Contains(r.stderr, "not one of") {
		t.Errorf("ls --state bogus: %d %s", r.code, r.stderr)
	}
}
