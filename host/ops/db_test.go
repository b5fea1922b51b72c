package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	_ "github.com/moat-sandbox/moat/host/store/postgres"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/policy"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// dbBackends opens an empty store on each backend: SQLite, and
// PostgreSQL when pgtest has a server (skipped otherwise, failed under
// MOAT_REQUIRE_TOOLS=1).
func dbBackends(t *testing.T, run func(t *testing.T, s *store.Store)) {
	for _, b := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return t.TempDir() }},
		{"postgres", func(t *testing.T) string { return pgtest.Database(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			s, err := store.Open(context.Background(), b.url(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			run(t, s)
		})
	}
}

// dbModels attaches the db family's view of module "app" loaded for
// owner ("" for every organization) with the notes model (scope:
// user) and a model scoped by organization, compiled and migrated by the
// family's Attach, as a host's load does.
func dbModels(t *testing.T, s *store.Store, owner string) *ops.Views {
	t.Helper()
	return attachViews(t, s, owner, `name: app
version: 1.0.0
capabilities: {db: [notes, board]}
models:
  notes:
    scope: user
    fields:
      title: {type: string, required: true, max: 200}
      body:  {type: string}
      tags:  {type: "[string]"}
      due:   {type: time}
      done:  {type: bool}
    indexes: [[done, due], [tags]]
  board:
    fields:
      text: {type: string}
`)
}

// attachViews attaches every family's view of the module manifest
// declares, loaded for owner, on store s, through Views.Attach as a
// host's load does; its limits are the manifest's.
func attachViews(t *testing.T, s *store.Store, owner, manifest string) *ops.Views {
	t.Helper()
	mf, err := policy.ParseManifest("moat.yaml", []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	var v ops.Views
	info := ops.ModuleInfo{Name: mf.Name, Org: owner, Manifest: mf, Evaluation: &policy.Evaluation{Module: mf.Name, Limits: mf.Limits},
		Actions: func() []string {
			var names []string
			for _, a := range mf.Actions {
				names = append(names, a.Name)
			}
			return names
		}}
	if err := v.Attach(context.Background(), ops.Core{Store: s}, nil, info); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Detach)
	return &v
}

// caller is one principal's invocation environment on module "app".
func caller(s *store.Store, views *ops.Views, user, org string) *ops.Env {
	env := &ops.Env{Module: "app", Store: s, Views: views, Logger: slog.New(slog.DiscardHandler)}
	env.Begin(context.Background(), "act", policy.Principal{User: user, Org: org}, "corr-"+user+"-"+org)
	return env
}

// call runs op with the raw request through Dispatch and a gate granting
// what grant lists (a model name each), and returns the raw reply.
func call(env *ops.Env, grant []string, op, req string) (string, error) {
	o, ok := ops.Lookup([]byte(op))
	if !ok {
		return "", fmt.Errorf("no op %s", op)
	}
	g := &gate{allow: func(_, target string) bool {
		for _, m := range grant {
			if m == target {
				return true
			}
		}
		return false
	}}
	reply, err := ops.Dispatch(env, g, o, []byte(req))
	return string(reply), err
}

func codeOf(err error) abi.Code {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// TestDBOps runs the family's JSON contract through Dispatch, on both
// backends: each op's request and reply as the issue fixes them, the
// scope taken from the invocation (never the request), the gate asked
// with the model, and the document's id left for the audit record.
func TestDBOps(t *testing.T) {
	dbBackends(t, func(t *testing.T, s *store.Store) {
		models := dbModels(t, s, "")
		ann, bob, eve := caller(s, models, "ann", "acme"), caller(s, models, "bob", "acme"), caller(s, models, "ann", "evil")
		grant := []string{"notes", "board"}

		reply, err := call(ann, grant, abi.OpDBInsert, `{"model":"notes","doc":{"title":"buy milk","tags":["home"],"due":"2026-03-01T10:00:00Z","done":false}}`)
		if err != nil {
			t.Fatal(err)
		}
		var ins struct {
			ID      string `json:"id"`
			Version int64  `json:"version"`
		}
		if err := json.Unmarshal([]byte(reply), &ins); err != nil || ins.Version != 1 || len(ins.ID) != 28 {
			t.Fatalf("db.insert reply %s: %v", reply, err)
		}
		if ann.Subject() != ins.ID {
			t.Errorf("subject after insert = %q, want the id", ann.Subject())
		}
		id := ins.ID

		reply, err = call(ann, grant, abi.OpDBGet, `{"model":"notes","id":"`+id+`"}`)
		var got map[string]json.RawMessage
		if err != nil || json.Unmarshal([]byte(reply), &got) != nil {
			t.Fatalf("db.get = %s, %v", reply, err)
		}
		for _, k := range []string{"found", "id", "version", "doc", "owner", "created", "updated"} {
			if _, ok := got[k]; !ok {
				t.Errorf("db.get reply %s lacks %q", reply, k)
			}
		}
		if string(got["found"]) != "true" || string(got["owner"]) != `"ann"` ||
			string(got["doc"]) != `{"done":false,"due":"2026-03-01T10:00:00.000Z","tags":["home"],"title":"buy milk"}` {
			t.Errorf("db.get reply %s", reply)
		}

		// The request names no scope: extra fields claiming one are
		// ignored, and the invocation's scope applies.
		for _, env := range []*ops.Env{bob, eve} {
			reply, err := call(env, grant, abi.OpDBGet, `{"model":"notes","id":"`+id+`","org":"acme","owner":"ann","user":"ann"}`)
			if err != nil || reply != `{"found":false}` {
				t.Errorf("%s@%s db.get of ann's note = %s, %v; want {\"found\":false}", env.Principal.User, env.Principal.Org, reply, err)
			}
			reply, err = call(env, grant, abi.OpDBQuery, `{"model":"notes","where":[["tags","contains","home"]],"org":"acme"}`)
			if err != nil || reply != `{"docs":[]}` {
				t.Errorf("%s@%s db.query = %s, %v", env.Principal.User, env.Principal.Org, reply, err)
			}
			reply, err = call(env, grant, abi.OpDBCount, `{"model":"notes","where":[["done","=",false]]}`)
			if err != nil || reply != `{"count":0}` {
				t.Errorf("%s@%s db.count = %s, %v", env.Principal.User, env.Principal.Org, reply, err)
			}
			if _, err := call(env, grant, abi.OpDBUpdate, `{"model":"notes","id":"`+id+`","set":{"title":"mine"}}`); codeOf(err) != abi.CodeNotFound {
				t.Errorf("%s@%s db.update of ann's note: %v, want not_found", env.Principal.User, env.Principal.Org, err)
			}
			reply, err = call(env, grant, abi.OpDBDelete, `{"model":"notes","id":"`+id+`"}`)
			if err != nil || reply != `{"deleted":false}` {
				t.Errorf("%s@%s db.delete = %s, %v", env.Principal.User, env.Principal.Org, reply, err)
			}
		}

		reply, err = call(ann, grant, abi.OpDBQuery, `{"model":"notes","where":[["done","=",false],["due","<","2027-01-01T00:00:00Z"]],"order":["-due"],"limit":10}`)
		var q abi.DBQueryResponse
		if err != nil || json.Unmarshal([]byte(reply), &q) != nil || len(q.Docs) != 1 || q.Docs[0].ID != id || q.Next != "" ||
			!strings.Contains(reply, `"docs":[{"id":"`+id+`","version":1,"doc":{`) {
			t.Errorf("db.query = %s, %v", reply, err)
		}
		reply, err = call(ann, grant, abi.OpDBUpdate, `{"model":"notes","id":"`+id+`","set":{"done":true},"unset":["due"],"version":1}`)
		if err != nil || reply != `{"version":2}` || ann.Subject() != id {
			t.Errorf("db.update = %s, %v (subject %q)", reply, err, ann.Subject())
		}
		if _, err := call(ann, grant, abi.OpDBUpdate, `{"model":"notes","id":"`+id+`","set":{"done":false},"version":1}`); codeOf(err) != abi.CodeConflict {
			t.Errorf("db.update at a stale version: %v, want conflict", err)
		}
		reply, err = call(ann, grant, abi.OpDBCount, `{"model":"notes"}`)
		if err != nil || reply != `{"count":1}` {
			t.Errorf("db.count = %s, %v", reply, err)
		}
		// Org scope: bob sees the board note ann wrote.
		if _, err := call(ann, grant, abi.OpDBInsert, `{"model":"board","doc":{"text":"hello team"}}`); err != nil {
			t.Fatal(err)
		}
		reply, err = call(bob, grant, abi.OpDBQuery, `{"model":"board"}`)
		if err != nil || !strings.Contains(reply, `"owner":"ann"`) {
			t.Errorf("bob's db.query of the board = %s, %v", reply, err)
		}
		reply, err = call(ann, grant, abi.OpDBDelete, `{"model":"notes","id":"`+id+`"}`)
		if err != nil || reply != `{"deleted":true}` {
			t.Errorf("db.delete = %s, %v", reply, err)
		}

		// The gate decides on the model, before anything is stored.
		before, _ := s.DBUsage(context.Background(), "acme", "app")
		for _, op := range []string{abi.OpDBInsert, abi.OpDBGet, abi.OpDBQuery, abi.OpDBUpdate, abi.OpDBDelete, abi.OpDBCount} {
			_, err := call(ann, []string{"board"}, op, `{"model":"notes","id":"`+strings.Repeat("0", 28)+`","doc":{"title":"x"},"set":{"title":"y"}}`)
			if codeOf(err) != abi.CodeDenied {
				t.Errorf("%s on an ungranted model: %v, want denied", op, err)
			}
		}
		if after, _ := s.DBUsage(context.Background(), "acme", "app"); after != before {
			t.Errorf("refused ops changed the usage: %+v → %+v", before, after)
		}
		// A granted model the module does not declare.
		_, err = call(ann, []string{"secrets"}, abi.OpDBInsert, `{"model":"secrets","doc":{}}`)
		if codeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), `model "secrets" is not declared by module app`) || !strings.Contains(err.Error(), "board, notes") {
			t.Errorf("undeclared model: %v", err)
		}
	})
}

