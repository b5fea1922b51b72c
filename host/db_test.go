package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// dbProfile grants the model notes only; a module asking for more loads,
// and is denied at the call.
const dbProfile = `
name: test
on_ungranted: deny_at_call
default:
  capabilities: {db: [notes]}
  limits: {memory: 256MiB, timeout: 30s, concurrency: 16, calls_per_minute: 100000, db_rows: 50}
`

// dbManifest declares the notes model and a model the profile
// does not grant; version and models vary by test.
func dbManifest(version, notesFields string) string {
	return `
name: notes-app
version: ` + version + `
actions: [{name: db}]
capabilities: {db: [notes, secrets]}
models:
  notes:
    scope: user
    fields:
` + notesFields + `
    indexes: [[done, due], [tags]]
  secrets:
    fields: {text: {type: string}}
`
}

const notesV1 = `      title: {type: string, required: true, max: 200}
      body:  {type: string}
      tags:  {type: "[string]"}
      due:   {type: time}
      done:  {type: bool}`

// dbHosts runs f on a host whose store is SQLite, then one on PostgreSQL
// (skipped without a server), each with a fresh database.
func dbHosts(t *testing.T, f func(t *testing.T, newHost func() *host.Host)) {
	p, err := policy.ParseProfile("profile.yaml", []byte(dbProfile))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return t.TempDir() }},
		{"postgres", func(t *testing.T) string { return pgtest.Database(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			st, err := store.Open(ctx, b.url(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			cache := compileCache // dbguest compiled once per its bytes, not once per test and backend
			f(t, func() *host.Host {
				h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: cache, Store: st, Profile: p, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { h.Close(ctx) })
				return h
			})
		})
	}
}

