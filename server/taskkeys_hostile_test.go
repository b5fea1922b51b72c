package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// TestRevokedKeyStopsQueuedTasks: a task is tied to its user's API keys.
// Revoking the key that enqueued it, when its user holds no other live
// key with the task's roles, fails the queued task at its claim with code
// denied, the reason naming the revoked key, and a task event in the
// audit trail; a user who keeps a key of the same roles keeps its tasks
// running.
func TestRevokedKeyStopsQueuedTasks(t *testing.T) {
	t.Parallel() // its own server and data directory; it mostly waits (uploads, task runners)
	ts := start(t, "", func(c *server.Config) { c.Profile = "dev" })
	ctx := context.Background()
	admin := ts.key(t, "acme", "ann", "admin")
	if r := ts.upload(t, admin, testwasm.BuildGo(t, "./testdata/taskguest", true), []byte(taskerManifest)); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	type key struct{ secret, id string }
	mk := func(user string, roles ...string) key {
		secret, k, err := server.CreateAPIKey(ctx, ts.Store(), server.NewAPIKey{Org: "acme", User: user, Roles: roles})
		if err != nil {
			t.Fatal(err)
		}
		return key{secret, k.ID}
	}
	type taskCase struct {
		name     string
		enqueuer key
		revoke   []key
		others   []key // the user's other keys, kept
		state    string
		detail   string
	}
	var tests []taskCase
	bob := mk("bob", "worker")
	carl, carl2 := mk("carl", "worker"), mk("carl", "worker", "extra")
	dora, dora2 := mk("dora", "worker", "billing"), mk("dora", "worker")
	erin := mk("erin", "worker")
	fay, fay2 := mk("fay", "worker"), mk("fay", "worker")
	tests = append(tests,
		taskCase{"its only key revoked", bob, []key{bob}, nil, "failed", "user bob of organization acme holds no API key that is not revoked (revoked: " + bob.id + ") with the roles [worker]"},
		taskCase{"another key with its roles kept", carl, []key{carl}, []key{carl2}, "done", ""},
		taskCase{"the kept key lacks a role", dora, []key{dora}, []key{dora2}, "failed", "with the roles [worker billing]"},
		taskCase{"every key revoked", fay, []key{fay, fay2}, nil, "failed", "(revoked: " + fay.id + ", " + fay2.id + ")"},
		taskCase{"nothing revoked", erin, nil, nil, "done", ""},
	)
	ids := make([]string, len(tests))
	for i, tt := range tests {
		corr := fmt.Sprintf("revoke-%d", i)
		r := ts.do(t, "POST", "/v1/modules/tasker/actions/start", tt.enqueuer.secret, strings.NewReader(`{"action":"work","input":"x","delay":"1500ms"}`),
			server.HeaderRequestID, corr)
		var started struct{ ID string }
		if r.status != http.StatusOK || json.Unmarshal(r.body, &started) != nil || started.ID == "" {
			t.Fatalf("%s: start: %d %s", tt.name, r.status, r.body)
		}
		ids[i] = started.ID
		for _, k := range tt.revoke {
			if err := ts.Store().APIKeyRevoke(ctx, k.id, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var task server.TaskJSON
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				r := ts.do(t, "GET", "/v1/tasks/"+ids[i], admin, nil)
				if err := json.Unmarshal(r.body, &task); err != nil {
					t.Fatalf("%d %s", r.status, r.body)
				}
				if task.State == "done" || task.State == "failed" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the task is still %s", task.State)
				}
			}
			if task.State != tt.state {
				t.Fatalf("task %s (%s: %s); want %s", task.State, task.Code, task.Error, tt.state)
			}
			if tt.state == "done" {
				return
			}
			if task.Code != "denied" || task.Attempts != 1 || !strings.Contains(task.Error, tt.detail) || !strings.Contains(task.Error, "moat keys create") {
				t.Errorf("failed as %s after %d attempts: %s; want denied at once, with %q", task.Code, task.Attempts, task.Error, tt.detail)
			}
			// The failure is audited as the task's, under its correlation id.
			r := ts.do(t, "GET", fmt.Sprintf("/v1/audit?correlation_id=revoke-%d&kind=task", i), admin, nil)
			var out struct{ Events []server.AuditEventJSON }
			if err := json.Unmarshal(r.body, &out); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range out.Events {
				found = found || e.Kind == audit.KindTask && e.TaskID == ids[i] && e.Rule == "task failed" && e.Code == "denied" && strings.Contains(e.Reason, tt.detail)
			}
			if !found {
				t.Errorf("no audited task failure naming %q: %+v", tt.detail, out.Events)
			}
		})
	}
}
