package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// keyAnswer is what create and rotate answer.
type keyAnswer struct {
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	User      string    `json:"user"`
	Roles     []string  `json:"roles"`
	Scopes    []string  `json:"scopes"`
	Status    string    `json:"status"`
	PrevUntil time.Time `json:"previous_valid_until"`
}

func (ts *testServer) createKey(t *testing.T, key, body string) (int, keyAnswer, string) {
	t.Helper()
	r := ts.do(t, "POST", "/v1/keys", key, strings.NewReader(body), "Content-Type", "application/json")
	var a keyAnswer
	if r.status == http.StatusCreated {
		if err := json.Unmarshal(r.body, &a); err != nil {
			t.Fatal(err)
		}
	}
	return r.status, a, string(r.body)
}

func (ts *testServer) whoami(t *testing.T, key string) int {
	t.Helper()
	return ts.do(t, "GET", "/v1/whoami", key, nil).status
}

// TestKeysAPI: an admin creates a key over the API (its secret in that
// answer only), lists it with its last use, rotates it with a grace (both
// secrets work, then the old one stops), rotates it without one, and
// revokes it (refused at once); an expiring key stops at its expiry;
// each operation is in the audit trail.
func TestKeysAPI(t *testing.T) {
	ts := start(t, "", nil)
	admin := ts.key(t, "acme", "ann", "admin", "dev")

	status, k, body := ts.createKey(t, admin, `{"name":"ci","roles":["dev"],"scopes":["invoke","audit:read"]}`)
	if status != http.StatusCreated || !strings.HasPrefix(k.Key, server.KeyPrefix) || k.User != "ann" || fmt.Sprint(k.Roles) != "[dev]" || fmt.Sprint(k.Scopes) != "[audit:read invoke]" {
		t.Fatalf("create: %d %s", status, body)
	}
	if s := ts.whoami(t, k.Key); s != 200 {
		t.Fatalf("the new key: whoami %d", s)
	}
	r := ts.do(t, "GET", "/v1/keys", admin, nil)
	if r.status != 200 || strings.Contains(string(r.body), k.Key) || strings.Contains(string(r.body), server.HashAPIKey(k.Key)) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var list struct {
		Keys []struct {
			ID, Status, LastUsedAddr string
			LastUsedAt               *time.Time `json:"last_used_at"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range list.Keys {
		if x.ID == k.ID {
			found = true
			if x.LastUsedAt == nil || time.Since(*x.LastUsedAt) > time.Minute {
				t.Errorf("last_used_at = %v, want the whoami just now", x.LastUsedAt)
			}
		}
	}
	if !found || len(list.Keys) != 2 {
		t.Errorf("list: %s", r.body)
	}
	if !strings.Contains(string(r.body), `"last_used_addr":"127.0.0.1"`) {
		t.Errorf("list lacks the address of the last use: %s", r.body)
	}

	// Rotation with a grace: both work; the new one only after the grace.
	r = ts.do(t, "POST", "/v1/keys/"+k.ID+"/rotate", admin, strings.NewReader(`{"grace_seconds":1}`))
	var rot keyAnswer
	if r.status != 200 || json.Unmarshal(r.body, &rot) != nil || rot.Key == "" || rot.Key == k.Key || rot.PrevUntil.IsZero() {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	if a, b := ts.whoami(t, k.Key), ts.whoami(t, rot.Key); a != 200 || b != 200 {
		t.Errorf("during the grace: old %d new %d, want both 200", a, b)
	}
	time.Sleep(time.Until(rot.PrevUntil) + 50*time.Millisecond)
	if a, b := ts.whoami(t, k.Key), ts.whoami(t, rot.Key); a != 401 || b != 200 {
		t.Errorf("after the grace: old %d new %d, want 401 and 200", a, b)
	}
	// A key rotates itself, without a grace: the old secret stops at once.
	r = ts.do(t, "POST", "/v1/keys/"+k.ID+"/rotate", rot.Key, nil)
	var rot2 keyAnswer
	if r.status != 200 || json.Unmarshal(r.body, &rot2) != nil {
		t.Fatalf("self rotate: %d %s", r.status, r.body)
	}
	if a, b := ts.whoami(t, rot.Key), ts.whoami(t, rot2.Key); a != 401 || b != 200 {
		t.Errorf("after a rotation without grace: old %d new %d", a, b)
	}

	// Revocation: refused at once on this replica.
	if r := ts.do(t, "DELETE", "/v1/keys/"+k.ID, admin, nil); r.status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if s := ts.whoami(t, rot2.Key); s != 401 {
		t.Errorf("a revoked key: %d", s)
	}
	if r := ts.do(t, "POST", "/v1/keys/"+k.ID+"/rotate", admin, nil); r.status != http.StatusConflict {
		t.Errorf("rotating a revoked key: %d %s", r.status, r.body)
	}

	// Expiry.
	if s, _, b := ts.createKey(t, admin, `{"expires_at":"2001-01-01T00:00:00Z"}`); s != 400 || !strings.Contains(b, "future") {
		t.Errorf("a key expiring in the past: %d %s", s, b)
	}
	status, exp, body := ts.createKey(t, admin, `{"expires_in_seconds":1}`)
	if status != http.StatusCreated {
		t.Fatalf("create expiring: %d %s", status, body)
	}
	if s := ts.whoami(t, exp.Key); s != 200 {
		t.Errorf("before its expiry: %d", s)
	}
	time.Sleep(1100 * time.Millisecond)
	if r := ts.do(t, "GET", "/v1/whoami", exp.Key, nil); r.status != 401 || !strings.Contains(string(r.body), "expired") {
		t.Errorf("after its expiry: %d %s", r.status, r.body)
	}

	r = ts.do(t, "GET", "/v1/audit?kind=api_key&limit=50", admin, nil)
	for _, want := range []string{`"rule":"create"`, `"rule":"rotate"`, `"rule":"revoke"`, k.ID} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("the audit trail lacks %s: %s", want, r.body)
		}
	}
	if strings.Contains(string(r.body), k.Key) || strings.Contains(string(r.body), rot.Key) {
		t.Error("a secret is in the audit trail")
	}
}

// TestKeysNoWider (hostile): a key without the permission cannot manage
// keys; a key cannot mint one with a role, scope or expiry beyond its
// own, nor take a wider key's secret by rotating it; another
// organization's key is not there.
func TestKeysNoWider(t *testing.T) {
	ts := start(t, "", nil)
	admin := ts.key(t, "acme", "ann", "admin")
	dev := ts.key(t, "acme", "dan", "dev")
	other := ts.key(t, "globex", "gil", "admin")
	_, scoped, _ := ts.createKey(t, admin, `{"scopes":["keys","invoke"]}`)
	_, expiring, _ := ts.createKey(t, admin, `{"expires_in_seconds":3600}`)
	_, wide, _ := ts.createKey(t, admin, `{"name":"wide"}`)

	for _, tt := range []struct {
		name, key, body string
		status          int
		want            string
	}{
		{"no permission", dev, `{}`, 403, "key.manage"},
		{"a role it lacks", admin, `{"roles":["admin","root"]}`, 403, "root"},
		{"scoped to unscoped", scoped.Key, `{"scopes":[]}`, 403, "wider"},
		{"scoped to another scope", scoped.Key, `{"scopes":["run"]}`, 403, "wider"},
		{"scoped to read", scoped.Key, `{"scopes":["read"]}`, 403, "wider"},
		{"scoped, narrower", scoped.Key, `{"scopes":["invoke:hello"]}`, 201, ""},
		{"scoped, default", scoped.Key, `{}`, 201, `"scopes":["invoke","keys"]`},
		{"expiring to never", expiring.Key, `{"expires_at":null}`, 201, `"expires_at"`},
		{"expiring to later", expiring.Key, `{"expires_in_seconds":7200}`, 403, "no later"},
		{"unknown scope", admin, `{"scopes":["admin"]}`, 400, "invoke:MODULE"},
		{"bad module in scope", admin, `{"scopes":["invoke:../x"]}`, 400, "scope"},
		{"unknown field", admin, `{"org":"globex"}`, 400, "org"},
		{"duplicate field", admin, `{"roles":["dev"],"roles":["admin"]}`, 400, "twice"},
		{"too many scopes", admin, `{"scopes":[` + strings.TrimSuffix(strings.Repeat(`"run",`, 40), ",") + `]}`, 400, "at most"},
	} {
		s, _, b := ts.createKey(t, tt.key, tt.body)
		if s != tt.status || !strings.Contains(b, tt.want) {
			t.Errorf("%s: %d %s; want %d with %q", tt.name, s, b, tt.status, tt.want)
		}
	}
	// Rotating a wider key would hand over its secret.
	if r := ts.do(t, "POST", "/v1/keys/"+wide.ID+"/rotate", scoped.Key, nil); r.status != 403 {
		t.Errorf("a scoped key rotating an unscoped one: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "DELETE", "/v1/keys/"+wide.ID, dev, nil); r.status != 403 {
		t.Errorf("revoke without the permission: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "DELETE", "/v1/keys/"+wide.ID, other, nil); r.status != 404 {
		t.Errorf("revoke from another organization: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/v1/keys", dev, nil); r.status != 200 || strings.Contains(string(r.body), wide.ID) {
		t.Errorf("a key without the permission lists others' keys: %d %s", r.status, r.body)
	}
	if s := ts.whoami(t, wide.Key); s != 200 {
		t.Errorf("the wide key after the refusals: %d", s)
	}
	r := ts.do(t, "GET", "/v1/audit?kind=api_key&decision=deny&limit=50", admin, nil)
	if !strings.Contains(string(r.body), "cannot give") {
		t.Errorf("the refused mints are not audited: %s", r.body)
	}
}

// TestKeyScopes (hostile): a scoped key reaches its routes only, on every
// route family (modules, invoke, audit, runs, sessions, E2B, Judge0,
// keys, MCP's tool calls); an expired and a revoked key reach none.
func TestKeyScopes(t *testing.T) {
	ts := start(t, "", func(c *server.Config) { c.Judge0.Enabled = true })
	admin := ts.key(t, "acme", "ann", "admin")
	if r := ts.upload(t, admin, tinyWasm(t), mcpManifest("tools")); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	mk := func(body string) string {
		s, a, b := ts.createKey(t, admin, body)
		if s != 201 {
			t.Fatalf("create %s: %d %s", body, s, b)
		}
		return a.Key
	}
	invoke, invokeTools, invokeOther := mk(`{"scopes":["invoke"]}`), mk(`{"scopes":["invoke:tools"]}`), mk(`{"scopes":["invoke:other"]}`)
	auditOnly, run, read, keys := mk(`{"scopes":["audit:read"]}`), mk(`{"scopes":["run"]}`), mk(`{"scopes":["read"]}`), mk(`{"scopes":["keys"]}`)
	_, expiring, _ := ts.createKey(t, admin, `{"expires_in_seconds":1}`)
	_, revoked, _ := ts.createKey(t, admin, `{}`)
	if r := ts.do(t, "DELETE", "/v1/keys/"+revoked.ID, admin, nil); r.status != 204 {
		t.Fatal(r.status)
	}

	type req struct{ method, path, body string }
	routes := map[string]req{
		"invoke":     {"POST", "/v1/modules/tools/actions/echo", `{"name":"x"}`},
		"module":     {"GET", "/v1/modules/tools", ""},
		"modules":    {"GET", "/v1/modules", ""},
		"upload":     {"DELETE", "/v1/modules/tools", ""},
		"audit":      {"GET", "/v1/audit", ""},
		"runs":       {"POST", "/v1/runs", `{"language":"nope","code":""}`},
		"sessions":   {"GET", "/v1/sessions", ""},
		"e2b":        {"GET", "/e2b/sandboxes", ""},
		"judge0":     {"GET", "/judge0/languages", ""},
		"keys":       {"GET", "/v1/keys", ""},
		"secrets":    {"GET", "/v1/admin/secrets/acme", ""},
		"tasks":      {"GET", "/v1/tasks", ""},
		"whoami":     {"GET", "/v1/whoami", ""},
		"confirmget": {"GET", "/v1/confirmations", ""},
	}
	allowed := map[string][]string{ // by key: the routes it reaches; every other is 403
		"invoke":       {"invoke", "module", "modules", "whoami", "confirmget"},
		"invoke:tools": {"invoke", "module", "modules", "whoami"},
		"invoke:other": {"modules", "whoami"},
		"audit:read":   {"audit", "whoami"},
		"run":          {"runs", "sessions", "e2b", "judge0", "whoami"},
		"read":         {"module", "modules", "audit", "sessions", "e2b", "judge0", "keys", "secrets", "tasks", "whoami", "confirmget"},
		"keys":         {"keys", "whoami"},
	}
	keyOf := map[string]string{"invoke": invoke, "invoke:tools": invokeTools, "invoke:other": invokeOther, "audit:read": auditOnly, "run": run, "read": read, "keys": keys}
	for scope, key := range keyOf {
		for name, rq := range routes {
			var body *strings.Reader
			if rq.body != "" {
				body = strings.NewReader(rq.body)
			} else {
				body = strings.NewReader("")
			}
			r := ts.do(t, rq.method, rq.path, key, body, "Content-Type", "application/json")
			want := false
			for _, a := range allowed[scope] {
				want = want || a == name
			}
			refused := r.status == 403 && strings.Contains(string(r.body), "scopes")
			if want == refused {
				t.Errorf("scope %s, %s %s: %d %.200s; want reached=%v", scope, rq.method, rq.path, r.status, r.body, want)
			}
		}
	}
	time.Sleep(time.Second)
	for name, key := range map[string]string{"expired": expiring.Key, "revoked": revoked.Key} {
		for _, rq := range routes {
			r := ts.do(t, rq.method, rq.path, key, strings.NewReader(rq.body), "Content-Type", "application/json")
			if r.status != 401 {
				t.Errorf("%s key, %s %s: %d %.200s; want 401", name, rq.method, rq.path, r.status, r.body)
			}
		}
	}
	if r := ts.do(t, "GET", "/judge0/languages", expiring.Key, nil, "X-Auth-Token", expiring.Key); r.status != 401 {
		t.Errorf("judge0 with an expired X-Auth-Token: %d", r.status)
	}

	// MCP: a tool call is a request to the routes; the scope holds there.
	cs := mcpClient(t, ts, invoke, nil)
	if out, isErr := callText(t, cs, "tools.echo", map[string]any{"name": "x"}); isErr {
		t.Errorf("an invoke key calling tools.echo over MCP: %s", out)
	}
	// A key scoped to one module lists that module alone, and over MCP
	// sees its tools (and no others, no run_code).
	if err := ts.upload(t, admin, tinyWasm(t), mcpManifest("hidden")); err.status != http.StatusCreated {
		t.Fatalf("upload hidden: %d %s", err.status, err.body)
	}
	for key, want := range map[string][]string{invokeTools: {"tools"}, invokeOther: {}, invoke: {"hidden", "tools"}} {
		r := ts.do(t, "GET", "/v1/modules", key, nil)
		var list struct{ Modules []struct{ Name string } }
		json.Unmarshal(r.body, &list)
		var got []string
		for _, m := range list.Modules {
			got = append(got, m.Name)
		}
		slices.Sort(got)
		if r.status != 200 || !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("GET /v1/modules with a key scoped %v: %d %v; want %v", want, r.status, got, want)
		}
	}
	one := mcpClient(t, ts, invokeTools, nil)
	tl, err := one.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, tool := range tl.Tools {
		tools = append(tools, tool.Name)
	}
	if !slices.Contains(tools, "tools.echo") || slices.ContainsFunc(tools, func(n string) bool { return strings.HasPrefix(n, "hidden.") || n == "run_code" }) {
		t.Errorf("tools/list for a key scoped to invoke:tools: %v; want tools.* only", tools)
	}

	// run_code is not even offered to it (whoami's may_run_code weighs
	// the key's scopes), and a call by name is refused.
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "print(1)"}}); err == nil && !res.IsError {
		t.Errorf("an invoke key ran code over MCP: %+v", res.Content)
	}
	for key, want := range map[string]string{invoke: `"may_run_code":false`, run: `"may_run_code":true`, admin: `"may_run_code":true`} {
		if r := ts.do(t, "GET", "/v1/whoami", key, nil); !strings.Contains(string(r.body), want) {
			t.Errorf("whoami: %s; want %s", r.body, want)
		}
	}
}

// TestKeyRotateRace (hostile): of rotations of one key racing, exactly
// one wins; the others are 409 and their secrets never worked.
func TestKeyRotateRace(t *testing.T) {
	ts := start(t, "", nil)
	admin := ts.key(t, "acme", "ann", "admin")
	_, k, _ := ts.createKey(t, admin, `{}`)
	const n = 6
	var wg sync.WaitGroup
	results := make([]response, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = ts.do(t, "POST", "/v1/keys/"+k.ID+"/rotate", admin, nil)
		}()
	}
	wg.Wait()
	won := 0
	for _, r := range results {
		switch r.status {
		case 200:
			won++
		case 409:
		default:
			t.Errorf("rotate: %d %s", r.status, r.body)
		}
	}
	if won < 1 {
		t.Errorf("%d rotations won, want at least 1", won)
	}
	if s := ts.whoami(t, k.Key); s != 401 {
		t.Errorf("the first secret after the rotations: %d", s)
	}
	// Every winner replaced the hash it read: only the last one's works.
	working := 0
	for _, r := range results {
		var a keyAnswer
		if r.status == 200 && json.Unmarshal(r.body, &a) == nil && ts.whoami(t, a.Key) == 200 {
			working++
		}
	}
	if working != 1 {
		t.Errorf("%d secrets work after the race, want 1", working)
	}
}

// TestKeyRevokeReplicas: a key revoked through one replica is refused by
// the other within a second, though that one had just verified it.
func TestKeyRevokeReplicas(t *testing.T) {
	testenv.Slow(t, "two servers on a PostgreSQL database")
	db := pgtest.Database(t)
	a := start(t, "", func(c *server.Config) { c.DatabaseURL = db })
	b := start(t, "", func(c *server.Config) { c.DatabaseURL = db })
	admin := a.key(t, "acme", "ann", "admin")
	_, k, body := a.createKey(t, admin, `{"name":"replicated"}`)
	if k.Key == "" {
		t.Fatal(body)
	}
	if sa, sb := a.whoami(t, k.Key), b.whoami(t, k.Key); sa != 200 || sb != 200 {
		t.Fatalf("before: %d %d", sa, sb)
	}
	if r := a.do(t, "DELETE", "/v1/keys/"+k.ID, admin, nil); r.status != 204 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	revoked := time.Now()
	for b.whoami(t, k.Key) != 401 {
		if time.Since(revoked) > time.Second {
			t.Fatalf("replica b still accepts the key %s after its revocation on a", time.Since(revoked))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("replica b refused the revoked key %s after the revocation on a", time.Since(revoked).Round(time.Millisecond))
}