func loadDBGuest(t *testing.T, h *host.Host, manifest string, opts ...func(*host.LoadOptions)) (*host.Module, error) {
	t.Helper()
	mf, err := policy.ParseManifest("moat.yaml", []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	o := host.LoadOptions{Manifest: mf, ManifestBytes: []byte(manifest)}
	for _, f := range opts {
		f(&o)
	}
	return h.Load(context.Background(), testwasm.BuildGo(t, "./testdata/dbguest", true), o)
}

// dbCall runs one command of the fixture's db action for who.
func dbCall(m *host.Module, who policy.Principal, cid, cmd string) (map[string]any, error) {
	res, err := m.Invoke(context.Background(), host.Request{Action: "db", Input: []byte(cmd), Principal: who, CorrelationID: cid})
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(res.Output, &out); err != nil {
		return nil, fmt.Errorf("output %q: %w", res.Output, err)
	}
	return out, nil
}

// TestDBGoGuest drives the db family end to end: a real Go guest using
// the SDK's typed wrappers, through the moat.call import, the gate, the
// store and back, on both backends. The granted model works and every
// write is audited with its mutation id, model and document id; the
// model the profile does not grant is denied and the denial audited;
// another user (scope: user) and another organization see nothing.
func TestDBGoGuest(t *testing.T) {
	t.Parallel()
	bob := policy.Principal{User: "bob", Org: "acme"}
	eve := policy.Principal{User: "ann", Org: "evil"}
	dbHosts(t, func(t *testing.T, newHost func() *host.Host) {
		h := newHost()
		m, err := loadDBGuest(t, h, dbManifest("1.0.0", notesV1))
		if err != nil {
			t.Fatal(err)
		}
		must := func(who policy.Principal, cid, cmd string) map[string]any {
			t.Helper()
			out, err := dbCall(m, who, cid, cmd)
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			return out
		}
		ins := must(ann, "c-insert", `insert notes {"title":"buy milk","tags":["home","shop"],"due":"2026-03-01T10:00:00+01:00","done":false}`)
		id, _ := ins["id"].(string)
		if len(id) != 28 || ins["version"] != 1.0 {
			t.Fatalf("insert = %v", ins)
		}
		got := must(ann, "c-get", "get notes "+id)
		doc, _ := got["doc"].(map[string]any)
		if got["found"] != true || got["owner"] != "ann" || doc["due"] != "2026-03-01T09:00:00.000Z" || doc["title"] != "buy milk" {
			t.Errorf("get = %v", got)
		}
		q := must(ann, "c-query", `query notes {"where":[["done","=",false],["tags","contains","shop"]],"order":["-due"]}`)
		if ids, _ := q["ids"].([]any); len(ids) != 1 || ids[0] != id {
			t.Errorf("query = %v", q)
		}
		if v := must(ann, "c-update", "update notes "+id+` {"set":{"done":true},"unset":["due"],"version":1}`); v["version"] != 2.0 {
			t.Errorf("update = %v", v)
		}
		_, err = dbCall(m, ann, "c-stale", "update notes "+id+` {"set":{"done":false},"version":1}`)
		if abi.CodeOf(err) != abi.CodeConflict {
			t.Errorf("a stale update: %v, want conflict", err)
		}
		if c := must(ann, "c-count", `count notes [["done","=",true]]`); c["count"] != 1.0 {
			t.Errorf("count = %v", c)
		}

		// Another user of the organization (scope: user) and another
		// organization: nothing, through every op.
		for _, who := range []policy.Principal{bob, eve} {
			if g := must(who, "c-other-get", "get notes "+id); g["found"] != false {
				t.Errorf("%s@%s get = %v", who.User, who.Org, g)
			}
			if q := must(who, "c-other-query", `query notes {"where":[["tags","contains","shop"]]}`); len(q["ids"].([]any)) != 0 {
				t.Errorf("%s@%s query = %v", who.User, who.Org, q)
			}
			if c := must(who, "c-other-count", `count notes`); c["count"] != 0.0 {
				t.Errorf("%s@%s count = %v", who.User, who.Org, c)
			}
			if _, err := dbCall(m, who, "c-other-update", "update notes "+id+` {"set":{"title":"mine"}}`); abi.CodeOf(err) != abi.CodeNotFound {
				t.Errorf("%s@%s update: %v, want not_found", who.User, who.Org, err)
			}
			if d := must(who, "c-other-delete", "delete notes "+id); d["deleted"] != false {
				t.Errorf("%s@%s delete = %v", who.User, who.Org, d)
			}
		}
		// Validation errors name the field.
		_, err = dbCall(m, ann, "c-invalid", `insert notes {"title":"x","due":"soon"}`)
		if abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "field due") {
			t.Errorf("an invalid document: %v", err)
		}
		if d := must(ann, "c-delete", "delete notes "+id+" 2"); d["deleted"] != true {
			t.Errorf("delete = %v", d)
		}

		// Every write audited: op, mutation id, model and document id.
		for _, w := range []struct{ cid, op string }{{"c-insert", abi.OpDBInsert}, {"c-update", abi.OpDBUpdate}, {"c-delete", abi.OpDBDelete}} {
			evs := auditEvents(t, h, audit.Filter{CorrelationID: w.cid, Kind: audit.KindOp})
			if len(evs) != 1 || evs[0].Op != w.op || evs[0].Decision != audit.Allow || evs[0].MutationID == "" ||
				evs[0].Attrs["target"] != "notes" || evs[0].Attrs["id"] != id || evs[0].User != "ann" || evs[0].Org != "acme" {
				t.Errorf("%s: audit %+v; want one allowed %s with a mutation id, target notes and id %s", w.cid, evs, w.op, id)
			}
		}
		// Reads are not mutations: no op event.
		if evs := auditEvents(t, h, audit.Filter{CorrelationID: "c-get", Kind: audit.KindOp}); len(evs) != 0 {
			t.Errorf("db.get left op events: %+v", evs)
		}

		// The model the manifest asks for but the profile does not
		// grant: denied, audited with its target, nothing stored.
		before, _ := host.StoreOf(h).DBUsage(context.Background(), "acme", "notes-app")
		_, err = dbCall(m, ann, "c-secrets", `insert secrets {"text":"the key"}`)
		if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "db secrets") {
			t.Errorf("insert into the ungranted model: %v, want denied", err)
		}
		evs := auditEvents(t, h, audit.Filter{CorrelationID: "c-secrets", Kind: audit.KindOp})
		if len(evs) != 1 || evs[0].Decision != audit.Deny || evs[0].Op != abi.OpDBInsert || evs[0].Attrs["target"] != "secrets" ||
			!strings.Contains(evs[0].Reason, "not granted") {
			t.Errorf("the denial's audit: %+v", evs)
		}
		if after, _ := host.StoreOf(h).DBUsage(context.Background(), "acme", "notes-app"); after != before {
			t.Errorf("the denied insert stored something: %+v → %+v", before, after)
		}
		// A model the manifest does not ask for at all.
		_, err = dbCall(m, ann, "c-board", `query board {}`)
		if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "add db: [board]") {
			t.Errorf("query of an unrequested model: %v, want denied", err)
		}

		// The profile's db_rows is the quota of the organization's module.
		refused := -1
		for i := range 60 {
			if _, err := dbCall(m, bob, "c-fill", fmt.Sprintf(`insert notes {"title":"%d"}`, i)); err != nil {
				if abi.CodeOf(err) != abi.CodeTooLarge || !strings.Contains(err.Error(), "50 documents") {
					t.Errorf("insert %d: %v; want too_large", i, err)
				}
				refused = i
				break
			}
		}
		if refused != 50 {
			t.Errorf("the quota of 50 documents refused insert %d (-1: none), want the 51st", refused)
		}
	})
}

