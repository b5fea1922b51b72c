package main_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host/ai/aitest"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// The notes example (examples/notes): the plugin in Go and in Python, the
// operator's profile and server config its README uses.
const (
	notesConfig  = "examples/notes/moat-server.yaml"
	notesProfile = "examples/notes/profile.yaml"
)

// moatIn runs the moat binary in the working directory dir.
func moatIn(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(moatBin, args...)
	cmd.Dir = dir
	return runCmd(t, cmd)
}

// TestNotesPolicyCheck: `moat policy check` of either notes plugin reports
// grants for exactly what the plugin uses (its db model, its knowledge
// collection, tasks) and nothing else, under the example's profile and
// under dev, which grants everything; under minimal, which grants none of
// them, the plugin would be refused, naming each.
func TestNotesPolicyCheck(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	root := testwasm.RepoRoot(t)
	want := []string{"db notes ✓ granted", "ai small-chat ✓ granted", "knowledge notes ✓ granted", "tasks ✓ granted", "log, config ✓ always available"}
	for _, plugin := range []string{"examples/notes/go/moat.yaml", "examples/notes/python"} {
		for _, profile := range []string{notesProfile, "dev"} {
			r := moatIn(t, root, "policy", "check", plugin, "--profile", profile)
			if r.code != 0 || !strings.Contains(r.stdout, "verdict: LOADS") {
				t.Fatalf("policy check %s --profile %s: exit %d\n%s%s", plugin, profile, r.code, r.stdout, r.stderr)
			}
			if got := capabilityLines(r.stdout); !slices.Equal(got, want) {
				t.Errorf("policy check %s --profile %s: capabilities\n%q\nwant\n%q", plugin, profile, got, want)
			}
		}
		r := moatIn(t, root, "policy", "check", plugin)
		if r.code != 3 || !strings.Contains(r.stdout, "REFUSED") {
			t.Errorf("policy check %s under minimal: exit %d, want 3 (refused)\n%s", plugin, r.code, r.stdout)
		}
		for _, c := range []string{"db notes", "ai small-chat", "knowledge notes", "tasks"} {
			if !strings.Contains(r.stdout, c) {
				t.Errorf("policy check %s under minimal does not name %s:\n%s", plugin, c, r.stdout)
			}
		}
	}
}

