package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
)

// TestServeTaskOriginHostile: moat serve's runner claims only the tasks of
// modules its store holds (origin ""). A task of a module that exists
// nowhere fails on its first attempt, naming the module (it had been
// retried 3 times); tasks of another origin (moat run plugins', or a
// hostile origin) are never claimed: queued, no attempt spent.
func TestServeTaskOriginHostile(t *testing.T) {
	ts := start(t, "", func(c *server.Config) { c.Profile = "dev" })
	ctx := context.Background()
	enqueue := func(module, origin string) string {
		id, _, err := ts.Store().TaskEnqueue(ctx, store.NewTask{Org: "acme", Module: module, Action: "work", User: "ann", Origin: origin}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ghost := enqueue("ghost", "")
	others := map[string]string{
		"a moat run plugin's":       enqueue("ghost", "run:/home/ann/ghost"),
		"another moat run plugin's": enqueue("tasker", "run:/home/ann/tasker"),
		"a hostile origin":          enqueue("ghost", "' OR 1=1 --"),
		"an origin of spaces":       enqueue("ghost", "   "),
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		tk, err := ts.Store().TaskGet(ctx, store.Scope{Org: "acme", Module: "ghost"}, ghost)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Finished() {
			if tk.State != abi.TaskFailed || tk.Attempts != 1 || tk.Code != string(abi.CodeNotFound) ||
				!strings.Contains(tk.Error, "module ghost of organization acme is not in the store") {
				t.Errorf("the task of a module that exists nowhere = %+v; want failed on attempt 1, not_found, naming the module", tk)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task of a module that exists nowhere is still %s after 20s", tk.State)
		}
	}
	time.Sleep(2500 * time.Millisecond) // two more polls of the runner
	for name, id := range others {
		tks, err := ts.Store().TaskList(ctx, store.TaskFilter{Org: "acme", ID: id})
		if err != nil || len(tks) != 1 {
			t.Fatalf("%s: %v, %v", name, tks, err)
		}
		if tk := tks[0]; tk.State != abi.TaskQueued || tk.Attempts != 0 || tk.Error != "" {
			t.Errorf("%s task = %+v; want queued, never claimed by the server", name, tk)
		}
	}
}
