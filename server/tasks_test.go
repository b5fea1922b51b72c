package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

const taskerManifest = `name: tasker
version: 1.0.0
actions: [{name: start}, {name: work}, {name: flaky}, {name: boom}, {name: slow}, {name: status}, {name: cancel}, {name: runs}, {name: wipe, confirm: true}]
capabilities: {kv: true, tasks: true}
`

// TestTasksAPI: a task a module enqueues through the server runs there
// (the server's runner), /v1/tasks lists it for its organization only,
// and the audit trail of the request shows the task's run under the
// same correlation id.
func TestTasksAPI(t *testing.T) {
	t.Parallel() // its own server and data directory; it mostly waits (uploads, task runners)
	ts := start(t, "", func(c *server.Config) { c.Profile = "dev" })
	admin := ts.key(t, "acme", "ann", "admin")
	other := ts.key(t, "globex", "gus", "admin")
	if r := ts.upload(t, admin, testwasm.BuildGo(t, "./testdata/taskguest", true), []byte(taskerManifest)); r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	r := ts.do(t, "POST", "/v1/modules/tasker/actions/start", admin, strings.NewReader(`{"action":"work","input":"via http"}`), server.HeaderRequestID, "corr-http-task")
	if r.status != http.StatusOK {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	var started struct{ ID string }
	if err := json.Unmarshal(r.body, &started); err != nil || started.ID == "" {
		t.Fatalf("start = %s", r.body)
	}
	var task server.TaskJSON
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := ts.do(t, "GET", "/v1/tasks/"+started.ID, admin, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/tasks/%s: %d %s", started.ID, r.status, r.body)
		}
		if err := json.Unmarshal(r.body, &task); err != nil {
			t.Fatal(err)
		}
		if task.State == "done" || task.State == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task is still %s", task.State)
		}
	}
	if task.State != "done" || string(task.Result) != "worked via http" || task.User != "ann" || task.CorrelationID != "corr-http-task" || task.FinishedAt == nil {
		t.Errorf("task = %+v", task)
	}
	list := ts.do(t, "GET", "/v1/tasks?module=tasker&state=done", admin, nil)
	if list.status != http.StatusOK || !strings.Contains(string(list.body), started.ID) {
		t.Errorf("GET /v1/tasks: %d %s", list.status, list.body)
	}
	// Another organization sees neither the task nor the list.
	if r := ts.do(t, "GET", "/v1/tasks/"+started.ID, other, nil); r.status != http.StatusNotFound {
		t.Errorf("another org's GET of the task: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/v1/tasks", other, nil); r.status != http.StatusOK || strings.Contains(string(r.body), started.ID) {
		t.Errorf("another org's list: %d %s", r.status, r.body)
	}
	for _, bad := range []string{"/v1/tasks?limit=0", "/v1/tasks?limit=5000", "/v1/tasks?state=" + "queued%27%20OR%201=1", "/v1/tasks?before=" + started.ID + "x"} {
		if r := ts.do(t, "GET", bad, admin, nil); r.status != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s, want 400", bad, r.status, r.body)
		}
	}
	if r := ts.do(t, "GET", "/v1/tasks?before="+started.ID, admin, nil); r.status != http.StatusOK || strings.Contains(string(r.body), started.ID) {
		t.Errorf("the page after the task: %d %s", r.status, r.body)
	}
	// One audit query by the request's correlation id: the action, the
	// enqueue, and the task's run and mutation, carrying its id.
	a := ts.do(t, "GET", "/v1/audit?correlation_id=corr-http-task", admin, nil)
	var events struct{ Events []server.AuditEventJSON }
	if err := json.Unmarshal(a.body, &events); err != nil {
		t.Fatal(err)
	}
	var withTask, kvPut int
	for _, e := range events.Events {
		if e.TaskID == started.ID {
			withTask++
			if e.Op == "kv.put" {
				kvPut++
			}
		}
	}
	if withTask < 2 || kvPut != 1 {
		t.Errorf("audit of the correlation id: %d events of the task (%d kv.put); want its invocation and its kv.put:\n%s", withTask, kvPut, a.body)
	}
}
