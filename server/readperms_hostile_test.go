package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
)

// TestReadPermissions: the organization's tasks (inputs and results of
// every user's invocations) and its audit trail are read only with
// tasks.read / audit.read, held by role admin unless the profile's
// role_permissions gives them to a role. Without tasks.read a key sees
// its own user's tasks and nothing else; without audit.read the trail is
// its own user's events only.
func TestReadPermissions(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "ops.yaml")
	if err := os.WriteFile(prof, []byte("name: ops\nrole_permissions:\n  auditor: [audit.read, tasks.read]\ndefault:\n  capabilities: {kv: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := start(t, "", func(c *server.Config) { c.Profiles = map[string]string{"lab": prof} })
	ctx := context.Background()
	enqueue := func(org, user, input string) string {
		id, _, err := ts.Store().TaskEnqueue(ctx, store.NewTask{Org: org, Module: "m", Action: "a", Input: []byte(input), User: user, Roles: []string{"admin"}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	annTask := enqueue("acme", "ann", `{"secret":"ann's"}`)
	bobTask := enqueue("acme", "bob", `{"mine":"bob's"}`)
	labTask := enqueue("lab", "lia", `{"lab":"lia's"}`)
	ann := ts.key(t, "acme", "ann", "admin")
	bob := ts.key(t, "acme", "bob") // no role at all
	vic := ts.key(t, "acme", "vic", "viewer")
	lia := ts.key(t, "lab", "lia", "admin") // admin, but lab's profile gives the permissions to auditor only
	aud := ts.key(t, "lab", "al", "auditor")

	tasksOf := func(r response) []string {
		var out struct{ Tasks []server.TaskJSON }
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var ids []string
		for _, x := range out.Tasks {
			ids = append(ids, x.ID)
		}
		slices.Sort(ids)
		return ids
	}
	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }
	// The trail: events of ann, bob and lia, as invocations and refusals
	// record them (an input's trace, a refusal's reason).
	var events []store.AuditEvent
	for i, e := range []struct{ org, user, corr string }{{"acme", "ann", "corr-ann"}, {"acme", "bob", "corr-bob"}, {"acme", "ann", "corr-ann"}, {"lab", "lia", "corr-lia"}, {"lab", "al", "corr-al"}} {
		events = append(events, store.AuditEvent{ID: fmt.Sprintf("ev%d", i), Time: time.Now(), Kind: audit.KindDecision, Decision: audit.Deny,
			CorrelationID: e.corr, Module: "m", User: e.user, Org: e.org, Reason: e.user + "'s reason"})
	}
	if err := ts.Store().AuditInsert(ctx, events); err != nil {
		t.Fatal(err)
	}
	set := func(users ...string) map[string]bool {
		m := map[string]bool{}
		for _, u := range users {
			m[u] = true
		}
		return m
	}
	auditUsers := map[string]map[string]bool{ann: set("ann", "bob"), bob: set("bob"), vic: set(), lia: set("lia"), aud: set("lia", "al")}
	for _, tt := range []struct {
		name, key, path string
		status          int
		code, detail    string
		tasks           []string // for a 200 listing
	}{
		{"admin lists the organization's tasks", ann, "/v1/tasks", 200, "", "", sorted(annTask, bobTask)},
		{"no role: its own user's tasks only", bob, "/v1/tasks", 200, "", "", []string{bobTask}},
		{"viewer with no task of its own: none", vic, "/v1/tasks", 200, "", "", nil},
		{"no role reads another user's task: not found", bob, "/v1/tasks/" + annTask, 404, "not_found", "no task", nil},
		{"no role pages from another user's task: refused", bob, "/v1/tasks?before=" + annTask, 400, "invalid_argument", "is no task", nil},
		{"no role reads its own task", bob, "/v1/tasks/" + bobTask, 200, "", "", nil},
		{"no role filters by module: still its own", bob, "/v1/tasks?module=m", 200, "", "", []string{bobTask}},
		{"no role reads the audit trail: its own user's events", bob, "/v1/audit", 200, "", "", nil},
		{"viewer reads another user's correlation id: nothing", vic, "/v1/audit?correlation_id=corr-ann", 200, "", "", nil},
		{"admin reads the audit trail", ann, "/v1/audit", 200, "", "", nil},
		{"admin is not implied once role_permissions names tasks.read", lia, "/v1/tasks", 200, "", "", []string{labTask}},
		{"nor audit.read", lia, "/v1/audit", 200, "", "", nil},
		{"auditor under role_permissions lists every task", aud, "/v1/tasks", 200, "", "", []string{labTask}},
		{"auditor reads the trail", aud, "/v1/audit", 200, "", "", nil},
		{"another organization's task: not found", aud, "/v1/tasks/" + annTask, 404, "not_found", "no task", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "GET", tt.path, tt.key, nil)
			if r.status != tt.status {
				t.Fatalf("%d %s; want %d", r.status, r.body, tt.status)
			}
			if tt.code != "" {
				if m := r.json(t); m["code"] != tt.code || !strings.Contains(m["detail"].(string), tt.detail) {
					t.Errorf("%s; want code %s, detail with %q", r.body, tt.code, tt.detail)
				}
			}
			if tt.status == 200 && strings.HasPrefix(tt.path, "/v1/tasks?") || tt.path == "/v1/tasks" {
				if got := tasksOf(r); !slices.Equal(got, tt.tasks) {
					t.Errorf("tasks %v; want %v", got, tt.tasks)
				}
			}
			if strings.HasPrefix(tt.path, "/v1/audit") {
				var out struct{ Events []server.AuditEventJSON }
				if err := json.Unmarshal(r.body, &out); err != nil {
					t.Fatal(err)
				}
				users := map[string]bool{}
				for _, e := range out.Events {
					users[e.User] = true
				}
				if want := auditUsers[tt.key]; !maps.Equal(users, want) {
					t.Errorf("the events' users: %v; want %v", users, want)
				}
			}
			if strings.HasPrefix(tt.path, "/v1/tasks/") && tt.status == 404 && strings.Contains(string(r.body), "ann's") {
				t.Errorf("a refusal shows the task's input: %s", r.body)
			}
		})
	}
}
