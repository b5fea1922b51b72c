//go:build !wasip1

package polyglot_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/host/store"
	_ "github.com/moat-sandbox/moat/host/store/postgres"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/host/tasks"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/javascript"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// sdkProfile is the operator's profile of the SDK fixtures: it grants
// the model notes and the collection docs, not the model secrets and the
// collection private the fixtures' manifests also ask for, and loads them
// anyway (deny_at_call), so a call on those is refused with denied.
const sdkProfile = `
name: sdk
on_ungranted: deny_at_call
default:
  capabilities: {kv: true, db: [notes], knowledge: [docs], tasks: true}
  limits: {memory: 128MiB, timeout: 10s}
`

// sdkHost is a host with sdkProfile on its own SQLite store.
func sdkHost(t testing.TB, logger *slog.Logger) *host.Host { return sdkHostOn(t, logger, nil) }

// sdkHostOn is a host with sdkProfile on st (nil: its own SQLite store).
func sdkHostOn(t testing.TB, logger *slog.Logger, st *store.Store) *host.Host {
	t.Helper()
	p, err := policy.ParseProfile("sdk.yaml", []byte(sdkProfile))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := hosttest.New(t, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Logger: logger, Profile: p, Store: st})
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

// sdkBackends are the stores TestSDKData runs on: the host's own SQLite
// (nil), and a fresh PostgreSQL database (pgtest starts a throwaway
// cluster; without one the subtest is skipped, or fails under
// MOAT_REQUIRE_TOOLS=1).
var sdkBackends = []struct {
	name string
	open func(t *testing.T) *store.Store
}{
	{"sqlite", func(*testing.T) *store.Store { return nil }},
	{"postgres", func(t *testing.T) *store.Store {
		st, err := store.Open(context.Background(), pgtest.Database(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
}

// dataFixture is a plugin with the db, knowledge and task actions of the
// SDK fixtures: a compiled one (a guest of sdkFixtures), the JavaScript
// one, a script the interpreter runs per call, or the Ruby one, resident
// (its handlers keep an op's code, as a compiled plugin does).
type dataFixture struct {
	lang string
	load func(t *testing.T, h *host.Host) *host.Module
	// script: a failed invocation is the script's guest_error, whose
	// reason carries the op's error (the fixture catches the MoatError
	// and exits 1; its code reaches the script, which the stale command
	// shows).
	script bool
}

func dataFixtures() []dataFixture {
	var out []dataFixture
	for _, g := range sdkFixtures {
		out = append(out, dataFixture{lang: g.lang, load: func(t *testing.T, h *host.Host) *host.Module { return load(t, h, bundle(t, g), nil) }})
	}
	return append(out, dataFixture{lang: "javascript", load: loadScriptFixture("examples/polyglot/testdata/sdk-js", nil), script: true},
		dataFixture{lang: "ruby", load: loadScriptFixture("examples/polyglot/testdata/sdk-ruby", nil)})
}

// loadScriptFixture loads an interpreted plugin's directory as `moat run`
// does: its sources with the language's SDK beside them, the interpreter
// serving its manifest's actions. edit, when not nil, changes the
// manifest first.
func loadScriptFixture(dir string, edit func(*policy.Manifest)) func(t *testing.T, h *host.Host) *host.Module {
	return func(t *testing.T, h *host.Host) *host.Module {
		t.Helper()
		root := testwasm.RepoRoot(t)
		mf, err := policy.LoadManifest(filepath.Join(root, dir, policy.ManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(mf)
		}
		l, err := languages.Lookup(mf.Language)
		if err != nil {
			t.Fatal(err)
		}
		files := map[string][]byte{}
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(root, dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			files[e.Name()] = b
		}
		src, err := languages.PluginSource(l, files)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := languages.BuildScriptPlugin(context.Background(), l, src, t.TempDir(), "")
		if errors.Is(err, toolchains.ErrMissing) {
			testenv.Require(t, err.Error())
		}
		if err != nil {
			t.Fatal(err)
		}
		m, err := h.Load(context.Background(), sp.WASM, host.LoadOptions{Manifest: mf, Script: sp.Script})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// TestSDKData drives the typed db, knowledge and task wrappers of the C
// (and C++), Rust, AssemblyScript and JavaScript SDKs through their
// fixtures and a real host, on SQLite and on PostgreSQL, with one script
// of commands: each fixture builds its requests with its SDK's builders
// (documents, conditions, metadata, options) and answers JSON of what its
// SDK read back, so a value mangled on the way out or in shows here. JSON
// the SDK must refuse (a number with no JSON form, text that would add
// members to the request around a document) is refused in the guest, and
// the store is unchanged. Another organization's caller finds nothing.
// Op errors keep their code: a stale version is conflict (which the
// fixture's own code also catches by its code), an ungranted model or
// collection is denied, an unknown task is not_found.
func TestSDKData(t *testing.T) {
	testenv.Slow(t, "every SDK's data ops on both backends; host's op tests keep the ops")
	for _, f := range dataFixtures() {
		t.Run(f.lang, func(t *testing.T) {
			for _, b := range sdkBackends {
				t.Run(b.name, func(t *testing.T) { sdkData(t, f, sdkHostOn(t, slog.New(slog.DiscardHandler), b.open(t))) })
			}
		})
	}
}

// sdkData runs TestSDKData's script on one fixture and host.
func sdkData(t *testing.T, f dataFixture, h *host.Host) {
	ctx := context.Background()
	m := f.load(t, h)
	eve := policy.Principal{User: "eve", Org: "evil"}
	callAs := func(who policy.Principal, action, input string) (map[string]any, error) {
		t.Helper()
		res, err := m.Invoke(ctx, host.Request{Action: action, Input: []byte(input), Principal: who})
		if err != nil {
			return nil, err
		}
		var out map[string]any
		if err := json.Unmarshal(res.Output, &out); err != nil {
			return nil, fmt.Errorf("%s %q: output %q is not a JSON object: %w", action, input, res.Output, err)
		}
		return out, nil
	}
	call := func(action, input string) (map[string]any, error) { return callAs(ann, action, input) }
	must := func(action, input string) map[string]any {
		t.Helper()
		out, err := call(action, input)
		if err != nil {
			t.Fatalf("%s %q: %v", action, input, err)
		}
		return out
	}
	// refusedAs checks that who's invocation failed with code and a
	// reason holding reason.
	refusedAs := func(who policy.Principal, action, input string, code abi.Code, reason string) {
		t.Helper()
		out, err := callAs(who, action, input)
		var he *host.Error
		if !errors.As(err, &he) {
			t.Errorf("%s %q = %v, %v; want %s", action, input, out, err, code)
			return
		}
		if f.script {
			// The script's uncaught MoatError: its message names
			// the code.
			if he.Code != abi.CodeGuestError || !strings.Contains(he.Reason, string(code)+": ") || !strings.Contains(he.Reason, reason) {
				t.Errorf("%s %q: %v; want a guest_error naming %s and %q", action, input, err, code, reason)
			}
			return
		}
		if he.Code != code || !strings.Contains(he.Reason, reason) {
			t.Errorf("%s %q: %v; want %s with %q", action, input, err, code, reason)
		}
	}
	refused := func(action, input string, code abi.Code, reason string) {
		t.Helper()
		refusedAs(ann, action, input, code, reason)
	}

	// db: documents built by the SDK's writer, titles built to
	// break JSON (quotes, backslashes, controls, non-ASCII).
	title := "buy \"milk\" \\ and\tbread ü 😀"
	notes := []struct {
		n     int
		tags  string
		title string
	}{{3, "home,shop", title}, {5, "home", "c5"}, {2, "home,work", "b2"}, {8, "work", "d8"}, {4, "home", "e4"}, {1, "home", "a1"}}
	ids := map[string]string{}
	for _, n := range notes {
		out := must("db", fmt.Sprintf("insert notes %d %s %s", n.n, n.tags, n.title))
		id, _ := out["id"].(string)
		if len(id) != 28 || out["version"] != 1.0 {
			t.Fatalf("insert %q = %v; want a 28-digit id at version 1", n.title, out)
		}
		ids[n.title] = id
	}
	id := ids[title]
	got := must("db", "get notes "+id)
	wantDoc := map[string]any{"title": title, "n": 3.0, "tags": []any{"home", "shop"}, "done": false, "body": "b"}
	if got["found"] != true || got["id"] != id || got["version"] != 1.0 || got["owner"] != ann.User || got["title"] != title ||
		!reflect.DeepEqual(got["doc"], wantDoc) {
		t.Errorf("get = %v; want the document %v, owned by %s at version 1", got, wantDoc, ann.User)
	}
	created, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["created"]))
	if err != nil || time.Since(created) > time.Minute || got["updated"] != got["created"] {
		t.Errorf("created %v, updated %v: want a recent RFC 3339 time, twice", got["created"], got["updated"])
	}
	if out := must("db", "get notes 0123456789abcdef0123456789ab"); !reflect.DeepEqual(out, map[string]any{"found": false}) {
		t.Errorf("get of an id nobody holds = %v; want found false", out)
	}
	// tags contains home, done = false, n in [1,2,3,5,8], by -n,
	// two a page: e4 (n 4) and d8 (work) are not selected.
	wantQuery := map[string]any{"titles": []any{"c5", title, "b2", "a1"}, "pages": 2.0, "count": 4.0}
	if out := must("db", "query notes home"); !reflect.DeepEqual(out, wantQuery) {
		t.Errorf("query = %v; want %v", out, wantQuery)
	}
	if out := must("db", "update notes "+id+" 1 "+title+" (done)"); out["version"] != 2.0 {
		t.Errorf("update = %v; want version 2", out)
	}
	got = must("db", "get notes "+id)
	wantDoc = map[string]any{"title": title + " (done)", "n": 3.0, "tags": []any{"home", "shop"}, "done": true}
	if got["version"] != 2.0 || !reflect.DeepEqual(got["doc"], wantDoc) {
		t.Errorf("after the update: %v; want %v at version 2 (body unset)", got, wantDoc)
	}
	refused("db", "update notes "+id+" 1 stale", abi.CodeConflict, "version")
	// The fixture's own code sees the conflict by its code.
	if out := must("db", "stale notes "+ids["c5"]); !reflect.DeepEqual(out, map[string]any{"code": "conflict", "version": 2.0}) {
		t.Errorf("stale = %v; want the conflict caught at version 2", out)
	}
	if out := must("db", "get notes "+ids["c5"]); out["version"] != 2.0 || out["doc"].(map[string]any)["n"] != 6.0 {
		t.Errorf("after stale: %v; want n 6 at version 2 (the stale write refused)", out)
	}
	wantQuery = map[string]any{"titles": []any{"b2", "a1"}, "pages": 1.0, "count": 2.0} // c5 is n 6 now, the first is done
	if out := must("db", "query notes home"); !reflect.DeepEqual(out, wantQuery) {
		t.Errorf("query after the updates = %v; want %v", out, wantQuery)
	}
	// Another organization's caller, through the same SDK calls, finds
	// none of it: an empty page, no count, found false.
	if out, err := callAs(eve, "db", "query notes home"); err != nil || !reflect.DeepEqual(out, map[string]any{"titles": []any{}, "pages": 1.0, "count": 0.0}) {
		t.Errorf("query as %s = %v, %v; want an empty page", eve.Org, out, err)
	}
	if out, err := callAs(eve, "db", "get notes "+id); err != nil || !reflect.DeepEqual(out, map[string]any{"found": false}) {
		t.Errorf("get as %s = %v, %v; want found false", eve.Org, out, err)
	}
	refused("db", "delete notes "+id+" 1", abi.CodeConflict, "version")
	if out := must("db", "delete notes "+id+" 2"); out["deleted"] != true {
		t.Errorf("delete = %v", out)
	}
	if out := must("db", "delete notes "+id+" 0"); out["deleted"] != false {
		t.Errorf("delete again = %v; want deleted false", out)
	}
	// JSON the SDK must refuse before it is sent: nothing reaches
	// the store.
	before, err := hosttest.Store(h).DBUsage(ctx, ann.Org, m.Name())
	if err != nil {
		t.Fatal(err)
	}
	if out := must("db", "hostile notes"); !reflect.DeepEqual(out, map[string]any{"nan": "invalid_argument", "smuggled": "invalid_argument"}) {
		t.Errorf("hostile = %v; want both refused with invalid_argument", out)
	}
	if after, err := hosttest.Store(h).DBUsage(ctx, ann.Org, m.Name()); err != nil || after != before {
		t.Errorf("the store went from %+v to %+v (%v) on refused documents", before, after, err)
	}
	refused("db", "insert secrets 1 x nope", abi.CodeDenied, "secrets")
	refused("db", "insert notes 9007199254740992 x too big", abi.CodeInvalidArgument, "n")

	// knowledge: meta and filter built by the SDK; a query with
	// what other engines read as syntax is plain words here.
	for _, c := range []struct{ cmd, want string }{
		{"add docs k1 en The quick brown fox", `{"replaced":false}`},
		{"add docs k2 en A lazy brown dog sleeps", `{"replaced":false}`},
		{"add docs k3 de Der braune Fuchs", `{"replaced":false}`},
		{"add docs k1 en The quick \"brown\" fox jumps", `{"replaced":true}`},
	} {
		if out := must("knowledge", c.cmd); !reflect.DeepEqual(out, jsonObject(t, c.want)) {
			t.Errorf("%s = %v; want %s", c.cmd, out, c.want)
		}
	}
	hits := func(cmd string) []map[string]any {
		t.Helper()
		var out []map[string]any
		for _, h := range must("knowledge", cmd)["hits"].([]any) {
			out = append(out, h.(map[string]any))
		}
		return out
	}
	hs := hits(`search docs en "BROWN" (fox*) ^`)
	if len(hs) != 1 || hs[0]["id"] != "k1" || hs[0]["lang"] != "en" || hs[0]["scored"] != true || !strings.Contains(fmt.Sprint(hs[0]["snippet"]), "fox jumps") {
		t.Errorf("search for brown fox = %v; want k1 (en) with its snippet", hs)
	}
	hs = hits("search docs - brown")
	if ids := []string{fmt.Sprint(hs[0]["id"]), fmt.Sprint(hs[len(hs)-1]["id"])}; len(hs) != 2 || !slices.Contains(ids, "k1") || !slices.Contains(ids, "k2") {
		t.Errorf("search for brown = %v; want k1 and k2", hs)
	}
	if hs = hits("search docs de fuchs"); len(hs) != 1 || hs[0]["id"] != "k3" || hs[0]["lang"] != "de" {
		t.Errorf("search de fuchs = %v; want k3", hs)
	}
	if hs = hits("search docs de brown"); len(hs) != 0 {
		t.Errorf("search de brown = %v; want no hits (the filter)", hs)
	}
	if out := must("knowledge", "delete docs k2"); out["deleted"] != true {
		t.Errorf("delete k2 = %v", out)
	}
	if hs = hits("search docs - brown"); len(hs) != 1 || hs[0]["id"] != "k1" {
		t.Errorf("search after the delete = %v; want k1 alone", hs)
	}
	stored, err := hosttest.Store(h).KnowledgeSearch(ctx, store.Scope{Org: ann.Org, Module: m.Name()}, store.KnowledgeQuery{Collection: "docs", Query: "fox"})
	if err != nil || len(stored) != 1 || stored[0].Meta["lang"] != "en" || stored[0].Meta["len"] != float64(len(`The quick "brown" fox jumps`)) {
		t.Errorf("the store holds %+v, %v; want k1 with meta lang en and len", stored, err)
	}
	if out, err := callAs(eve, "knowledge", "search docs - brown"); err != nil || !reflect.DeepEqual(out, map[string]any{"hits": []any{}}) {
		t.Errorf("search as %s = %v, %v; want no hits", eve.Org, out, err)
	}
	refused("knowledge", "add private k1 en secret words", abi.CodeDenied, "private")

	// tasks: one delayed an hour (it stays queued, is found again
	// by its key, then cancelled) and one run now by a runner.
	first := must("task", "enqueue echo key-1 1h later")
	tid, _ := first["id"].(string)
	if tid == "" || first["existing"] != false {
		t.Fatalf("enqueue = %v; want a new task", first)
	}
	if again := must("task", "enqueue echo key-1 1h later"); again["id"] != tid || again["existing"] != true {
		t.Errorf("enqueue with the same key = %v; want %s, existing", again, tid)
	}
	st := must("task", "status "+tid)
	runAt, err := time.Parse(time.RFC3339Nano, fmt.Sprint(st["run_at"]))
	if st["state"] != abi.TaskQueued || st["attempts"] != 0.0 || st["max_attempts"] != 2.0 || err != nil || time.Until(runAt) < 50*time.Minute {
		t.Errorf("status = %v; want queued, 0 of 2 attempts, to run in an hour", st)
	}
	tk, err := hosttest.Store(h).TaskGet(ctx, store.Scope{Org: ann.Org, Module: m.Name()}, tid)
	if err != nil || tk.Action != "echo" || string(tk.Input) != "later" || tk.Key != "key-1" || tk.User != ann.User {
		t.Errorf("the stored task = %+v, %v; want echo of \"later\" under key-1 as %s", tk, err, ann.User)
	}
	refusedAs(eve, "task", "cancel "+tid, abi.CodeNotFound, "")
	if out := must("task", "cancel "+tid); out["cancelled"] != true || out["state"] != abi.TaskCancelled {
		t.Errorf("cancel = %v", out)
	}
	if out := must("task", "cancel "+tid); out["cancelled"] != false || out["state"] != abi.TaskCancelled {
		t.Errorf("cancel again = %v; want cancelled false, state cancelled", out)
	}
	payload := "payload \"quoted\" ü"
	now := must("task", "enqueue echo - - "+payload)["id"].(string)
	runTasks(t, h, m)
	deadline := time.Now().Add(20 * time.Second)
	for st = must("task", "status "+now); st["state"] != abi.TaskDone && time.Now().Before(deadline); st = must("task", "status "+now) {
		time.Sleep(20 * time.Millisecond)
	}
	if st["state"] != abi.TaskDone || st["result"] != payload || st["attempts"] != 1.0 {
		t.Errorf("status of the task run = %v; want done after 1 attempt with the result %q", st, payload)
	}
	refused("task", "status 0123456789abcdef0123456789ab", abi.CodeNotFound, "")
	refused("task", "enqueue echo - 45d x", abi.CodeInvalidArgument, "delay")
}

// runTasks runs a task runner over m until the test ends.
func runTasks(t *testing.T, h *host.Host, m *host.Module) {
	t.Helper()
	r, err := tasks.New(tasks.Config{
		Store: hosttest.Store(h),
		Resolve: func(_ context.Context, _, name string) (*host.Module, error) {
			if name == m.Name() {
				return m, nil
			}
			return nil, fmt.Errorf("%w: %s", tasks.ErrModuleGone, name)
		},
		Poll:   20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func jsonObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}
