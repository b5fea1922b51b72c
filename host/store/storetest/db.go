package storetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// The db family's conformance tests: the contract of every op, scoping
// through every op, validation naming the field, quotas, versions,
// migrations, and hostile input.

func f64(v float64) *float64 { return &v }

// notesModel is the model of the issue: scope user, an index on two
// fields and one on an array.
var notesModel = store.Model{
	Name:  "notes",
	Scope: abi.DBScopeUser,
	Fields: map[string]store.Field{
		"title": {Type: abi.DBString, Required: true, Max: f64(200)},
		"body":  {Type: abi.DBString},
		"tags":  {Type: "[string]"},
		"due":   {Type: abi.DBTime},
		"done":  {Type: abi.DBBool},
	},
	Indexes: [][]string{{"done", "due"}, {"tags"}},
}

// itemsModel is scoped by organization and holds every other type.
var itemsModel = store.Model{
	Name: "items",
	Fields: map[string]store.Field{
		"name":   {Type: abi.DBString, Required: true},
		"n":      {Type: abi.DBInt, Max: f64(1000)},
		"price":  {Type: abi.DBNumber},
		"at":     {Type: abi.DBTime},
		"meta":   {Type: abi.DBObject},
		"counts": {Type: "[int]", Max: f64(5)},
		"flags":  {Type: "[bool]"},
		"sizes":  {Type: "[number]"},
		"when":   {Type: "[time]"},
		"labels": {Type: "[string]"},
	},
	Indexes: [][]string{{"n"}, {"price", "name"}, {"counts"}},
}

// looseModel keeps fields it does not declare.
var looseModel = store.Model{Name: "loose", Additional: true, Fields: map[string]store.Field{"kind": {Type: abi.DBString}}}

func compile(t *testing.T, m store.Model) *store.Schema {
	t.Helper()
	sc, err := store.CompileModel(m)
	if err != nil {
		t.Fatalf("CompileModel(%s): %v", m.Name, err)
	}
	return sc
}

// dbStore opens a store with the test models migrated for every
// organization (owner "") of module "app".
func (su suite) dbStore(t *testing.T) (*store.Store, map[string]*store.Schema) {
	t.Helper()
	s := su.open(t)
	models := map[string]*store.Schema{}
	var list []*store.Schema
	for _, m := range []store.Model{notesModel, itemsModel, looseModel} {
		sc := compile(t, m)
		models[m.Name] = sc
		list = append(list, sc)
	}
	if err := s.DBMigrate(context.Background(), "", "app", list); err != nil {
		t.Fatalf("DBMigrate: %v", err)
	}
	return s, models
}

var (
	ann   = store.DBScope{Org: "acme", Module: "app", User: "ann"}
	bob   = store.DBScope{Org: "acme", Module: "app", User: "bob"}
	eve   = store.DBScope{Org: "evil", Module: "app", User: "ann"} // another org, same user name
	other = store.DBScope{Org: "acme", Module: "other", User: "ann"}
)

func insert(t *testing.T, s *store.Store, sc store.DBScope, m *store.Schema, doc string) string {
	t.Helper()
	id, v, err := s.DBInsert(context.Background(), sc, m, []byte(doc), store.DBQuota{})
	if err != nil {
		t.Fatalf("DBInsert(%s, %s): %v", m.Name(), doc, err)
	}
	if v != 1 {
		t.Fatalf("DBInsert version = %d, want 1", v)
	}
	return id
}

// dbErr checks that err is an *abi.Error of code whose message says each
// of says.
func dbErr(t *testing.T, what string, err error, code abi.Code, says ...string) {
	t.Helper()
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != code {
		t.Errorf("%s: error = %v, want *abi.Error %s", what, err, code)
		return
	}
	for _, s := range says {
		if !strings.Contains(ae.Message, s) {
			t.Errorf("%s: message %q does not say %q", what, ae.Message, s)
		}
	}
}

func sameJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: stored document %q is not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: want %q: %v", what, want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("%s: document = %s, want %s", what, got, want)
	}
}