// capabilityLines is the capabilities section of a policy check report,
// each line's runs of spaces as one.
// notesConfigWithModel is examples/notes/moat-server.yaml with its model
// provider pointed at an OpenAI-compatible server in the test (the one
// stand-in the project allows: for a model provider), under the same
// alias and the provider's model name the file gives.
func notesConfigWithModel(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, notesConfig))
	if err != nil {
		t.Fatal(err)
	}
	const local = "http://127.0.0.1:11434/v1"
	if !bytes.Contains(b, []byte(local)) {
		t.Fatalf("%s no longer names the provider %s", notesConfig, local)
	}
	llm := aitest.New(t, "")
	b = bytes.Replace(b, []byte(local), []byte(llm.URL), 1)
	b = bytes.Replace(b, []byte("profile: examples/notes/profile.yaml"), []byte("profile: "+filepath.Join(root, notesProfile)), 1)
	p := filepath.Join(t.TempDir(), "moat-server.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func capabilityLines(report string) []string {
	_, rest, _ := strings.Cut(report, "\ncapabilities\n")
	section, _, _ := strings.Cut(rest, "\n\n")
	var out []string
	for _, l := range strings.Split(section, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestNotesExample is the walk-through of examples/notes/README.md with
// the real binary, on SQLite and on PostgreSQL: moat keys create --config
// for two users of acme and one of globex, moat serve --config, both
// plugins uploaded as the README uploads them, then for each plugin the
// README's claims over HTTP: scoping (bob does not see ann's notes, globex
// sees nothing), validation (400), a stale update (409), search, a
// reminder task that runs, /v1/tasks, the audit trail of one request with
// its task and mutations, and moat tasks ls.
func TestNotesExample(t *testing.T) {
	testenv.Slow(t, "the notes README walked on both backends")
	root := testwasm.RepoRoot(t)
	goWasm := notesGoWasm(t)
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "postgres" {
				t.Setenv("MOAT_DATABASE_URL", pgtest.Database(t))
			}
			data := t.TempDir()
			notesConfig := notesConfigWithModel(t, root)
			keys := map[string]string{}
			for _, u := range []struct{ org, user, role string }{{"acme", "ann", "admin"}, {"acme", "bob", "member"}, {"globex", "gus", "admin"}} {
				r := moatIn(t, root, "keys", "create", "--config", notesConfig, "--data", data, "--org", u.org, "--user", u.user, "--role", u.role)
				keys[u.user] = strings.TrimSpace(r.stdout)
				if r.code != 0 || !strings.HasPrefix(keys[u.user], "moat_sk_") {
					t.Fatalf("keys create %s@%s: %+v", u.user, u.org, r)
				}
			}
			var log lockedBuffer
			_, base := startServeIn(t, root, &log, "--config", notesConfig, "--data", data, "--listen", "127.0.0.1:0")
			n := &notesClient{t: t, base: base, keys: keys, log: &log}

			// Uploads as the README does them: the Go plugin as a module
			// and its manifest, the Python one as an archive of its
			// directory; by the admins of both organizations, so that
			// globex runs the same plugins on its own data.
			manifest, err := os.ReadFile(filepath.Join(root, "examples/notes/go/moat.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			up, upType := moduleForm(goWasm, manifest)
			archive := dirArchive(t, filepath.Join(root, "examples/notes"), "python")
			for _, admin := range []string{"ann", "gus"} {
				if code, out := n.do(admin, "POST", "/v1/modules", up.String(), upType); code != 201 {
					t.Fatalf("upload notes-go as %s: %d %s\n%s", admin, code, out, log.String())
				}
				if code, out := n.do(admin, "POST", "/v1/modules", archive, "application/gzip"); code != 201 || !strings.Contains(out, `"kind":"script"`) {
					t.Fatalf("upload notes-python as %s: %d %s\n%s", admin, code, out, log.String())
				}
			}
			if code, out := n.do("bob", "POST", "/v1/modules", archive, "application/gzip"); code != 403 {
				t.Errorf("upload by bob, no admin: %d %s", code, out)
			}

			tasks := map[string]string{}
			for _, plugin := range []string{"notes-go", "notes-python"} {
				t.Run(plugin, func(t *testing.T) {
					n.t = t
					tasks[plugin] = n.walkThrough(plugin, backend)
				})
			}
			// The operator's view of the same tasks.
			ls := moatIn(t, root, "tasks", "ls", "--config", notesConfig, "--data", data, "--org", "acme")
			for plugin, id := range tasks {
				if ls.code != 0 || !regexp.MustCompile(regexp.QuoteMeta(id)+`.*done`).MatchString(ls.stdout) || !strings.Contains(ls.stdout, plugin) {
					t.Errorf("moat tasks ls --org acme lacks %s's done reminder %s: %d\n%s%s", plugin, id, ls.code, ls.stdout, ls.stderr)
				}
			}
			if g := moatIn(t, root, "tasks", "ls", "--config", notesConfig, "--data", data, "--org", "globex"); g.code != 0 || strings.Contains(g.stdout, "notes-") {
				t.Errorf("moat tasks ls --org globex lists acme's tasks: %d\n%s", g.code, g.stdout)
			}
		})
	}
}

// notesClient calls a notes plugin as the users of TestNotesExample.
type notesClient struct {
	t    *testing.T
	base string
	keys map[string]string // user → API key
	log  *lockedBuffer
}

func (n *notesClient) do(user, method, path, body, ct string, headers ...string) (int, string) {
	n.t.Helper()
	req, err := http.NewRequest(method, n.base+path, strings.NewReader(body))
	if err != nil {
		n.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+n.keys[user])
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// act invokes action of plugin as user with input (JSON) and decodes the
// answer into a map (the problem's, on failure).
func (n *notesClient) act(user, plugin, action, input string, headers ...string) (int, map[string]any) {
	n.t.Helper()
	code, out := n.do(user, "POST", "/v1/modules/"+plugin+"/actions/"+action, input, "", headers...)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		n.t.Fatalf("%s %s as %s: %d %q is not a JSON object\n%s", plugin, action, user, code, out, n.log.String())
	}
	return code, m
}

// must is act that must answer 200.
func (n *notesClient) must(user, plugin, action, input string, headers ...string) map[string]any {
	n.t.Helper()
	code, m := n.act(user, plugin, action, input, headers...)
	if code != http.StatusOK {
		n.t.Fatalf("%s %s %s as %s: %d %v", plugin, action, input, user, code, m)
	}
	return m
}

// fails is act that must fail with status and code.
func (n *notesClient) fails(status int, code, user, plugin, action, input string) map[string]any {
	n.t.Helper()
	got, m := n.act(user, plugin, action, input)
	if got != status || m["code"] != code {
		n.t.Errorf("%s %s %s as %s: %d %v; want %d %s", plugin, action, input, user, got, m, status, code)
	}
	return m
}

// ids are the ids of notes (a list of note objects) or hits.
func ids(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		m, _ := x.(map[string]any)
		id, _ := m["id"].(string)
		out = append(out, id)
	}
	return out
}

