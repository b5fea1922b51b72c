package main_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// scopePlugin is a JavaScript plugin that keeps per-user data (a
// scope: user model) and indexes it into knowledge: notes is declared
// scope: user, handbook is org-scoped (the default). Its search passes a
// user it is told about into the raw request, as a hostile or confused
// plugin would: the host takes the principal from the invocation, never
// from the request.
const scopePluginManifest = `name: scoped
version: 1.0.0
language: javascript
actions: [{name: index}, {name: search}, {name: whoami}]
capabilities:
  db: [prefs]
  knowledge: [notes, handbook]
models:
  prefs: {scope: user, additional: true}
knowledge:
  notes: {scope: user}
`

const scopePluginMain = `import * as moat from "./moat.js";

moat.action("index", (text) => {
  const { collection, id, body } = JSON.parse(text);
  return { replaced: moat.knowledge.add(collection, id, body, { by: moat.caller().user }) };
});

moat.action("search", (text) => {
  const { collection, q, as } = JSON.parse(text);
  const req = { collection, query: q };
  if (as) Object.assign(req, { user: as, owner: as, principal: { user: as } });
  const r = moat.call("knowledge.search", req);
  return { ids: r.hits.map((h) => h.id).sort() };
});

moat.action("whoami", () => {
  const p = moat.caller();
  return { user: p.user, org: p.org, roles: p.roles, correlation_id: p.correlationId, admin: p.hasRole("admin") };
});
`