func (su suite) testDBRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, m := su.dbStore(t)
	notes := m["notes"]
	before := time.Now().Add(-time.Second)
	id := insert(t, s, ann, notes, `{"title":"buy milk","tags":["home","shop"],"due":"2026-03-01T10:00:00+02:00","done":false}`)
	if len(id) != 28 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Errorf("id %q is not 28 lowercase hex digits", id)
	}
	doc, found, err := s.DBGet(ctx, ann, notes, id)
	if err != nil || !found {
		t.Fatalf("DBGet = %v, %v", found, err)
	}
	// The stored form: sorted keys, the time in UTC at millisecond precision.
	if want := `{"done":false,"due":"2026-03-01T08:00:00.000Z","tags":["home","shop"],"title":"buy milk"}`; string(doc.Doc) != want {
		t.Errorf("stored document = %s, want %s", doc.Doc, want)
	}
	created, err := time.Parse(time.RFC3339, doc.Created)
	if err != nil || doc.Owner != "ann" || doc.Version != 1 || doc.ID != id || doc.Created != doc.Updated ||
		created.Before(before) || created.After(time.Now().Add(time.Second)) || !strings.HasSuffix(doc.Created, "Z") {
		t.Errorf("DBGet = %+v (created %v, %v)", doc, created, err)
	}

	v, err := s.DBUpdate(ctx, ann, notes, id, []byte(`{"done":true,"body":"2 litres"}`), []string{"due"}, 1, store.DBQuota{})
	if err != nil || v != 2 {
		t.Fatalf("DBUpdate = %d, %v; want 2", v, err)
	}
	doc, _, _ = s.DBGet(ctx, ann, notes, id)
	sameJSON(t, "after update", doc.Doc, `{"title":"buy milk","tags":["home","shop"],"done":true,"body":"2 litres"}`)
	if doc.Version != 2 || doc.Created == "" || doc.Updated < doc.Created {
		t.Errorf("after update: %+v", doc)
	}
	// Without a version, an update applies to whatever is stored.
	if v, err := s.DBUpdate(ctx, ann, notes, id, []byte(`{"title":"buy oat milk"}`), nil, 0, store.DBQuota{}); err != nil || v != 3 {
		t.Errorf("unconditional DBUpdate = %d, %v; want 3", v, err)
	}
	if _, err := s.DBUpdate(ctx, ann, notes, id, []byte(`{"title":"x"}`), nil, 2, store.DBQuota{}); err == nil {
		t.Error("an update at a stale version succeeded")
	} else {
		dbErr(t, "stale update", err, abi.CodeConflict, "version 2")
	}
	if ok, err := s.DBDelete(ctx, ann, notes, id, 2); err == nil || ok {
		t.Errorf("delete at a stale version = %v, %v", ok, err)
	} else {
		dbErr(t, "stale delete", err, abi.CodeConflict)
	}
	if ok, err := s.DBDelete(ctx, ann, notes, id, 3); err != nil || !ok {
		t.Fatalf("DBDelete = %v, %v", ok, err)
	}
	if _, found, err := s.DBGet(ctx, ann, notes, id); err != nil || found {
		t.Errorf("DBGet after delete = %v, %v", found, err)
	}
	if ok, err := s.DBDelete(ctx, ann, notes, id, 0); err != nil || ok {
		t.Errorf("second DBDelete = %v, %v", ok, err)
	}
	_, err = s.DBUpdate(ctx, ann, notes, id, []byte(`{"done":true}`), nil, 0, store.DBQuota{})
	dbErr(t, "update of a deleted document", err, abi.CodeNotFound)

	// Every type round-trips in its canonical form.
	items := m["items"]
	id = insert(t, s, ann, items, `{"name":"x","n":3e2,"price":1.50,"at":"2026-01-02T03:04:05.123456789Z","meta":{"a":[1,{"b":null}],"c":"d"},
		"counts":[1,2.0],"flags":[true,false],"sizes":[0.5,1e21],"when":["2026-01-02T00:00:00-01:00"],"labels":[]}`)
	doc, _, _ = s.DBGet(ctx, bob, items, id) // scope org: bob sees ann's
	if want := `{"at":"2026-01-02T03:04:05.123Z","counts":[1,2],"flags":[true,false],"labels":[],"meta":{"a":[1,{"b":null}],"c":"d"},"n":300,"name":"x","price":1.5,"sizes":[0.5,1e+21],"when":["2026-01-02T01:00:00.000Z"]}`; string(doc.Doc) != want {
		t.Errorf("items document = %s\nwant %s", doc.Doc, want)
	}
	if doc.Owner != "ann" {
		t.Errorf("owner = %q, want ann", doc.Owner)
	}

	// An update that leaves an indexed array alone keeps it findable.
	if _, err := s.DBUpdate(ctx, ann, items, id, []byte(`{"name":"y"}`), nil, 0, store.DBQuota{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []abi.DBCondition{cond(t, "counts", "contains", 2), cond(t, "counts", "contains", 1)} {
		if n, err := s.DBCount(ctx, ann, items, []abi.DBCondition{c}); err != nil || n != 1 {
			t.Errorf("after an update, count %v = %d, %v; want 1", c, n, err)
		}
	}
	n, err := s.DBCount(ctx, ann, items, nil)
	if err != nil || n != 1 {
		t.Errorf("DBCount = %d, %v", n, err)
	}
	u, err := s.DBUsage(ctx, "acme", "app")
	if err != nil || u.Rows != 1 || u.Bytes != int64(len(doc.Doc)) {
		t.Errorf("DBUsage = %+v, %v; want 1 row of %d bytes", u, err, len(doc.Doc))
	}
}

func (su suite) testDBValidation(t *testing.T) {
	ctx := context.Background()
	s, m := su.dbStore(t)
	deep := strings.Repeat(`{"a":`, abi.MaxDBDepth+1) + "1" + strings.Repeat("}", abi.MaxDBDepth+1)
	many := `{"name":"x","meta":{"a":[` + strings.TrimSuffix(strings.Repeat("1,", abi.MaxDBDocValues), ",") + `]}}`
	for _, tt := range []struct {
		name, model, doc string
		code             abi.Code
		says             []string
	}{
		{"missing required", "notes", `{"body":"x"}`, abi.CodeInvalidArgument, []string{"field title", "required"}},
		{"string as number", "notes", `{"title":5}`, abi.CodeInvalidArgument, []string{"field title", "must be a string"}},
		{"over max", "notes", `{"title":"` + strings.Repeat("é", 201) + `"}`, abi.CodeInvalidArgument, []string{"field title", "201 characters", "200"}},
		{"at max", "notes", `{"title":"` + strings.Repeat("é", 200) + `"}`, "", nil},
		{"unknown field", "notes", `{"title":"x","colour":"red"}`, abi.CodeInvalidArgument, []string{"field colour", "not declared", "additional: true"}},
		{"null", "notes", `{"title":"x","body":null}`, abi.CodeInvalidArgument, []string{"field body", "null"}},
		{"NUL in a string", "notes", `{"title":"a\u0000b"}`, abi.CodeInvalidArgument, []string{"field title", "NUL"}},
		{"bad time", "notes", `{"title":"x","due":"tomorrow"}`, abi.CodeInvalidArgument, []string{"field due", "RFC 3339"}},
		{"time out of range", "notes", `{"title":"x","due":"0000-01-01T00:00:00+01:00"}`, abi.CodeInvalidArgument, []string{"field due", "0000 to 9999"}},
		{"bool as string", "notes", `{"title":"x","done":"yes"}`, abi.CodeInvalidArgument, []string{"field done", "true or false"}},
		{"array of wrong type", "notes", `{"title":"x","tags":["a",1]}`, abi.CodeInvalidArgument, []string{"field tags[1]", "must be a string"}},
		{"null in array", "notes", `{"title":"x","tags":[null]}`, abi.CodeInvalidArgument, []string{"field tags[0]", "null"}},
		{"not an array", "notes", `{"title":"x","tags":"a"}`, abi.CodeInvalidArgument, []string{"field tags", "JSON array"}},
		{"not an object", "notes", `["title"]`, abi.CodeInvalidArgument, []string{"JSON object"}},
		{"two values", "notes", `{"title":"x"} {"title":"y"}`, abi.CodeInvalidArgument, []string{"more than one"}},
		{"not JSON", "notes", `{"title":`, abi.CodeInvalidArgument, []string{"not valid JSON"}},
		{"empty", "notes", ``, abi.CodeInvalidArgument, []string{"doc is missing"}},
		{"invalid UTF-8", "notes", "{\"title\":\"\xff\xfe\"}", abi.CodeInvalidArgument, []string{"UTF-8"}},
		{"int with a fraction", "items", `{"name":"x","n":1.5}`, abi.CodeInvalidArgument, []string{"field n", "not an integer"}},
		{"int over max", "items", `{"name":"x","n":1001}`, abi.CodeInvalidArgument, []string{"field n", "1000"}},
		{"int unsafe", "items", `{"name":"x","counts":[9007199254740993]}`, abi.CodeInvalidArgument, []string{"field counts[0]", "9007199254740991"}},
		{"number overflows", "items", `{"name":"x","price":1e400}`, abi.CodeInvalidArgument, []string{"field price", "float64"}},
		{"number in free JSON overflows", "items", `{"name":"x","meta":{"v":-1e999}}`, abi.CodeInvalidArgument, []string{"field meta.v", "float64"}},
		{"object as array", "items", `{"name":"x","meta":[]}`, abi.CodeInvalidArgument, []string{"field meta", "JSON object"}},
		{"too many items", "items", `{"name":"x","counts":[1,2,3,4,5,6]}`, abi.CodeInvalidArgument, []string{"field counts", "6 items", "5"}},
		{"NUL in a free key", "items", `{"name":"x","meta":{"a\u0000":1}}`, abi.CodeInvalidArgument, []string{"NUL"}},
		{"too deep", "loose", deep, abi.CodeInvalidArgument, []string{"nests 9 deep", "8"}},
		{"deepest allowed", "loose", strings.Repeat(`{"a":`, abi.MaxDBDepth) + "1" + strings.Repeat("}", abi.MaxDBDepth), "", nil},
		{"too many values", "items", many, abi.CodeTooLarge, []string{"more than 10000 values"}},
		{"too large", "loose", `{"kind":"` + strings.Repeat("a", abi.MaxDBDocBytes) + `"}`, abi.CodeTooLarge, []string{"262144"}},
		{"undeclared kept", "loose", `{"kind":"k","anything":{"x":[1,"y",null]}}`, "", nil},
		{"declared still checked", "loose", `{"kind":1}`, abi.CodeInvalidArgument, []string{"field kind", "must be a string"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.DBInsert(ctx, ann, m[tt.model], []byte(tt.doc), store.DBQuota{})
			if tt.code == "" {
				if err != nil {
					t.Errorf("DBInsert = %v, want success", err)
				}
				return
			}
			dbErr(t, "DBInsert", err, tt.code, append(tt.says, "db.insert", "model "+tt.model)...)
		})
	}

	notes := m["notes"]
	id := insert(t, s, ann, notes, `{"title":"t"}`)
	for _, tt := range []struct {
		name  string
		set   string
		unset []string
		says  []string
	}{
		{"unset required", ``, []string{"title"}, []string{"field title", "required"}},
		{"set and unset", `{"body":"x"}`, []string{"body"}, []string{"field body", "both set and unset"}},
		{"unset a non-name", ``, []string{"a'b"}, []string{`field "a'b"`, "not a field name"}},
		{"set wrong type", `{"done":1}`, nil, []string{"field done", "true or false"}},
		{"set undeclared", `{"colour":"red"}`, nil, []string{"field colour", "not declared"}},
		{"set not an object", `[1]`, nil, []string{"set must be a JSON object"}},
		{"nothing", ``, nil, []string{"both empty"}},
		{"set over max", `{"title":"` + strings.Repeat("x", 201) + `"}`, nil, []string{"field title", "201"}},
	} {
		t.Run("update "+tt.name, func(t *testing.T) {
			_, err := s.DBUpdate(ctx, ann, notes, id, []byte(tt.set), tt.unset, 0, store.DBQuota{})
			dbErr(t, "DBUpdate", err, abi.CodeInvalidArgument, append(tt.says, "db.update")...)
		})
	}
	doc, _, _ := s.DBGet(ctx, ann, notes, id)
	if doc.Version != 1 || string(doc.Doc) != `{"title":"t"}` {
		t.Errorf("refused updates changed the document: %+v", doc)
	}
	for _, bad := range []string{"", "x", strings.Repeat("g", 28), strings.ToUpper(id), id + "0", "' OR 1=1 --"} {
		_, _, err := s.DBGet(ctx, ann, notes, bad)
		dbErr(t, fmt.Sprintf("DBGet(%q)", bad), err, abi.CodeInvalidArgument, "not a document id")
	}
	for _, sc := range []store.DBScope{{Module: "app", User: "u"}, {Org: "o", User: "u"}, {Org: "o", Module: "app"}} {
		_, _, err := s.DBInsert(ctx, sc, notes, []byte(`{"title":"t"}`), store.DBQuota{})
		dbErr(t, fmt.Sprintf("scope %+v", sc), err, abi.CodeInvalidArgument)
	}
}

// Another organization, another user of a user-scoped model and another
// module see nothing of a document, through every op, query filters and
// count included; update and delete by id leave it as it was.
func (su suite) testDBScoping(t *testing.T) {
	ctx := context.Background()
	s, m := su.dbStore(t)
	notes, items := m["notes"], m["items"]
	secret := insert(t, s, ann, notes, `{"title":"ann's secret","tags":["x"],"done":false,"due":"2026-01-01T00:00:00Z"}`)
	shared := insert(t, s, ann, items, `{"name":"acme's item","n":7,"labels":["x"]}`)
	bobs := insert(t, s, bob, notes, `{"title":"bob's note","tags":["x"],"done":false}`)

	type view struct {
		sc      store.DBScope
		m       *store.Schema
		id      string
		visible bool
	}
	for _, v := range []view{
		{ann, notes, secret, true},
		{bob, notes, secret, false},   // user scope: another user of the org
		{eve, notes, secret, false},   // another org, same user name
		{other, notes, secret, false}, // another module
		{bob, items, shared, true},    // org scope: another user of the org
		{eve, items, shared, false},
		{other, items, shared, false},
		{bob, notes, bobs, true},
		{ann, notes, bobs, false},
	} {
		what := fmt.Sprintf("%s/%s/%s on %s", v.sc.Org, v.sc.Module, v.sc.User, v.m.Name())
		_, found, err := s.DBGet(ctx, v.sc, v.m, v.id)
		if err != nil || found != v.visible {
			t.Errorf("%s: DBGet found=%v err=%v, want %v", what, found, err, v.visible)
		}
		filters := map[string][][]abi.DBCondition{
			"notes": {nil, {cond(t, "tags", "contains", "x")}, {cond(t, "done", "=", false)}, {cond(t, "title", "prefix", "")}},
			"items": {nil, {cond(t, "labels", "contains", "x")}, {cond(t, "n", ">=", 0)}, {cond(t, "name", "contains", "item")}},
		}
		for _, where := range filters[v.m.Name()] {
			docs, _, err := s.DBQuery(ctx, v.sc, v.m, store.DBQuery{Where: where})
			if err != nil {
				t.Fatalf("%s: DBQuery: %v", what, err)
			}
			if slices.ContainsFunc(docs, func(d abi.DBDoc) bool { return d.ID == v.id }) != v.visible {
				t.Errorf("%s: DBQuery %v returned %d documents; the document visible=%v", what, where, len(docs), v.visible)
			}
			for _, d := range docs {
				if v.m.UserScoped() && d.Owner != v.sc.User {
					t.Errorf("%s: DBQuery returned %s, owned by %s", what, d.ID, d.Owner)
				}
			}
			n, err := s.DBCount(ctx, v.sc, v.m, where)
			if err != nil || n != int64(len(docs)) {
				t.Errorf("%s: DBCount %v = %d, %v; the query returned %d", what, where, n, err, len(docs))
			}
		}
		if v.visible {
			continue
		}
		_, err = s.DBUpdate(ctx, v.sc, v.m, v.id, []byte(setFor(v.m)), nil, 0, store.DBQuota{})
		dbErr(t, what+": DBUpdate", err, abi.CodeNotFound)
		if ok, err := s.DBDelete(ctx, v.sc, v.m, v.id, 0); err != nil || ok {
			t.Errorf("%s: DBDelete = %v, %v; want false", what, ok, err)
		}
	}
	for _, c := range []struct {
		m     *store.Schema
		id    string
		owner store.DBScope
	}{{notes, secret, ann}, {items, shared, ann}, {notes, bobs, bob}} {
		d, found, err := s.DBGet(ctx, c.owner, c.m, c.id)
		if err != nil || !found || d.Version != 1 {
			t.Errorf("%s after others' updates and deletes: %+v, %v, %v; want untouched", c.id, d, found, err)
		}
	}
	if u, _ := s.DBUsage(ctx, "evil", "app"); u.Rows != 0 {
		t.Errorf("evil's usage = %+v, want none", u)
	}
}

func setFor(m *store.Schema) string {
	if m.Name() == "notes" {
		return `{"title":"pwned"}`
	}
	return `{"name":"pwned"}`
}

func cond(t *testing.T, field, op string, v any) abi.DBCondition {
	t.Helper()
	c, err := abi.Where(field, op, v)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// queryAll walks every page of a query and checks the pages agree with
// one unpaged query.
func queryAll(t *testing.T, s *store.Store, sc store.DBScope, m *store.Schema, q store.DBQuery, pageSize int) []abi.DBDoc {
	t.Helper()
	ctx := context.Background()
	q.Limit = pageSize
	var all []abi.DBDoc
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("pagination does not end")
		}
		docs, next, err := s.DBQuery(ctx, sc, m, q)
		if err != nil {
			t.Fatalf("DBQuery %+v: %v", q, err)
		}
		if len(docs) > pageSize {
			t.Fatalf("a page of %d documents, limit %d", len(docs), pageSize)
		}
		all = append(all, docs...)
		if next == "" {
			return all
		}
		bytes := 0
		for _, d := range docs {
			bytes += len(d.Doc)
		}
		if len(docs) == 0 || len(docs) != pageSize && bytes+abi.MaxDBDocBytes <= abi.MaxDBPageBytes {
			t.Fatalf("a short page (%d of %d, %d bytes) with a next cursor", len(docs), pageSize, bytes)
		}
		q.After = next
	}
}