// walkThrough runs the README's claims against plugin and returns the id
// of the reminder task it saw run.
func (n *notesClient) walkThrough(plugin, backend string) string {
	t := n.t
	due := time.Now().UTC().Add(time.Hour).Truncate(time.Millisecond)
	milk := n.must("ann", plugin, "create", fmt.Sprintf(`{"title":"buy milk","body":"two litres of oat milk","tags":["home","shopping"],"due":%q}`, due.Format(time.RFC3339Nano)))
	dentist := n.must("ann", plugin, "create", `{"title":"call the dentist","tags":["health"]}`)
	bobs := n.must("bob", plugin, "create", `{"title":"bob's milk run","tags":["home"]}`)
	m1, d1 := milk["id"].(string), dentist["id"].(string)
	if milk["owner"] != "ann" || milk["version"] != 1.0 || milk["done"] != false || milk["due"] != due.Format("2006-01-02T15:04:05.000Z") || bobs["owner"] != "bob" {
		t.Errorf("created notes: %v; %v", milk, bobs)
	}

	// Validation, each a 400 with the code the plugin or the host gave,
	// whatever the plugin's language.
	n.fails(400, "invalid_argument", "ann", plugin, "create", `{"body":"no title"}`)
	n.fails(400, "invalid_argument", "ann", plugin, "create", fmt.Sprintf(`{"title":%q}`, strings.Repeat("x", 201)))
	n.fails(400, "invalid_argument", "ann", plugin, "create", `{"title":"x","owner":"bob"}`)
	n.fails(400, "invalid_argument", "ann", plugin, "create", `{"title":"x","reminded":"2026-01-01T00:00:00Z"}`)
	n.fails(400, "invalid_argument", "ann", plugin, "create", `{"title":"x","tags":["`+strings.Repeat("t", 65)+`"]}`)
	n.fails(400, "invalid_argument", "ann", plugin, "create", `{"title":"x","due":"tomorrow"}`)
	n.fails(400, "invalid_argument", "ann", plugin, "create", `not json`)
	n.fails(400, "invalid_argument", "ann", plugin, "list", `{"done":"yes"}`)
	n.fails(400, "invalid_argument", "ann", plugin, "list", `{"after":"forged-cursor"}`)
	n.fails(413, "input_too_large", "ann", plugin, "get", `{"id":"`+strings.Repeat("a", 2048)+`"}`)
	for _, id := range []string{"' OR 1=1 --", `x"); DROP TABLE db_documents; --`, "../../" + m1, strings.ToUpper(m1)} {
		in, _ := json.Marshal(map[string]string{"id": id})
		if code, m := n.act("ann", plugin, "get", string(in)); code != 404 && code != 400 {
			t.Errorf("get of the hostile id %q: %d %v; want 404 or 400", id, code, m)
		}
	}

	// Scoping: the model is scope: user, and organizations never meet.
	if got := n.must("ann", plugin, "get", `{"id":"`+m1+`"}`); got["title"] != "buy milk" || got["body"] != "two litres of oat milk" {
		t.Errorf("ann gets her note: %v", got)
	}
	for _, user := range []string{"bob", "gus"} {
		n.fails(404, "not_found", user, plugin, "get", `{"id":"`+m1+`"}`)
		n.fails(404, "not_found", user, plugin, "update", `{"id":"`+m1+`","done":true}`)
		n.fails(404, "not_found", user, plugin, "delete", `{"id":"`+m1+`"}`)
		n.fails(404, "not_found", user, plugin, "remind", `{"id":"`+m1+`","delay":"1s"}`)
	}
	if got := ids(n.must("ann", plugin, "list", `{}`)["notes"]); !slices.Equal(got, []string{m1, d1}) {
		t.Errorf("ann's list (by due, none last) = %v, want [%s %s]", got, m1, d1)
	}
	if got := ids(n.must("bob", plugin, "list", `{}`)["notes"]); !slices.Equal(got, []string{bobs["id"].(string)}) {
		t.Errorf("bob's list = %v, want only his note", got)
	}
	if got := n.must("gus", plugin, "list", `{}`)["notes"]; len(ids(got)) != 0 {
		t.Errorf("globex's list = %v, want nothing", got)
	}
	if got := ids(n.must("ann", plugin, "list", `{"tag":"home"}`)["notes"]); !slices.Equal(got, []string{m1}) {
		t.Errorf("ann's notes tagged home = %v, want [%s]", got, m1)
	}

	// Search: full text over title, body and tags, a user's own notes only.
	if got := ids(n.must("ann", plugin, "search", `{"q":"MILK"}`)["hits"]); !slices.Equal(got, []string{m1}) {
		t.Errorf("ann's search for milk = %v, want [%s]", got, m1)
	}
	if got := ids(n.must("bob", plugin, "search", `{"q":"milk"}`)["hits"]); !slices.Equal(got, []string{bobs["id"].(string)}) {
		t.Errorf("bob's search for milk = %v, want only his note", got)
	}
	if got := n.must("gus", plugin, "search", `{"q":"milk"}`)["hits"]; len(ids(got)) != 0 {
		t.Errorf("globex's search for milk = %v, want nothing", got)
	}
	if got := ids(n.must("ann", plugin, "search", `{"q":"oat \" OR * NEAR(milk"}`)["hits"]); len(got) != 0 {
		t.Errorf("a query of syntax found %v: its words are words (or, near are in no note)", got)
	}

	// A stale update is a 409; the fresh one goes through and is searched.
	upd := n.must("ann", plugin, "update", `{"id":"`+m1+`","version":1,"done":true,"title":"buy oat milk and bread"}`)
	if upd["version"] != 2.0 || upd["done"] != true || upd["title"] != "buy oat milk and bread" {
		t.Errorf("update: %v", upd)
	}
	if m := n.fails(409, "conflict", "ann", plugin, "update", `{"id":"`+m1+`","version":1,"done":false}`); !strings.Contains(fmt.Sprint(m["detail"]), "get it again") {
		t.Errorf("the 409 does not say what to do: %v", m)
	}
	if got := ids(n.must("ann", plugin, "search", `{"q":"bread"}`)["hits"]); !slices.Equal(got, []string{m1}) {
		t.Errorf("search for the updated title = %v", got)
	}
	if got := ids(n.must("ann", plugin, "list", `{"done":true}`)["notes"]); !slices.Equal(got, []string{m1}) {
		t.Errorf("ann's done notes = %v, want [%s]", got, m1)
	}

	// A reminder: remind enqueues a task, which runs reminder as ann.
	n.fails(400, "invalid_argument", "ann", plugin, "remind", `{"id":"`+d1+`"}`) // no due time
	n.fails(400, "invalid_argument", "ann", plugin, "remind", `{"id":"`+m1+`","delay":"soon"}`)
	at := n.must("ann", plugin, "remind", `{"id":"`+m1+`"}`)
	if again := n.must("ann", plugin, "remind", `{"id":"`+m1+`"}`); at["existing"] != false || again["existing"] != true || again["task"] != at["task"] {
		t.Errorf("remind at the due time, twice: %v then %v; want one task", at, again)
	}
	cid := "notes-remind-" + plugin + "-" + backend
	r := n.must("ann", plugin, "remind", `{"id":"`+m1+`","delay":"1s"}`, "X-Request-Id", cid)
	task, _ := r["task"].(string)
	var state map[string]any
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, out := n.do("ann", "GET", "/v1/tasks/"+task, "", "")
		if code != 200 || json.Unmarshal([]byte(out), &state) != nil {
			t.Fatalf("GET /v1/tasks/%s: %d %s", task, code, out)
		}
		if state["state"] == "done" || state["state"] == "failed" || time.Now().After(deadline) {
			break
		}
	}
	if state["state"] != "done" || state["action"] != "reminder" || state["user"] != "ann" || state["correlation_id"] != cid {
		t.Fatalf("the reminder task: %v\n%s", state, n.log.String())
	}
	if got := n.must("ann", plugin, "get", `{"id":"`+m1+`"}`); got["reminded"] == nil || got["version"] != 3.0 {
		t.Errorf("after the reminder the note is %v, want reminded set at version 3", got)
	}
	if code, out := n.do("ann", "GET", "/v1/tasks?module="+plugin+"&state=done", "", ""); code != 200 || !strings.Contains(out, task) {
		t.Errorf("GET /v1/tasks?module=%s&state=done: %d %s", plugin, code, out)
	}
	if code, out := n.do("gus", "GET", "/v1/tasks/"+task, "", ""); code != 404 {
		t.Errorf("globex GET of acme's task: %d %s", code, out)
	}

	// The audit trail of the remind request: the action, its enqueue, and
	// the task's run and mutation, carrying the task's id.
	code, out := n.do("ann", "GET", "/v1/audit?correlation_id="+cid, "", "")
	type event struct {
		Kind       string `json:"kind"`
		Action     string `json:"action"`
		Op         string `json:"op"`
		Decision   string `json:"decision"`
		TaskID     string `json:"task_id"`
		MutationID string `json:"mutation_id"`
	}
	var trail struct{ Events []event }
	if code != 200 || json.Unmarshal([]byte(out), &trail) != nil {
		t.Fatalf("audit: %d %s", code, out)
	}
	has := func(match func(kind, action, op, taskID string) bool) bool {
		return slices.ContainsFunc(trail.Events, func(e event) bool {
			return match(e.Kind, e.Action, e.Op, e.TaskID) && (e.Op == "" || e.Decision == "allow" && e.MutationID != "")
		})
	}
	for what, ok := range map[string]bool{
		"the remind invocation":        has(func(k, a, op, tid string) bool { return k == "invocation" && a == "remind" && tid == "" }),
		"its task.enqueue":             has(func(k, a, op, tid string) bool { return op == "task.enqueue" && a == "remind" }),
		"the task's reminder run":      has(func(k, a, op, tid string) bool { return k == "invocation" && a == "reminder" && tid == task }),
		"the task's db.update of note": has(func(k, a, op, tid string) bool { return op == "db.update" && tid == task }),
	} {
		if !ok {
			t.Errorf("the audit of %s lacks %s:\n%s", cid, what, out)
		}
	}

	// Summarize: the caller's open notes, by the model small-chat (the
	// test's OpenAI-compatible server, which answers "<model> heard: <the
	// prompt's words>"): ann's open note (the milk is done) is in her
	// summary, bob's are not;
	// the model call is in the audit trail under the invocation's
	// correlation id, with the id the plugin answered.
	scid := "notes-summarize-" + plugin + "-" + backend
	sum := n.must("ann", plugin, "summarize", `{}`, "X-Request-Id", scid)
	text, _ := sum["summary"].(string)
	mcid, _ := sum["model_call_id"].(string)
	if !strings.HasPrefix(text, "llama3.2 heard:") || !strings.Contains(text, "dentist") || strings.Contains(text, "bob") || sum["notes"] != 1.0 || mcid == "" {
		t.Errorf("summarize: %v", sum)
	}
	if code, out := n.do("ann", "GET", "/v1/audit?correlation_id="+scid, "", ""); code != 200 || !strings.Contains(out, `"model_call_id":"`+mcid+`"`) || !strings.Contains(out, `"op":"ai.complete"`) {
		t.Errorf("the audit of %s lacks the model call %s: %d\n%s", scid, mcid, code, out)
	}
	if got := n.must("bob", plugin, "summarize", `{"tag":"home"}`); !strings.Contains(fmt.Sprint(got["summary"]), "milk") || strings.Contains(fmt.Sprint(got["summary"]), "dentist") {
		t.Errorf("bob's summary: %v", got)
	}

	// Delete: stale version refused, then gone, from search too.
	n.fails(409, "conflict", "ann", plugin, "delete", `{"id":"`+d1+`","version":7}`)
	if got := n.must("ann", plugin, "delete", `{"id":"`+d1+`","version":1}`); got["deleted"] != true {
		t.Errorf("delete: %v", got)
	}
	n.fails(404, "not_found", "ann", plugin, "get", `{"id":"`+d1+`"}`)
	n.fails(404, "not_found", "ann", plugin, "delete", `{"id":"`+d1+`"}`)
	if got := n.must("ann", plugin, "search", `{"q":"dentist"}`)["hits"]; len(ids(got)) != 0 {
		t.Errorf("search after delete = %v", got)
	}
	return task
}