// TestKnowledgeScopeServe is issue 28's defect 6 through the binary: under
// moat run (its default confinement), and on SQLite and on PostgreSQL
// under moat serve, with the API keys of two
// users of acme (ann, an admin; bob) and one of globex (gus), what ann
// indexes into the user-scoped collection bob's search does not find (not
// even by naming ann in the request), ann's does; the org-scoped
// collection is shared within acme and not with globex; and moat.caller
// answers each caller's own principal. moat policy check warns that the
// org-scoped collection is what a user-scoped model's plugin indexes into.
func TestKnowledgeScopeServe(t *testing.T) {
	testenv.Slow(t, "moat serve and moat run of a knowledge plugin; storetest's KnowledgeUserScope keeps the scoping")
	plugins := t.TempDir()
	dir := filepath.Join(plugins, "scoped")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"moat.yaml": scopePluginManifest, "main.js": scopePluginMain} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	profile := filepath.Join(plugins, "profile.yaml")
	cfg := filepath.Join(plugins, "moat-server.yaml")
	os.WriteFile(profile, []byte("name: scope\ndefault:\n  capabilities: {db: [prefs], knowledge: [notes, handbook]}\n  limits: {memory: 128MiB, timeout: 30s}\n"), 0o644)
	os.WriteFile(cfg, []byte("profile: "+profile+"\n"), 0o644)

	check := moat(t, "", "policy", "check", dir, "--profile", profile)
	if check.code != 0 || !strings.Contains(check.stdout, "⚠ knowledge collection handbook is org-scoped, but model prefs keeps documents per user") ||
		strings.Contains(check.stdout, "collection notes is org-scoped") {
		t.Errorf("policy check: exit %d, want a warning for handbook alone:\n%s%s", check.code, check.stdout, check.stderr)
	}

	// moat run, with its default confinement: the same scope and caller
	// from the command line's principal.
	runData := t.TempDir()
	run := func(user, action, input string) map[string]any {
		t.Helper()
		r := moat(t, "", "run", dir, action, "--data", runData, "--profile", profile, "--org", "acme", "--user", user, "--input", input)
		var out map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil {
			t.Fatalf("moat run %s as %s: exit %d %v\n%s%s", action, user, r.code, err, r.stdout, r.stderr)
		}
		return out
	}
	run("ann", "index", `{"collection":"notes","id":"n1","body":"ann harbour"}`)
	for _, tt := range []struct {
		user, input, want string
	}{
		{"bob", `{"collection":"notes","q":"harbour","as":"ann"}`, `{"ids":[]}`},
		{"ann", `{"collection":"notes","q":"harbour"}`, `{"ids":["n1"]}`},
	} {
		if got, _ := json.Marshal(run(tt.user, "search", tt.input)); string(got) != tt.want {
			t.Errorf("moat run search as %s: %s, want %s", tt.user, got, tt.want)
		}
	}
	if who := run("bob", "whoami", `{"user":"ann"}`); who["user"] != "bob" || who["org"] != "acme" {
		t.Errorf("moat run whoami as bob: %v", who)
	}

	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "postgres" {
				t.Setenv("MOAT_DATABASE_URL", pgtest.Database(t))
			}
			data := t.TempDir()
			keys := map[string]string{}
			for _, u := range []struct{ org, user, role string }{{"acme", "ann", "admin"}, {"acme", "bob", "member"}, {"globex", "gus", "admin"}} {
				r := moat(t, "", "keys", "create", "--config", cfg, "--data", data, "--org", u.org, "--user", u.user, "--role", u.role)
				keys[u.user] = strings.TrimSpace(r.stdout)
				if r.code != 0 || !strings.HasPrefix(keys[u.user], "moat_sk_") {
					t.Fatalf("keys create %s@%s: %+v", u.user, u.org, r)
				}
			}
			var log lockedBuffer
			_, base := startServeIn(t, "", &log, "--config", cfg, "--data", data, "--listen", "127.0.0.1:0")
			n := &notesClient{t: t, base: base, keys: keys, log: &log}
			archive := dirArchive(t, plugins, "scoped")
			for _, admin := range []string{"ann", "gus"} {
				if code, out := n.do(admin, "POST", "/v1/modules", archive, "application/gzip"); code != 201 {
					t.Fatalf("upload as %s: %d %s\n%s", admin, code, out, log.String())
				}
			}
			n.must("ann", "scoped", "index", `{"collection":"notes","id":"n1","body":"ann diagnosis harbour"}`)
			n.must("ann", "scoped", "index", `{"collection":"handbook","id":"h1","body":"handbook harbour rules"}`)
			search := func(user, input string) []string {
				t.Helper()
				out := n.must(user, "scoped", "search", input)
				got := []string{}
				for _, id := range out["ids"].([]any) {
					got = append(got, id.(string))
				}
				return got
			}
			type searchCase struct {
				name, user, input string
				want              []string
			}
			for _, tt := range []searchCase{
				{"ann finds her note", "ann", `{"collection":"notes","q":"harbour"}`, []string{"n1"}},
				{"bob of the same org finds nothing of it", "bob", `{"collection":"notes","q":"harbour diagnosis"}`, []string{}},
				{"naming ann in the request changes nothing", "bob", `{"collection":"notes","q":"harbour","as":"ann"}`, []string{}},
			} {
				if got := search(tt.user, tt.input); !slices.Equal(got, tt.want) {
					t.Errorf("%s: %s searching %s = %v, want %v", tt.name, tt.user, tt.input, got, tt.want)
				}
			}
			// Bob's document of the same id is his own: ann's stays.
			n.must("bob", "scoped", "index", `{"collection":"notes","id":"n1","body":"bob lighthouse"}`)
			for _, tt := range []searchCase{
				{"ann keeps her note", "ann", `{"collection":"notes","q":"harbour"}`, []string{"n1"}},
				{"bob finds his own under the same id", "bob", `{"collection":"notes","q":"lighthouse"}`, []string{"n1"}},
				{"ann does not find bob's", "ann", `{"collection":"notes","q":"lighthouse"}`, []string{}},
				{"the org-scoped collection is shared in the org", "bob", `{"collection":"handbook","q":"harbour"}`, []string{"h1"}},
				{"and not across orgs", "gus", `{"collection":"handbook","q":"harbour"}`, []string{}},
				{"another org's user finds nothing, naming ann", "gus", `{"collection":"notes","q":"harbour","as":"ann"}`, []string{}},
			} {
				if got := search(tt.user, tt.input); !slices.Equal(got, tt.want) {
					t.Errorf("%s: %s searching %s = %v, want %v", tt.name, tt.user, tt.input, got, tt.want)
				}
			}
			for _, tt := range []struct {
				user string
				want map[string]any
			}{
				{"ann", map[string]any{"user": "ann", "org": "acme", "roles": []any{"admin"}, "admin": true, "correlation_id": "corr-ann"}},
				{"bob", map[string]any{"user": "bob", "org": "acme", "roles": []any{"member"}, "admin": false, "correlation_id": "corr-bob"}},
				{"gus", map[string]any{"user": "gus", "org": "globex", "roles": []any{"admin"}, "admin": true, "correlation_id": "corr-gus"}},
			} {
				code, got := n.act(tt.user, "scoped", "whoami", `{"user":"ann"}`, "X-Request-Id", "corr-"+tt.user)
				if code != http.StatusOK || !equalJSON(got, tt.want) {
					t.Errorf("whoami as %s: %d %v, want %v", tt.user, code, got, tt.want)
				}
			}
		})
	}
}

func equalJSON(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