func ids(docs []abi.DBDoc) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = d.ID
	}
	return out
}

// testDBQuery checks every operator on every type, and every order
// (ascending, descending, rows without the field) paged at several sizes,
// against the same query evaluated in Go.
func (su suite) testDBQuery(t *testing.T) {
	s, m := su.dbStore(t)
	items := m["items"]
	type item struct {
		id     string
		name   string
		n      *int64
		price  *float64
		at     *string
		labels []string
		counts []int64
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var all []item
	names := []string{"apple", "apricot", "banana", "Banana", "cherry", "é", "éa", "a'b", "a%b", "a_b", "", "\U0010FFFF", "z\U0010FFFF"}
	for i := range 60 {
		it := item{name: names[i%len(names)]}
		doc := map[string]any{"name": it.name}
		if i%4 != 0 {
			n := int64(rng.IntN(7) - 3)
			it.n, doc["n"] = &n, n
		}
		if i%3 != 0 {
			p := float64(rng.IntN(9)) / 4
			it.price, doc["price"] = &p, p
		}
		if i%5 != 0 {
			at := time.Date(2026, 1, 1+rng.IntN(4), 0, 0, 0, 0, time.UTC).Format("2006-01-02T15:04:05.000Z")
			it.at, doc["at"] = &at, at
		}
		for range rng.IntN(3) {
			it.labels = append(it.labels, []string{"red", "green", "blue"}[rng.IntN(3)])
			it.counts = append(it.counts, int64(rng.IntN(4)))
		}
		if it.labels != nil {
			doc["labels"], doc["counts"] = it.labels, it.counts
		}
		b, _ := json.Marshal(doc)
		it.id = insert(t, s, ann, items, string(b))
		all = append(all, it)
	}
	insert(t, s, eve, items, `{"name":"apple","n":0,"price":1,"labels":["red"]}`) // another org's: never returned
	cmpOpt := func(a, b any) int {                                                // nil last
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return 1
		case b == nil:
			return -1
		}
		switch x := a.(type) {
		case int64:
			return int(x - b.(int64))
		case float64:
			y := b.(float64)
			return map[bool]int{true: -1, false: 1}[x < y] * map[bool]int{true: 0, false: 1}[x == y]
		case string:
			return strings.Compare(x, b.(string))
		}
		panic("type")
	}
	value := func(it item, f string) any {
		switch f {
		case "name":
			return it.name
		case "n":
			if it.n != nil {
				return *it.n
			}
		case "price":
			if it.price != nil {
				return *it.price
			}
		case "at":
			if it.at != nil {
				return *it.at
			}
		}
		return nil
	}
	type tc struct {
		where []abi.DBCondition
		match func(it item) bool
	}
	cmpWith := func(f string, v any, ok func(int) bool) func(it item) bool {
		return func(it item) bool {
			x := value(it, f)
			return x != nil && ok(cmpOpt(x, v))
		}
	}
	cases := []tc{
		{nil, func(item) bool { return true }},
		{[]abi.DBCondition{cond(t, "n", "=", 1)}, cmpWith("n", int64(1), func(c int) bool { return c == 0 })},
		{[]abi.DBCondition{cond(t, "n", "!=", 1)}, cmpWith("n", int64(1), func(c int) bool { return c != 0 })},
		{[]abi.DBCondition{cond(t, "n", "<", 0)}, cmpWith("n", int64(0), func(c int) bool { return c < 0 })},
		{[]abi.DBCondition{cond(t, "n", "<=", 0)}, cmpWith("n", int64(0), func(c int) bool { return c <= 0 })},
		{[]abi.DBCondition{cond(t, "price", ">", 1)}, cmpWith("price", 1.0, func(c int) bool { return c > 0 })},
		{[]abi.DBCondition{cond(t, "price", ">=", 1.25)}, cmpWith("price", 1.25, func(c int) bool { return c >= 0 })},
		{[]abi.DBCondition{cond(t, "name", "=", "Banana")}, cmpWith("name", "Banana", func(c int) bool { return c == 0 })},
		{[]abi.DBCondition{cond(t, "name", ">", "b")}, cmpWith("name", "b", func(c int) bool { return c > 0 })},
		{[]abi.DBCondition{cond(t, "name", "in", []string{"apple", "é", "nope"})}, func(it item) bool { return it.name == "apple" || it.name == "é" }},
		{[]abi.DBCondition{cond(t, "n", "in", []int{-3, 3})}, func(it item) bool { return it.n != nil && (*it.n == -3 || *it.n == 3) }},
		{[]abi.DBCondition{cond(t, "name", "prefix", "ap")}, func(it item) bool { return strings.HasPrefix(it.name, "ap") }},
		{[]abi.DBCondition{cond(t, "name", "prefix", "a%")}, func(it item) bool { return strings.HasPrefix(it.name, "a%") }},
		{[]abi.DBCondition{cond(t, "name", "prefix", "a_")}, func(it item) bool { return strings.HasPrefix(it.name, "a_") }},
		{[]abi.DBCondition{cond(t, "name", "prefix", "é")}, func(it item) bool { return strings.HasPrefix(it.name, "é") }},
		{[]abi.DBCondition{cond(t, "name", "prefix", "\U0010FFFF")}, func(it item) bool { return strings.HasPrefix(it.name, "\U0010FFFF") }},
		{[]abi.DBCondition{cond(t, "name", "prefix", "")}, func(it item) bool { return true }},
		{[]abi.DBCondition{cond(t, "name", "contains", "an")}, func(it item) bool { return strings.Contains(it.name, "an") }},
		{[]abi.DBCondition{cond(t, "name", "contains", "%")}, func(it item) bool { return strings.Contains(it.name, "%") }},
		{[]abi.DBCondition{cond(t, "at", "prefix", "2026-01-02")}, func(it item) bool { return it.at != nil && strings.HasPrefix(*it.at, "2026-01-02") }},
		{[]abi.DBCondition{cond(t, "at", ">=", "2026-01-03T01:00:00+02:00")}, cmpWith("at", "2026-01-02T23:00:00.000Z", func(c int) bool { return c >= 0 })},
		{[]abi.DBCondition{cond(t, "labels", "contains", "red")}, func(it item) bool { return slices.Contains(it.labels, "red") }},
		{[]abi.DBCondition{cond(t, "counts", "contains", 2)}, func(it item) bool { return slices.Contains(it.counts, 2) }},
		{[]abi.DBCondition{cond(t, "labels", "contains", "red"), cond(t, "n", ">=", 0), cond(t, "name", "!=", "apple")},
			func(it item) bool {
				return slices.Contains(it.labels, "red") && it.n != nil && *it.n >= 0 && it.name != "apple"
			}},
	}
	orders := [][]string{nil, {"n"}, {"-n"}, {"price", "name"}, {"-price", "-at"}, {"name"}, {"-name", "n"}, {"at", "-n", "price"}}
	for ci, c := range cases {
		for _, order := range orders {
			var want []item
			for _, it := range all {
				if c.match(it) {
					want = append(want, it)
				}
			}
			slices.SortStableFunc(want, func(a, b item) int {
				for _, o := range order {
					f, desc := strings.CutPrefix(o, "-")
					x, y := value(a, f), value(b, f)
					c := cmpOpt(x, y)
					if desc {
						c = -c
					}
					if c != 0 {
						return c
					}
				}
				return strings.Compare(a.id, b.id)
			})
			wantIDs := make([]string, len(want))
			for i, it := range want {
				wantIDs[i] = it.id
			}
			for _, page := range []int{1, 7, 1000} {
				if page == 1 && ci%3 != 0 {
					continue // one-row pages cost a query per row; a third of the cases suffice
				}
				got := ids(queryAll(t, s, ann, items, store.DBQuery{Where: c.where, Order: order}, page))
				if !slices.Equal(got, wantIDs) {
					t.Errorf("case %d %v order %v page %d:\n got %v\nwant %v", ci, c.where, order, page, got, wantIDs)
				}
			}
			n, err := s.DBCount(context.Background(), ann, items, c.where)
			if err != nil || n != int64(len(wantIDs)) {
				t.Errorf("case %d: DBCount = %d, %v; want %d", ci, n, err, len(wantIDs))
			}
		}
	}
}

