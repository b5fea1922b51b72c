package main_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// taskerJS is a JavaScript plugin whose start action enqueues a run of
// its work action.
const taskerJS = `import * as moat from "./moat.js";

moat.action("start", (input) => moat.tasks.enqueue("work", input).id);
moat.action("work", (input) => "worked on " + input);
moat.action("later", (input) => moat.tasks.enqueue("work", input, { delay: "1h" }).id);
`

const taskerYAML = `name: tasker
version: 0.1.0
language: javascript
kind: moat
actions: [{name: start}, {name: work}, {name: later}]
capabilities: {tasks: true}
`

// TestRunTasksNotClaimedByServe is issue 28's defect 5 through the
// binary: a moat serve and moat run share a data directory (one SQLite
// store). The task moat run's plugin enqueues is never claimed by the
// server, which has no such module (it failed it 3/3 with "no such
// module"): it stays queued, no attempt spent, and moat run says where
// it runs. moat run --wait runs it, and the task the second run enqueues,
// in its own process before it exits, each on its first attempt.
func TestRunTasksNotClaimedByServe(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	ctx := context.Background()
	data := t.TempDir()
	plugin := filepath.Join(t.TempDir(), "tasker")
	if err := os.MkdirAll(plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"main.js": taskerJS, "moat.yaml": taskerYAML} {
		if err := os.WriteFile(filepath.Join(plugin, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var rest bytes.Buffer
	startServe(t, &rest, "--data", data, "--listen", "127.0.0.1:0")

	first := moat(t, "", "run", "--data", data, "--profile", "dev", plugin, "start", "--input", "one")
	id := strings.TrimSpace(first.stdout)
	if first.code != 0 || !regexp.MustCompile(`^t[0-9a-f]{28}$`).MatchString(id) {
		t.Fatalf("moat run start: %d %q %s", first.code, first.stdout, first.stderr)
	}
	if want := "task " + id + " (tasker work) is queued; it runs only in a moat run of this plugin with --wait"; !strings.Contains(first.stderr, want) {
		t.Errorf("moat run did not say where its task runs; stderr:\n%s\nwant %q", first.stderr, want)
	}
	if show := moat(t, "", "tasks", "show", "--data", data, id); show.code != 0 || !strings.Contains(show.stdout, "runs in:       moat run "+plugin+" ... --wait") {
		t.Errorf("moat tasks show of the run's task: %d\n%s%s", show.code, show.stdout, show.stderr)
	}
	// The server polls its queue every second: three polls.
	time.Sleep(3 * time.Second)
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	scope := store.Scope{Org: "local", Module: "tasker"}
	tk, err := st.TaskGet(ctx, scope, id)
	if err != nil || tk.State != abi.TaskQueued || tk.Attempts != 0 || tk.Error != "" || !strings.HasPrefix(tk.Origin, "run:") {
		t.Fatalf("the run's task after moat serve polled = %+v, %v; want queued, no attempt, origin run:DIR", tk, err)
	}

	second := moat(t, "", "run", "--data", data, "--profile", "dev", plugin, "start", "--input", "two", "--wait=2m")
	id2 := strings.TrimSpace(second.stdout)
	if second.code != 0 || id2 == "" || id2 == id {
		t.Fatalf("moat run --wait: %d %q %s", second.code, second.stdout, second.stderr)
	}
	for _, want := range []string{"task " + id + " (tasker work): attempt 1 of 3", "task " + id + " (tasker work): done",
		"task " + id2 + " (tasker work): done"} {
		if !strings.Contains(second.stderr, want) {
			t.Errorf("moat run --wait: stderr lacks %q:\n%s", want, second.stderr)
		}
	}
	for in, tid := range map[string]string{"one": id, "two": id2} {
		tk, err := st.TaskGet(ctx, scope, tid)
		if err != nil || tk.State != abi.TaskDone || tk.Attempts != 1 || string(tk.Result) != "worked on "+in {
			t.Errorf("task %s after moat run --wait = %+v, %v; want done on attempt 1 with its result", tid, tk, err)
		}
	}

	// A task due after the wait ends: --wait says so at once, naming it,
	// and fails; the task stays queued for a later --wait.
	began := time.Now()
	later := moat(t, "", "run", "--data", data, "--profile", "dev", plugin, "later", "--input", "three", "--wait=1m")
	id3 := strings.TrimSpace(later.stdout)
	if later.code != 1 || !strings.Contains(later.stderr, "--wait: 1 task(s) still queued after 1m0s: "+id3+" (tasker work") {
		t.Errorf("moat run --wait of a task due in an hour: %d %q %s", later.code, later.stdout, later.stderr)
	}
	if took := time.Since(began); took > 45*time.Second {
		t.Errorf("moat run --wait waited %s for a task due after the wait ends", took)
	}
	if tk, err := st.TaskGet(ctx, scope, id3); err != nil || tk.State != abi.TaskQueued || tk.Attempts != 0 {
		t.Errorf("the task due in an hour = %+v, %v; want queued", tk, err)
	}

	// Hostile: --wait without an action, and a negative one, are usage
	// errors; nothing is run.
	if r := moat(t, "", "run", "--data", data, "--profile", "dev", plugin, "--wait"); r.code != 2 || !strings.Contains(r.stderr, "name an ACTION") {
		t.Errorf("--wait without an action: %d %s", r.code, r.stderr)
	}
	if r := moat(t, "", "run", "--data", data, "--profile", "dev", plugin, "start", "--wait=-1s"); r.code != 2 || !strings.Contains(r.stderr, "--wait -1s") {
		t.Errorf("--wait=-1s: %d %s", r.code, r.stderr)
	}
}