// TestDBModelMigration: a new version of a module migrates its models at
// load (an added field and index), reads what the old one stored, and a
// version changing a field's type is refused at load, saying how to
// migrate, and audited; each organization's copy of a module (loaded with
// LoadOptions.Org) has its own models.
func TestDBModelMigration(t *testing.T) {
	t.Parallel()
	dbHosts(t, func(t *testing.T, newHost func() *host.Host) {
		h := newHost()
		v1, err := loadDBGuest(t, h, dbManifest("1.0.0", notesV1))
		if err != nil {
			t.Fatal(err)
		}
		out, err := dbCall(v1, ann, "m-1", `insert notes {"title":"from v1","tags":["a"]}`)
		if err != nil {
			t.Fatal(err)
		}
		id := out["id"].(string)
		v1.Close(context.Background())

		// A restart, and version 2: a field and an index added.
		h = newHost()
		v2, err := loadDBGuest(t, h, strings.Replace(dbManifest("2.0.0", notesV1+"\n      prio:  {type: int}"),
			"indexes: [[done, due], [tags]]", "indexes: [[done, due], [tags], [prio]]", 1))
		if err != nil {
			t.Fatalf("v2 (a field and an index added): %v", err)
		}
		if g, err := dbCall(v2, ann, "m-2", "get notes "+id); err != nil || g["found"] != true {
			t.Errorf("v2 reading v1's note: %v, %v", g, err)
		}
		if _, err := dbCall(v2, ann, "m-3", "update notes "+id+` {"set":{"prio":2}}`); err != nil {
			t.Errorf("v2 setting its new field: %v", err)
		}
		if q, err := dbCall(v2, ann, "m-4", `query notes {"where":[["prio",">=",1]],"order":["prio"]}`); err != nil || len(q["ids"].([]any)) != 1 {
			t.Errorf("v2 querying its new index: %v, %v", q, err)
		}

		// Version 3 changes a field's type: refused, and says how to migrate.
		_, err = loadDBGuest(t, h, dbManifest("3.0.0", strings.Replace(notesV1+"\n      prio:  {type: int}", "due:   {type: time}", "due:   {type: string}", 1)),
			func(o *host.LoadOptions) { o.CorrelationID = "load-v3" })
		var he *host.Error
		if !asHostError(err, &he) || he.Code != abi.CodeInvalidArgument ||
			!strings.Contains(he.Reason, "field due changed type from time to string") || !strings.Contains(he.Reason, "declare a new field") {
			t.Fatalf("v3 (a type changed): %v", err)
		}
		evs := auditEvents(t, h, audit.Filter{CorrelationID: "load-v3", Kind: audit.KindLoad, Decision: audit.Deny})
		if len(evs) != 1 || evs[0].Rule != "manifest models" || !strings.Contains(evs[0].Reason, "field due changed type") {
			t.Errorf("v3's refusal in the audit trail: %+v", evs)
		}
		// v2 still loads after the refusal.
		if _, err := loadDBGuest(t, h, dbManifest("2.0.1", notesV1+"\n      prio:  {type: int}")); err != nil {
			t.Errorf("v2 again after v3's refusal: %v", err)
		}

		// Loaded for an organization: its own models, its callers only.
		globex := policy.Principal{User: "gus", Org: "globex"}
		g, err := loadDBGuest(t, h, dbManifest("1.0.0", strings.Replace(notesV1, "due:   {type: time}", "due:   {type: int}", 1)),
			func(o *host.LoadOptions) { o.Org = "globex" })
		if err != nil {
			t.Fatalf("globex's notes-app with its own models: %v", err)
		}
		if _, err := dbCall(g, globex, "m-5", `insert notes {"title":"g","due":3}`); err != nil {
			t.Errorf("globex's insert: %v", err)
		}
		if _, err := dbCall(g, ann, "m-6", `count notes`); abi.CodeOf(err) != abi.CodeDenied {
			t.Errorf("acme's caller of globex's module: %v, want denied", err)
		}
	})
}