// Filters, orders, limits and cursors a guest could shape to break out:
// refused with the field named, or bound as plain values.
func (su suite) testDBQueryHostile(t *testing.T) {
	ctx := context.Background()
	s, m := su.dbStore(t)
	notes, items, loose := m["notes"], m["items"], m["loose"]
	for i := range 5 {
		insert(t, s, ann, notes, fmt.Sprintf(`{"title":"note %d","tags":["t%d"]}`, i, i%2))
	}
	evil := []string{`a'); DROP TABLE db_documents--`, `$.x`, `"`, `'`, "\x00", "a\x00b", `\`, `title') OR 1=1 --`, `$`, `*`, `title.x`, `title[0]`, "\xff", `%`, `_`, "tags' || '"}
	for _, name := range evil {
		for _, q := range []store.DBQuery{{Where: []abi.DBCondition{{Field: name, Op: "=", Value: json.RawMessage(`"x"`)}}}, {Order: []string{name}}, {Order: []string{"-" + name}}} {
			_, _, err := s.DBQuery(ctx, ann, notes, q)
			dbErr(t, fmt.Sprintf("query naming %q", name), err, abi.CodeInvalidArgument, "not a declared field")
		}
		_, err := s.DBCount(ctx, ann, notes, []abi.DBCondition{{Field: name, Op: "=", Value: json.RawMessage(`1`)}})
		dbErr(t, fmt.Sprintf("count naming %q", name), err, abi.CodeInvalidArgument, "not a declared field")
		_, err = s.DBUpdate(ctx, ann, notes, strings.Repeat("0", 28), nil, []string{name}, 0, store.DBQuota{})
		if abi.ValidDBFieldName(name) { // a field an earlier version may have declared
			dbErr(t, fmt.Sprintf("unset %q", name), err, abi.CodeNotFound)
		} else {
			dbErr(t, fmt.Sprintf("unset %q", name), err, abi.CodeInvalidArgument, "not a field name")
		}
		// As an operator.
		_, _, err = s.DBQuery(ctx, ann, notes, store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: name, Value: json.RawMessage(`"x"`)}}})
		dbErr(t, fmt.Sprintf("operator %q", name), err, abi.CodeInvalidArgument, "not an operator")
		// As a value: bound, so it matches nothing (or refused when NUL or not UTF-8).
		v, _ := json.Marshal(name)
		if !json.Valid(v) || strings.ContainsRune(name, 0) || !utf8Valid(name) {
			continue
		}
		for _, op := range []string{"=", "!=", "<", "prefix", "contains"} {
			docs, _, err := s.DBQuery(ctx, ann, notes, store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: op, Value: v}}})
			if err != nil {
				t.Errorf("title %s %q: %v", op, name, err)
				continue
			}
			for _, d := range docs {
				if d.Owner != "ann" {
					t.Errorf("title %s %q returned another's document", op, name)
				}
			}
		}
		docs, _, err := s.DBQuery(ctx, ann, notes, store.DBQuery{Where: []abi.DBCondition{{Field: "tags", Op: "contains", Value: v}}})
		if err != nil || len(docs) != 0 {
			t.Errorf("tags contains %q = %d documents, %v; want none", name, len(docs), err)
		}
		// As undeclared field names of an additional model: plain data.
		doc, _ := json.Marshal(map[string]any{name: name, "kind": name})
		if id, _, err := s.DBInsert(ctx, ann, loose, doc, store.DBQuota{}); err != nil {
			t.Errorf("loose document with key %q: %v", name, err)
		} else if d, _, _ := s.DBGet(ctx, ann, loose, id); !strings.Contains(string(d.Doc), string(v[1:len(v)-1])) {
			t.Errorf("loose document %q lost key %q", d.Doc, name)
		}
	}
	for _, tt := range []struct {
		name string
		q    store.DBQuery
		code abi.Code
		says string
	}{
		{"NUL value", store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: "=", Value: json.RawMessage(`"a\u0000"`)}}}, abi.CodeInvalidArgument, "NUL"},
		{"invalid UTF-8 value", store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: "=", Value: json.RawMessage("\"\xff\"")}}}, abi.CodeInvalidArgument, "UTF-8"},
		{"wrong type", store.DBQuery{Where: []abi.DBCondition{{Field: "done", Op: "=", Value: json.RawMessage(`"true"`)}}}, abi.CodeInvalidArgument, "true or false"},
		{"null value", store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: "=", Value: json.RawMessage(`null`)}}}, abi.CodeInvalidArgument, "null"},
		{"object value", store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: "=", Value: json.RawMessage(`{"$gt":""}`)}}}, abi.CodeInvalidArgument, "must be a string"},
		{"order on bool <", store.DBQuery{Where: []abi.DBCondition{{Field: "done", Op: "<", Value: json.RawMessage(`true`)}}}, abi.CodeInvalidArgument, "bool field"},
		{"array with =", store.DBQuery{Where: []abi.DBCondition{{Field: "tags", Op: "=", Value: json.RawMessage(`"x"`)}}}, abi.CodeInvalidArgument, "only contains"},
		{"prefix on a number", store.DBQuery{Where: []abi.DBCondition{{Field: "done", Op: "prefix", Value: json.RawMessage(`"t"`)}}}, abi.CodeInvalidArgument, "prefix takes"},
		{"in empty", store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: "in", Value: json.RawMessage(`[]`)}}}, abi.CodeInvalidArgument, "1 to 100"},
		{"in too many", store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: "in", Value: json.RawMessage(`[` + strings.TrimSuffix(strings.Repeat(`"a",`, 101), ",") + `]`)}}}, abi.CodeInvalidArgument, "1 to 100"},
		{"in not a list", store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: "in", Value: json.RawMessage(`"a"`)}}}, abi.CodeInvalidArgument, "JSON array"},
		{"huge value", store.DBQuery{Where: []abi.DBCondition{{Field: "title", Op: "=", Value: json.RawMessage(`"` + strings.Repeat("a", abi.MaxDBFilterValueBytes) + `"`)}}}, abi.CodeTooLarge, "4096"},
		{"too many conditions", store.DBQuery{Where: slices.Repeat([]abi.DBCondition{{Field: "title", Op: "=", Value: json.RawMessage(`"a"`)}}, abi.MaxDBWhere+1)}, abi.CodeInvalidArgument, "17 conditions"},
		{"order too long", store.DBQuery{Order: []string{"title", "body", "due", "done", "-title"}}, abi.CodeInvalidArgument, "5 fields"},
		{"order twice", store.DBQuery{Order: []string{"title", "-title"}}, abi.CodeInvalidArgument, "named twice"},
		{"order by array", store.DBQuery{Order: []string{"tags"}}, abi.CodeInvalidArgument, "cannot be ordered"},
		{"limit negative", store.DBQuery{Limit: -1}, abi.CodeInvalidArgument, "limit -1"},
		{"limit too high", store.DBQuery{Limit: abi.MaxDBQueryLimit + 1}, abi.CodeInvalidArgument, "limit 1001"},
		{"cursor garbage", store.DBQuery{After: "!!!"}, abi.CodeInvalidArgument, "not a cursor"},
		{"cursor huge", store.DBQuery{After: strings.Repeat("A", abi.MaxDBCursorBytes+1)}, abi.CodeInvalidArgument, "more than a cursor"},
		{"cursor JSON with extra fields", store.DBQuery{After: b64(`{"v":1,"q":"x","k":[],"id":"x","org":"evil"}`)}, abi.CodeInvalidArgument, "not a cursor"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.DBQuery(ctx, ann, notes, tt.q)
			dbErr(t, "DBQuery", err, tt.code, tt.says)
		})
	}
	_, _, err := s.DBQuery(ctx, ann, items, store.DBQuery{Where: []abi.DBCondition{{Field: "meta", Op: "=", Value: json.RawMessage(`{}`)}}})
	dbErr(t, "filter on an object field", err, abi.CodeInvalidArgument, "object field")

	// Cursors: one made for another query is refused; a forged one
	// pointing anywhere stays in the caller's scope.
	_, next, err := s.DBQuery(ctx, ann, notes, store.DBQuery{Order: []string{"title"}, Limit: 2})
	if err != nil || next == "" {
		t.Fatalf("first page: %q, %v", next, err)
	}
	for _, q := range []store.DBQuery{{Order: []string{"-title"}}, {Order: []string{"title"}, Where: []abi.DBCondition{cond(t, "done", "=", true)}}} {
		q.After = next
		_, _, err := s.DBQuery(ctx, ann, notes, q)
		dbErr(t, "another query's cursor", err, abi.CodeInvalidArgument, "another query")
	}
	_, _, err = s.DBQuery(ctx, ann, items, store.DBQuery{Order: []string{"title"}, After: next})
	dbErr(t, "another model's cursor", err, abi.CodeInvalidArgument)
	var c map[string]any
	raw, _ := base64.RawURLEncoding.DecodeString(next)
	json.Unmarshal(raw, &c)
	forge := func(k any, id string) string {
		c2 := maps.Clone(c)
		c2["k"], c2["id"] = k, id
		b, _ := json.Marshal(c2)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, bad := range []string{forge([]any{1}, c["id"].(string)), forge([]any{"a", "b"}, c["id"].(string)), forge([]any{nil}, c["id"].(string)),
		forge([]any{"a"}, "x' OR 1=1"), forge([]any{"a'); DROP TABLE db_documents--"}, "zz")} {
		_, _, err := s.DBQuery(ctx, ann, notes, store.DBQuery{Order: []string{"title"}, After: bad})
		dbErr(t, "forged cursor", err, abi.CodeInvalidArgument, "damaged")
	}
	// Well-formed forgeries: positions anywhere, answered from the caller's scope only.
	insert(t, s, bob, notes, `{"title":"bob's"}`)
	for _, k := range []string{"", "a", "note 2", "\U0010FFFF"} {
		for _, id := range []string{strings.Repeat("0", 28), strings.Repeat("f", 28)} {
			docs, _, err := s.DBQuery(ctx, ann, notes, store.DBQuery{Order: []string{"title"}, After: forge([]any{k}, id)})
			if err != nil {
				t.Errorf("forged position %q/%s: %v", k, id, err)
			}
			for _, d := range docs {
				if d.Owner != "ann" {
					t.Errorf("forged position %q/%s returned %s's document", k, id, d.Owner)
				}
			}
		}
	}
	// The same cursor used by another user or organization pages their
	// own documents.
	docs, _, err := s.DBQuery(ctx, eve, notes, store.DBQuery{Order: []string{"title"}, Limit: 2, After: next})
	if err != nil || len(docs) != 0 {
		t.Errorf("ann's cursor in evil's hands: %d documents, %v; want none", len(docs), err)
	}
}