// A module loaded for one organization serves only that organization's
// callers in the db family, whatever else let them call it.
func TestDBModelsOwner(t *testing.T) {
	dbBackends(t, func(t *testing.T, s *store.Store) {
		models := dbModels(t, s, "acme")
		if _, err := call(caller(s, models, "ann", "acme"), []string{"board"}, abi.OpDBInsert, `{"model":"board","doc":{"text":"x"}}`); err != nil {
			t.Fatal(err)
		}
		_, err := call(caller(s, models, "ann", "evil"), []string{"board"}, abi.OpDBQuery, `{"model":"board"}`)
		if codeOf(err) != abi.CodeDenied {
			t.Errorf("another organization's caller: %v, want denied", err)
		}
	})
}

// Requests shaped to break the decoder or the store: refused with
// invalid_argument or too_large, never an internal error or a panic.
func TestDBOpsHostile(t *testing.T) {
	dbBackends(t, func(t *testing.T, s *store.Store) {
		models := dbModels(t, s, "")
		ann := caller(s, models, "ann", "acme")
		grant := []string{"notes"}
		deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
		// A model name built to break SQL, even where a grant would let
		// it through the gate, is not a declared model.
		for _, name := range []string{`a'); DROP TABLE db_documents--`, `notes' OR '1'='1`, "notes\u0000", `$.x`, `"`} {
			req, _ := json.Marshal(map[string]any{"model": name, "doc": map[string]any{"title": "x"}})
			var decoded struct{ Model string }
			json.Unmarshal(req, &decoded)
			_, err := call(ann, []string{decoded.Model}, abi.OpDBInsert, string(req))
			if codeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "is not declared") {
				t.Errorf("model %q: %v, want invalid_argument (not declared)", name, err)
			}
		}
		for _, tt := range []struct {
			op, req string
			code    abi.Code
		}{
			{abi.OpDBQuery, `{"model":"notes","where":[["title","="]]}`, abi.CodeInvalidArgument},
			{abi.OpDBQuery, `{"model":"notes","where":[[1,"=","x"]]}`, abi.CodeInvalidArgument},
			{abi.OpDBQuery, `{"model":"notes","where":["title","=","x"]}`, abi.CodeInvalidArgument},
			{abi.OpDBQuery, `{"model":"notes","where":[["title","=","x","extra"]]}`, abi.CodeInvalidArgument},
			{abi.OpDBQuery, `{"model":"notes","where":[["title","=",` + deep + `]]}`, abi.CodeInvalidArgument},
			{abi.OpDBQuery, `{"model":"notes","order":[1]}`, abi.CodeInvalidArgument},
			{abi.OpDBQuery, `{"model":"notes","limit":1e30}`, abi.CodeInvalidArgument},
			{abi.OpDBInsert, `{"model":"notes","doc":` + deep + `}`, abi.CodeInvalidArgument},
			{abi.OpDBInsert, `{"model":"notes","doc":"{\"title\":\"x\"}"}`, abi.CodeInvalidArgument},
			{abi.OpDBInsert, `{"model":"notes","doc":{"title":"` + strings.Repeat("x", 300<<10) + `"}}`, abi.CodeTooLarge},
			{abi.OpDBInsert, `{"model":"notes"}`, abi.CodeInvalidArgument},
			{abi.OpDBUpdate, `{"model":"notes","id":"` + strings.Repeat("0", 28) + `","set":"x"}`, abi.CodeInvalidArgument},
			{abi.OpDBUpdate, `{"model":"notes","id":"` + strings.Repeat("0", 28) + `","set":{"title":"x"},"version":-1}`, abi.CodeInvalidArgument},
			{abi.OpDBGet, `{"model":"notes","id":"../../etc/passwd"}`, abi.CodeInvalidArgument},
			{abi.OpDBGet, `{"model":"notes","id":"` + strings.Repeat("0", 27) + `'"}`, abi.CodeInvalidArgument},
			{abi.OpDBDelete, `{"model":"notes","id":1}`, abi.CodeInvalidArgument},
		} {
			_, err := call(ann, grant, tt.op, tt.req)
			if codeOf(err) != tt.code {
				t.Errorf("%s %.120s: %v, want %s", tt.op, tt.req, err, tt.code)
			}
		}
	})
}
