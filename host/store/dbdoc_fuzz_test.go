package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

func fuzzSchema(t testing.TB) *Schema {
	max := 20.0
	sc, err := CompileModel(Model{Name: "notes", Additional: true, Fields: map[string]Field{
		"title": {Type: abi.DBString, Required: true, Max: &max},
		"n":     {Type: abi.DBInt, Max: &max},
		"x":     {Type: abi.DBNumber},
		"due":   {Type: abi.DBTime},
		"done":  {Type: abi.DBBool},
		"tags":  {Type: "[string]", Max: &max},
		"ns":    {Type: "[int]"},
		"meta":  {Type: abi.DBObject},
	}, Indexes: [][]string{{"tags"}, {"ns"}, {"done", "due"}}})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func wantRefusal(t *testing.T, what string, err error) {
	t.Helper()
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument && ae.Code != abi.CodeTooLarge {
		t.Fatalf("%s: %v is not an invalid_argument or too_large *abi.Error", what, err)
	}
}

// FuzzDBDocument: whatever bytes a guest sends as a document, the check
// refuses them with invalid_argument or too_large, or returns canonical
// JSON within the limits that checks again to the same bytes; an update
// of that document with the same bytes as set does too.
func FuzzDBDocument(f *testing.F) {
	for _, s := range []string{
		`{"title":"t"}`, `{"title":"t","n":3,"x":1.5e300,"due":"2026-01-01T00:00:00+05:30","done":true,"tags":["a","a"],"ns":[1,2.0],"meta":{"a":[null,{"b":1}]}}`,
		`{"title":"t","extra":{"\u0000":1}}`, `{"title":"\ud800"}`, "{\"title\":\"\xff\"}", `{"title":"t","n":9007199254740993}`,
		`[[[[[[[[[[1]]]]]]]]]]`, `{"title":"t"}{}`, `{"title":null}`, `{"title":"t","x":-0}`, `{"title":"t","due":"0000-01-01T00:00:00Z"}`,
	} {
		f.Add([]byte(s))
	}
	sc := fuzzSchema(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		canon, _, err := sc.checkDocument(abi.OpDBInsert, raw)
		if err != nil {
			wantRefusal(t, "insert", err)
			return
		}
		if !json.Valid(canon) || len(canon) > abi.MaxDBDocBytes {
			t.Fatalf("stored form %q is not JSON within the limit", canon)
		}
		again, _, err := sc.checkDocument(abi.OpDBInsert, canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("the stored form checks to %q, %v; want itself %q", again, err, canon)
		}
		upd, _, err := sc.applyUpdate(abi.OpDBUpdate, canon, raw, nil)
		if err != nil {
			wantRefusal(t, "update", err)
			return
		}
		if !bytes.Equal(upd, canon) {
			t.Fatalf("setting a document's own fields changed it: %q → %q", canon, upd)
		}
	})
}

// FuzzDBWhere: whatever a guest sends as a query's conditions and order,
// they compile to conditions on declared fields of the model, or are
// refused with invalid_argument or too_large.
func FuzzDBWhere(f *testing.F) {
	for _, s := range []string{
		`{"where":[["title","=","x"],["tags","contains","a"],["n","in",[1,2]],["due","prefix","2026"]],"order":["-due","n"]}`,
		`{"where":[["a'); DROP TABLE x--","=",1]]}`, `{"where":[["title","contains","\u0000"]]}`, `{"order":["$.x"]}`,
		`{"where":[["x",">",1e400]]}`, `{"where":[["done","<",true]]}`, `{"where":[["ns","contains",1.5]]}`,
	} {
		f.Add([]byte(s))
	}
	sc := fuzzSchema(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var q abi.DBQueryRequest
		if abi.Unmarshal(raw, &q) != nil {
			return
		}
		conds, err := sc.compileWhere(abi.OpDBQuery, q.Where)
		if err != nil {
			wantRefusal(t, "where", err)
			return
		}
		for _, c := range conds {
			if _, ok := sc.fields[c.Field]; !ok || len(c.Values) == 0 {
				t.Fatalf("a condition on %q with %d values", c.Field, len(c.Values))
			}
		}
		order, err := sc.compileOrder(abi.OpDBQuery, q.Order, conds)
		if err != nil {
			wantRefusal(t, "order", err)
			return
		}
		for _, o := range order {
			if f, ok := sc.fields[o.Field]; !ok || f.array || f.kind == 0 {
				t.Fatalf("an order on %q", o.Field)
			}
		}
	})
}