// Pages of large documents end at abi.MaxDBPageBytes, however high the
// limit: a query cannot make the host read a gigabyte into one reply.
func (su suite) testDBPageBytes(t *testing.T) {
	ctx := context.Background()
	s, m := su.dbStore(t)
	loose := m["loose"]
	big := strings.Repeat("x", abi.MaxDBDocBytes-64)
	const n = 20
	for i := range n {
		insert(t, s, ann, loose, fmt.Sprintf(`{"kind":"%02d%s"}`, i, big))
	}
	docs, next, err := s.DBQuery(ctx, ann, loose, store.DBQuery{Limit: abi.MaxDBQueryLimit})
	if err != nil {
		t.Fatal(err)
	}
	bytes := 0
	for _, d := range docs {
		bytes += len(d.Doc)
	}
	if bytes > abi.MaxDBPageBytes || next == "" || len(docs) == 0 || bytes+len(docs[0].Doc) <= abi.MaxDBPageBytes {
		t.Errorf("first page: %d documents, %d bytes, next %q; want as many as fit in %d bytes, and a next", len(docs), bytes, next, abi.MaxDBPageBytes)
	}
	if all := queryAll(t, s, ann, loose, store.DBQuery{}, abi.MaxDBQueryLimit); len(all) != n {
		t.Errorf("all pages: %d documents, want %d", len(all), n)
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func (su suite) testDBQuota(t *testing.T) {
	ctx := context.Background()
	s, m := su.dbStore(t)
	notes := m["notes"]
	q := store.DBQuota{Rows: 3}
	var ids []string
	for i := range 3 {
		id, _, err := s.DBInsert(ctx, ann, notes, []byte(fmt.Sprintf(`{"title":"%d"}`, i)), q)
		if err != nil {
			t.Fatalf("insert %d within the quota: %v", i, err)
		}
		ids = append(ids, id)
	}
	_, _, err := s.DBInsert(ctx, bob, notes, []byte(`{"title":"x"}`), q)
	dbErr(t, "insert past the rows quota", err, abi.CodeTooLarge, "3 documents", "module app in org acme", "limits.db_rows")
	// The quota is the organization's module's, not the user's or model's.
	_, _, err = s.DBInsert(ctx, ann, m["items"], []byte(`{"name":"x"}`), q)
	dbErr(t, "insert into another model past the quota", err, abi.CodeTooLarge, "3 documents")
	// Another organization has its own.
	if _, _, err := s.DBInsert(ctx, eve, notes, []byte(`{"title":"x"}`), q); err != nil {
		t.Errorf("another org's insert: %v", err)
	}
	if ok, err := s.DBDelete(ctx, ann, notes, ids[0], 0); !ok || err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.DBInsert(ctx, ann, notes, []byte(`{"title":"again"}`), q); err != nil {
		t.Errorf("insert after a delete freed a row: %v", err)
	}

	u, _ := s.DBUsage(ctx, "acme", "app")
	bq := store.DBQuota{Bytes: u.Bytes + 20}
	_, err = s.DBUpdate(ctx, ann, notes, ids[1], []byte(`{"body":"`+strings.Repeat("x", 30)+`"}`), nil, 0, bq)
	dbErr(t, "update past the bytes quota", err, abi.CodeTooLarge, "bytes", "limits.db_bytes")
	if _, err := s.DBUpdate(ctx, ann, notes, ids[1], []byte(`{"body":"`+strings.Repeat("x", 5)+`"}`), nil, 0, bq); err != nil {
		t.Errorf("update within the bytes quota: %v", err)
	}
	// Over a lowered quota, a write that shrinks is still allowed.
	tight := store.DBQuota{Rows: 1, Bytes: 1}
	if _, err := s.DBUpdate(ctx, ann, notes, ids[1], nil, []string{"body"}, 0, tight); err != nil {
		t.Errorf("shrinking update over a lowered quota: %v", err)
	}
	_, _, err = s.DBInsert(ctx, ann, notes, []byte(`{"title":"x"}`), tight)
	dbErr(t, "insert over a lowered quota", err, abi.CodeTooLarge)
	u2, _ := s.DBUsage(ctx, "acme", "app")
	if u2.Rows != 3 {
		t.Errorf("usage after the refusals = %+v, want 3 rows", u2)
	}
	// Usage matches what is stored.
	docs := queryAll(t, s, ann, notes, store.DBQuery{}, 100)
	docs = append(docs, queryAll(t, s, bob, notes, store.DBQuery{}, 100)...)
	var bytes int64
	for _, d := range docs {
		bytes += int64(len(d.Doc))
	}
	if u2.Bytes != bytes || int64(len(docs)) != u2.Rows {
		t.Errorf("usage %+v, but %d documents of %d bytes are stored", u2, len(docs), bytes)
	}
}

// Inserts racing for the last rows of a quota never overshoot it.
func (su suite) testDBQuotaConcurrent(t *testing.T) {
	s, m := su.dbStore(t)
	raceDBQuota(t, []*store.Store{s}, m["notes"])
}

func raceDBQuota(t *testing.T, stores []*store.Store, notes *store.Schema) {
	ctx := context.Background()
	q := store.DBQuota{Rows: 10}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	start := make(chan struct{})
	for i := range 30 {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			_, _, err := s.DBInsert(ctx, ann, notes, []byte(`{"title":"race"}`), q)
			var ae *abi.Error
			switch {
			case err == nil:
				mu.Lock()
				ok++
				mu.Unlock()
			case !errors.As(err, &ae) || ae.Code != abi.CodeTooLarge:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok != 10 {
		t.Errorf("%d inserts succeeded; the quota is 10", ok)
	}
	if u, _ := stores[0].DBUsage(ctx, "acme", "app"); u.Rows != 10 {
		t.Errorf("usage %+v, want 10 rows", u)
	}
}

// Updates racing on one version: exactly one wins, the others are told
// conflict, and the document holds the winner's change.
func (su suite) testDBConflict(t *testing.T) {
	s, m := su.dbStore(t)
	raceDBUpdates(t, []*store.Store{s}, m["notes"])
}

func raceDBUpdates(t *testing.T, stores []*store.Store, notes *store.Schema) {
	ctx := context.Background()
	for round := range 3 {
		id := insert(t, stores[0], ann, notes, `{"title":"v1"}`)
		const n = 12
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			s := stores[i%len(stores)]
			wg.Go(func() {
				<-start
				_, errs[i] = s.DBUpdate(ctx, ann, notes, id, []byte(fmt.Sprintf(`{"title":"by %d"}`, i)), nil, 1, store.DBQuota{})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			var ae *abi.Error
			switch {
			case err == nil && winner >= 0:
				t.Errorf("round %d: updates %d and %d both won", round, winner, i)
			case err == nil:
				winner = i
			case !errors.As(err, &ae) || ae.Code != abi.CodeConflict:
				t.Errorf("round %d: a loser's error = %v, want conflict", round, err)
			}
		}
		d, _, _ := stores[0].DBGet(ctx, ann, notes, id)
		if winner < 0 || d.Version != 2 || string(d.Doc) != fmt.Sprintf(`{"title":"by %d"}`, winner) {
			t.Errorf("round %d: winner %d, document %+v", round, winner, d)
		}
	}
}

// Models change at load: what stored documents can follow migrates (new
// optional fields, indexes, a higher max), what they cannot is refused
// with what changed and how to migrate; each organization's copy of a
// module has its own models.
func (su suite) testDBMigrate(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	base := store.Model{Name: "notes", Scope: abi.DBScopeUser, Fields: map[string]store.Field{
		"title": {Type: abi.DBString, Required: true, Max: f64(200)},
		"due":   {Type: abi.DBTime},
		"tags":  {Type: "[string]"},
	}}
	migrate := func(owner string, m store.Model) error {
		return s.DBMigrate(ctx, owner, "app", []*store.Schema{compile(t, m)})
	}
	if err := migrate("acme", base); err != nil {
		t.Fatal(err)
	}
	notes := compile(t, base)
	sc := store.DBScope{Org: "acme", Module: "app", User: "ann"}
	id := insert(t, s, sc, notes, `{"title":"t","tags":["a","b"],"due":"2026-01-01T00:00:00Z"}`)
	if err := migrate("acme", base); err != nil {
		t.Errorf("the same model again: %v", err)
	}
	with := func(f func(m *store.Model)) store.Model {
		m := base
		m.Fields = maps.Clone(base.Fields)
		f(&m)
		return m
	}
	grown := with(func(m *store.Model) {
		m.Fields["body"] = store.Field{Type: abi.DBString}
		m.Fields["title"] = store.Field{Type: abi.DBString, Required: true, Max: f64(500)}
		m.Indexes = [][]string{{"due"}, {"tags"}}
	})
	if err := migrate("acme", grown); err != nil {
		t.Fatalf("an added field and indexes: %v", err)
	}
	// The new array index holds the documents stored before it.
	docs, _, err := s.DBQuery(ctx, sc, compile(t, grown), store.DBQuery{Where: []abi.DBCondition{cond(t, "tags", "contains", "b")}})
	if err != nil || len(docs) != 1 || docs[0].ID != id {
		t.Errorf("query on the new index: %v, %v", ids(docs), err)
	}
	for _, tt := range []struct {
		name string
		m    store.Model
		says []string
	}{
		{"type change", with(func(m *store.Model) { m.Fields["due"] = store.Field{Type: abi.DBString} }),
			[]string{"field due changed type from time to string", "declare a new field", "copy the values"}},
		{"new required", with(func(m *store.Model) { m.Fields["prio"] = store.Field{Type: abi.DBInt, Required: true} }),
			[]string{"field prio is new and required", "required: false"}},
		{"became required", with(func(m *store.Model) { m.Fields["due"] = store.Field{Type: abi.DBTime, Required: true} }),
			[]string{"field due became required"}},
		{"lower max", with(func(m *store.Model) {
			m.Fields["title"] = store.Field{Type: abi.DBString, Required: true, Max: f64(10)}
		}),
			[]string{"field title's max went from max 500 to 10"}},
		{"scope", with(func(m *store.Model) { m.Scope = abi.DBScopeOrg }),
			[]string{"scope changed from user to org"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := migrate("acme", tt.m)
			dbErr(t, "DBMigrate", err, abi.CodeInvalidArgument, append(tt.says, "module app", "model notes")...)
		})
	}
	// A refused migration changed nothing: the grown model still loads.
	if err := migrate("acme", grown); err != nil {
		t.Errorf("the stored model after refusals: %v", err)
	}
	// A field removed is retired: documents keep it, an update carries it
	// along, and a field of that name must keep its type.
	retired := with(func(m *store.Model) {
		m.Fields["body"] = store.Field{Type: abi.DBString}
		m.Fields["title"] = store.Field{Type: abi.DBString, Required: true, Max: f64(500)}
		delete(m.Fields, "tags")
	})
	if err := migrate("acme", retired); err != nil {
		t.Fatalf("removing a field: %v", err)
	}
	if _, err := s.DBUpdate(ctx, sc, compile(t, retired), id, []byte(`{"body":"b"}`), nil, 0, store.DBQuota{}); err != nil {
		t.Errorf("updating a document holding a retired field: %v", err)
	}
	if d, _, _ := s.DBGet(ctx, sc, compile(t, retired), id); !strings.Contains(string(d.Doc), `"tags":["a","b"]`) {
		t.Errorf("the update lost the retired field: %s", d.Doc)
	}
	_, err = s.DBUpdate(ctx, sc, compile(t, retired), id, []byte(`{"tags":["c"]}`), nil, 0, store.DBQuota{})
	dbErr(t, "setting a retired field", err, abi.CodeInvalidArgument, "field tags", "not declared")
	err = migrate("acme", with(func(m *store.Model) {
		m.Fields["title"] = store.Field{Type: abi.DBString, Required: true, Max: f64(500)}
		m.Fields["tags"] = store.Field{Type: abi.DBString}
	}))
	dbErr(t, "a retired field back with another type", err, abi.CodeInvalidArgument, "field tags changed type from [string] to string", "an earlier version declared it")
	// Back to the max of 200 after 500 was allowed: refused, documents may be longer.
	err = migrate("acme", base)
	dbErr(t, "back to a lower max", err, abi.CodeInvalidArgument, "field title's max went from max 500 to 200")
	if err := migrate("acme", grown); err != nil {
		t.Errorf("the retired field declared again as it was: %v", err)
	}
	// Another organization's module of the same name has its own models.
	other := with(func(m *store.Model) { m.Fields["due"] = store.Field{Type: abi.DBInt} })
	if err := migrate("globex", other); err != nil {
		t.Errorf("globex's module app, with another model notes: %v", err)
	}
	// Several models refused at once are all named.
	two := []*store.Schema{compile(t, with(func(m *store.Model) { m.Fields["due"] = store.Field{Type: abi.DBInt} })),
		compile(t, store.Model{Name: "other", Fields: map[string]store.Field{"x": {Type: abi.DBInt}}})}
	err = s.DBMigrate(ctx, "acme", "app", two)
	dbErr(t, "two models", err, abi.CodeInvalidArgument, "field due changed type")
	if err := s.DBMigrate(ctx, "acme", "app", two[1:]); err != nil {
		t.Errorf("the second model alone: %v", err)
	}
	for _, bad := range []store.Model{
		{Name: "Notes", Fields: map[string]store.Field{"a": {Type: abi.DBInt}}},
		{Name: "a'); DROP TABLE db_documents--", Fields: map[string]store.Field{"a": {Type: abi.DBInt}}},
		{Name: "n", Fields: map[string]store.Field{"a'b": {Type: abi.DBInt}}},
		{Name: "n", Fields: map[string]store.Field{"$.x": {Type: abi.DBInt}}},
		{Name: "n", Fields: map[string]store.Field{"a": {Type: "[object]"}}},
		{Name: "n", Fields: map[string]store.Field{"a": {Type: "date"}}},
		{Name: "n", Fields: map[string]store.Field{"a": {Type: "[string]"}, "b": {Type: abi.DBInt}}, Indexes: [][]string{{"a", "b"}}},
		{Name: "n", Fields: map[string]store.Field{"a": {Type: abi.DBObject}}, Indexes: [][]string{{"a"}}},
		{Name: "n", Fields: map[string]store.Field{"a": {Type: abi.DBInt}}, Indexes: [][]string{{"b"}}},
		{Name: "n", Fields: map[string]store.Field{"a": {Type: abi.DBBool, Max: f64(1)}}},
		{Name: "n", Scope: "everyone", Fields: map[string]store.Field{"a": {Type: abi.DBInt}}},
		{Name: "n"},
	} {
		if _, err := store.CompileModel(bad); err == nil {
			t.Errorf("CompileModel(%+v) succeeded", bad)
		}
	}
}

// The cases that must hold across processes or replicas.
func testSharedDB(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	stores := open(t, 3)
	warm(t, stores)
	ctx := context.Background()
	var schemas []*store.Schema
	for _, m := range []store.Model{notesModel, itemsModel} {
		schemas = append(schemas, compile(t, m))
	}
	// Loads racing on several handles migrate once, without error.
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			if err := s.DBMigrate(ctx, "", "app", schemas); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	raceDBUpdates(t, stores, schemas[0])
	// A fresh module's quota, raced.
	for _, s := range stores {
		if err := s.DBMigrate(ctx, "", "app", schemas); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range queryAll(t, stores[0], ann, schemas[0], store.DBQuery{}, 100) {
		if _, err := stores[1].DBDelete(ctx, ann, schemas[0], d.ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	raceDBQuota(t, stores, schemas[0])
}
