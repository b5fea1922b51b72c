package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
)

// BenchmarkDBvsKV (here, where the PostgreSQL backend is linked in; the
// SQLite half needs nothing) measures the db family's store calls per call beside
// kv's on the same backend: db.get beside kv.get, db.insert beside kv.put
// (under a quota, as the ops run them), and a db.query of one indexed
// page and a db.update. The model is the notes (scope: user, an
// index on [done, due] and one on [tags]), with 1000 documents stored.
func BenchmarkDBvsKV(b *testing.B) {
	ctx := context.Background()
	for _, backend := range []struct {
		name string
		url  func(b *testing.B) string
	}{
		{"sqlite", func(b *testing.B) string { return b.TempDir() }},
		{"postgres", func(b *testing.B) string { return pgtest.Database(b) }},
	} {
		b.Run(backend.name, func(b *testing.B) {
			s, err := store.Open(ctx, backend.url(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			max := 200.0
			notes, err := store.CompileModel(store.Model{Name: "notes", Scope: abi.DBScopeUser, Fields: map[string]store.Field{
				"title": {Type: abi.DBString, Required: true, Max: &max},
				"tags":  {Type: "[string]"},
				"due":   {Type: abi.DBTime},
				"done":  {Type: abi.DBBool},
			}, Indexes: [][]string{{"done", "due"}, {"tags"}}})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.DBMigrate(ctx, "", "hello", []*store.Schema{notes}); err != nil {
				b.Fatal(err)
			}
			sc := store.DBScope{Org: "acme", Module: "hello", User: "ann"}
			kv := store.Scope{Org: "acme", Module: "hello"}
			quota := store.DBQuota{Rows: 1 << 40, Bytes: 1 << 40}
			doc := []byte(`{"title":"buy milk","tags":["home","shop"],"due":"2026-03-01T10:00:00Z","done":false}`)
			var id string
			for i := range 1000 {
				d := fmt.Appendf(nil, `{"title":"note %d","tags":["t%d"],"due":"2026-03-%02dT10:00:00Z","done":%v}`, i, i%10, 1+i%28, i%2 == 0)
				if id, _, err = s.DBInsert(ctx, sc, notes, d, quota); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.KVPut(ctx, kv, "count", []byte("12345")); err != nil {
				b.Fatal(err)
			}
			b.Run("kv.get", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := s.KVGet(ctx, kv, "count"); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("db.get", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, found, err := s.DBGet(ctx, sc, notes, id); err != nil || !found {
						b.Fatal(found, err)
					}
				}
			})
			b.Run("kv.put", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := s.KVPutWithin(ctx, kv, "count", []byte("12345"), 1<<40); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("db.insert", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := s.DBInsert(ctx, sc, notes, doc, quota); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("db.update", func(b *testing.B) {
				b.ReportAllocs()
				set := []byte(`{"done":true}`)
				for b.Loop() {
					if _, err := s.DBUpdate(ctx, sc, notes, id, set, nil, 0, quota); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("db.query-indexed-10", func(b *testing.B) {
				b.ReportAllocs()
				q := store.DBQuery{Where: []abi.DBCondition{mustWhere(b, "done", "=", false), mustWhere(b, "due", ">=", "2026-03-10T00:00:00Z")}, Order: []string{"due"}, Limit: 10}
				for b.Loop() {
					if docs, _, err := s.DBQuery(ctx, sc, notes, q); err != nil || len(docs) != 10 {
						b.Fatal(len(docs), err)
					}
				}
			})
		})
	}
}

func mustWhere(b *testing.B, field, op string, v any) abi.DBCondition {
	c, err := abi.Where(field, op, v)
	if err != nil {
		b.Fatal(err)
	}
	return c
}
