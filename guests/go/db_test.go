package moat

import (
	"errors"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// The typed db wrappers send the requests of abi's contract (a where as
// [field, op, value] arrays, a document as a JSON object) and read the
// replies into Docs, times parsed.
func TestDB(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	var sent []string
	record := func(op string, reply string) {
		h.ops[op] = func(b []byte) ([]byte, error) {
			sent = append(sent, op+" "+string(b))
			return []byte(reply), nil
		}
	}
	record(abi.OpDBInsert, `{"id":"abc","version":1}`)
	record(abi.OpDBGet, `{"found":true,"id":"abc","version":2,"doc":{"title":"t"},"owner":"ann","created":"2026-01-02T03:04:05.006Z","updated":"2026-01-02T03:04:06.000Z"}`)
	record(abi.OpDBQuery, `{"docs":[{"id":"abc","version":2,"doc":{"title":"t"},"owner":"ann","created":"2026-01-02T03:04:05.006Z","updated":"2026-01-02T03:04:06.000Z"}],"next":"cur"}`)
	record(abi.OpDBUpdate, `{"version":3}`)
	record(abi.OpDBDelete, `{"deleted":true}`)
	record(abi.OpDBCount, `{"count":7}`)

	type note struct {
		Title string    `json:"title"`
		Due   time.Time `json:"due"`
	}
	due := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	id, v, err := DB.Insert("notes", note{Title: "t", Due: due})
	if err != nil || id != "abc" || v != 1 {
		t.Fatalf("Insert = %q, %d, %v", id, v, err)
	}
	d, found, err := DB.Get("notes", "abc")
	var n note
	if err != nil || !found || d.Owner != "ann" || d.Version != 2 || d.Decode(&n) != nil || n.Title != "t" ||
		!d.Created.Equal(time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)) {
		t.Fatalf("Get = %+v, %v, %v", d, found, err)
	}
	p, err := DB.Query("notes", Query{Where: []Cond{Where("done", "=", false), Where("due", "<", due)}, Order: []string{"-due"}, Limit: 5, After: "prev"})
	if err != nil || len(p.Docs) != 1 || p.Next != "cur" || p.Docs[0].ID != "abc" {
		t.Fatalf("Query = %+v, %v", p, err)
	}
	if v, err := DB.Update("notes", "abc", Change{Set: map[string]any{"done": true}, Unset: []string{"due"}, Version: 2}); err != nil || v != 3 {
		t.Fatalf("Update = %d, %v", v, err)
	}
	if ok, err := DB.Delete("notes", "abc", 3); err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if n, err := DB.Count("notes", Where("tags", "contains", "home")); err != nil || n != 7 {
		t.Fatalf("Count = %d, %v", n, err)
	}
	want := []string{
		`db.insert {"model":"notes","doc":{"title":"t","due":"2026-03-01T10:00:00Z"}}`,
		`db.get {"model":"notes","id":"abc"}`,
		`db.query {"model":"notes","where":[["done","=",false],["due","\u003c","2026-03-01T10:00:00Z"]],"order":["-due"],"limit":5,"after":"prev"}`,
		`db.update {"model":"notes","id":"abc","set":{"done":true},"unset":["due"],"version":2}`,
		`db.delete {"model":"notes","id":"abc","version":3}`,
		`db.count {"model":"notes","where":[["tags","contains","home"]]}`,
	}
	for i := range want {
		if i >= len(sent) || sent[i] != want[i] {
			t.Errorf("request %d = %q\nwant %q", i, at(sent, i), want[i])
		}
	}
	// The host's refusals keep their code; a value JSON cannot carry fails before any op.
	h.ops[abi.OpDBGet] = func([]byte) ([]byte, error) { return nil, abi.Errorf(abi.CodeDenied, "db notes is not granted") }
	var ae *abi.Error
	if _, _, err := DB.Get("notes", "abc"); !errors.As(err, &ae) || ae.Code != abi.CodeDenied {
		t.Errorf("denied Get = %v", err)
	}
	if _, err := DB.Count("notes", Where("x", "=", func() {})); !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
		t.Errorf("Count with a func value = %v", err)
	}
	if _, _, err := DB.Insert("notes", make(chan int)); !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
		t.Errorf("Insert of a channel = %v", err)
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "<none>"
}