// dirArchive is `tar czf - -C parent dir`: dir's regular files under dir/.
func dirArchive(t *testing.T, parent, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(parent, dir))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(parent, dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		tw.WriteHeader(&tar.Header{Name: dir + "/" + e.Name(), Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
	}
	tw.Close()
	zw.Close()
	return buf.String()
}

// TestRunServerConfig: moat run --server-config runs a plugin as the
// server the file configures would: its profile, its store and its model
// providers, so notes-go's summarize reaches the model from the command
// line, through the confined host's connect rule for the provider's port.
func TestRunServerConfig(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	root := testwasm.RepoRoot(t)
	dir := writeModule(t, "notes-go", notesGoWasm(t))
	copyFile(t, filepath.Join(root, "examples/notes/go/moat.yaml"), filepath.Join(dir, "moat.yaml"))
	cfg := notesConfigWithModel(t, root)
	data := t.TempDir()
	run := func(action, input string) result {
		return moatIn(t, root, "run", dir, action, "--server-config", cfg, "--data", data, "--org", "acme", "--user", "ann", "--input", input)
	}
	if r := run("create", `{"title":"call the dentist"}`); r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	r := run("summarize", `{}`)
	var out map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || !strings.Contains(fmt.Sprint(out["summary"]), "llama3.2 heard:") ||
		!strings.Contains(fmt.Sprint(out["summary"]), "dentist") || out["model_call_id"] == "" {
		t.Fatalf("summarize: %+v", r)
	}
	// Without the file, no model is configured: the call says so.
	if r := moatIn(t, root, "run", dir, "summarize", "--data", data, "--profile", notesProfile, "--org", "acme", "--user", "ann", "--input", "{}"); r.code == 0 || !strings.Contains(r.stderr, "unavailable") {
		t.Errorf("summarize without --server-config: %+v", r)
	}
}

// notesGoWasm is examples/notes/go's module as `moat build` writes it: the
// Go build, with its page's files in its moat.pages section.
func notesGoWasm(t *testing.T) []byte {
	t.Helper()
	dir := filepath.Join(testwasm.RepoRoot(t), "examples/notes/go")
	mf, err := policy.LoadManifest(filepath.Join(dir, "moat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wasm, err := bundle.EmbedPages(testwasm.BuildGo(t, "./examples/notes/go", true), mf, dir)
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// TestNotesPagesSame: the Go and Python notes plugins ship the same page;
// its files are copies (a plugin's directory holds no links), kept equal.
func TestNotesPagesSame(t *testing.T) {
	root := testwasm.RepoRoot(t)
	for _, f := range []string{"index.html", "notes.js", "notes.css"} {
		g, err1 := os.ReadFile(filepath.Join(root, "examples/notes/go", f))
		p, err2 := os.ReadFile(filepath.Join(root, "examples/notes/python", f))
		if err1 != nil || err2 != nil || !bytes.Equal(g, p) {
			t.Errorf("examples/notes/go/%s differs from examples/notes/python/%s (%v, %v): copy it", f, f, err1, err2)
		}
	}
}