func asHostError(err error, he **host.Error) bool {
	e, ok := err.(*host.Error)
	if ok {
		*he = e
	}
	return ok
}

// TestDBEveryTransport: the db family through every transport (the moat
// import, the device file, Extism's moat_call, a native worker's pipe),
// each reaching the same gate: the granted model works, the ungranted one
// and an unrequested one are denied, and both decisions are audited with
// the model.
func TestDBEveryTransport(t *testing.T) {
	t.Parallel()
	testenv.Slow(t, "the db ops on every transport; TestDBGoGuest keeps one")
	h := policyHost(t, dbProfile)
	ctx := context.Background()
	models := `
capabilities: {db: [notes, secrets]}
models:
  notes: {fields: {title: {type: string, required: true}}}
  secrets: {fields: {text: {type: string}}}
`
	plugin, err := loadWithManifest(t, h, "name: db-plugin\nversion: 1.0.0\nactions: [{name: call}]"+models)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := h.Load(ctx, testwasm.BuildGo(t, "./testdata/devcmd", false), host.LoadOptions{
		Manifest: mustManifest(t, "name: db-cmd\nversion: 1.0.0\nkind: wasi-command"+models)})
	if err != nil {
		t.Fatal(err)
	}
	extism := map[string]*host.Module{}
	for _, op := range []string{abi.OpDBInsert, abi.OpDBCount} {
		extism[op], err = h.Load(ctx, testwasm.BuildExtism(t, "moatops"), host.LoadOptions{Config: map[string]string{"op": op},
			Manifest: mustManifest(t, "name: db-extism-"+strings.TrimPrefix(op, "db.")+"\nkind: extism\nversion: 1.0.0\nactions: [{name: op}]"+models)})
		if err != nil {
			t.Fatal(err)
		}
	}
	var native *host.Module
	if nativeReady() == "" {
		native, err = h.Load(ctx, nil, host.LoadOptions{Native: pyPlugin(t), Manifest: mustManifest(t,
			"name: db-native\nversion: 1.0.0\nkind: native\ncommand: [python3, main.py]\nactions: [{name: call}]"+models)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { native.Close(ctx) })
	}
	type outcome struct {
		reply string
		code  abi.Code
	}
	transports := map[string]func(t *testing.T, cid, op, req string) outcome{
		"import": func(t *testing.T, cid, op, req string) outcome {
			res, err := plugin.Invoke(ctx, host.Request{Action: "call", Input: []byte(op + " " + req), Principal: ann, CorrelationID: cid})
			if err != nil {
				return outcome{code: abi.CodeOf(err)}
			}
			return outcome{reply: string(res.Output)}
		},
		"device file": func(t *testing.T, cid, op, req string) outcome {
			var out strings.Builder
			if _, err := cmd.Run(ctx, host.RunRequest{Args: []string{"call", op, req}, Ops: true, Stdout: &out, Principal: ann, CorrelationID: cid}); err != nil {
				t.Fatalf("run: %v", err)
			}
			var reply struct {
				Resp  json.RawMessage `json:"resp"`
				Error *abi.Error      `json:"error"`
			}
			if err := json.Unmarshal([]byte(out.String()), &reply); err != nil {
				t.Fatalf("reply %q: %v", out.String(), err)
			}
			if reply.Error != nil {
				return outcome{code: reply.Error.Code}
			}
			return outcome{reply: string(reply.Resp)}
		},
		"extism moat_call": func(t *testing.T, cid, op, req string) outcome {
			res, err := extism[op].Invoke(ctx, host.Request{Action: "op", Input: []byte(req), Principal: ann, CorrelationID: cid})
			if err == nil {
				return outcome{reply: string(res.Output)}
			}
			if c := abi.CodeOf(err); c != abi.CodeGuestError {
				return outcome{code: c}
			}
			_, rest, _ := strings.Cut(err.Error(), op+": ")
			code, _, _ := strings.Cut(rest, ":")
			return outcome{code: abi.Code(code)}
		},
		"pipe": func(t *testing.T, cid, op, req string) outcome {
			if native == nil {
				t.Skip(nativeReady())
			}
			res, err := native.Invoke(ctx, host.Request{Action: "call", Input: []byte(`["` + op + `", ` + req + `]`), Principal: ann, CorrelationID: cid})
			if err != nil {
				return outcome{code: abi.CodeOf(err)}
			}
			return outcome{reply: string(res.Output)}
		},
	}
	for name, call := range transports {
		t.Run(name, func(t *testing.T) {
			cid := "db-" + strings.ReplaceAll(name, " ", "-")
			got := call(t, cid+"-insert", abi.OpDBInsert, `{"model":"notes","doc":{"title":"hi"}}`)
			var ins abi.DBInsertResponse
			if got.code != "" || json.Unmarshal([]byte(got.reply), &ins) != nil || len(ins.ID) != 28 || ins.Version != 1 {
				t.Fatalf("db.insert = %+v", got)
			}
			evs := auditEvents(t, h, audit.Filter{CorrelationID: cid + "-insert", Kind: audit.KindOp})
			if len(evs) != 1 || evs[0].Decision != audit.Allow || evs[0].MutationID == "" || evs[0].Attrs["target"] != "notes" || evs[0].Attrs["id"] != ins.ID {
				t.Errorf("db.insert's audit: %+v", evs)
			}
			want := `{"count":1}`
			if name == "extism moat_call" {
				want = `{"count":0}` // db.count runs in another module, which has its own documents
			}
			if got := call(t, cid+"-count", abi.OpDBCount, `{"model":"notes"}`); got.reply != want {
				t.Errorf("db.count = %+v, want %s", got, want)
			}
			for _, tt := range []struct{ model, rule string }{{"secrets", "profile test: default grant"}, {"board", "manifest capabilities"}} {
				c := cid + "-" + tt.model
				if got := call(t, c, abi.OpDBInsert, `{"model":"`+tt.model+`","doc":{"text":"x"}}`); got.code != abi.CodeDenied {
					t.Errorf("db.insert into %s = %+v, want denied", tt.model, got)
				}
				evs := auditEvents(t, h, audit.Filter{CorrelationID: c, Kind: audit.KindOp})
				if len(evs) != 1 || evs[0].Decision != audit.Deny || evs[0].Rule != tt.rule || evs[0].Attrs["target"] != tt.model {
					t.Errorf("the denial of %s: %+v", tt.model, evs)
				}
			}
		})
	}
}
