package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
)

// This benchmark lives beside the PostgreSQL backend, which it needs
// linked in: package store's own tests hold that a binary without it
// refuses postgres:// URLs (TestOpenSelectsBackend).

// BenchmarkKnowledge measures knowledge.add and knowledge.search on each
// backend (PostgreSQL when pgtest finds a server), over a collection of
// 2000 documents of 120 words drawn from 5000 with a Zipf law (a few words
// everywhere, most rare), beside 2000 documents of another organization
// holding the same words (PostgreSQL analyzed after the load, as
// autovacuum would): adding a new document, replacing one, and searching
// for a rare word, two words, a common word (every document a hit,
// ranked), and a common word under a meta filter.
func BenchmarkKnowledge(b *testing.B) {
	ctx := context.Background()
	backends := []struct {
		name    string
		open    func(b *testing.B) string
		analyze func(b *testing.B, url string) // after the load, as autovacuum would in time
	}{
		{"sqlite", func(b *testing.B) string { return b.TempDir() }, func(*testing.B, string) {}},
		{"postgres", func(b *testing.B) string { return pgtest.Database(b) }, func(b *testing.B, url string) {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
				b.Fatal(err)
			}
		}},
	}
	vocab := make([]string, 5000)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%dx%s", i, strconv.FormatInt(int64(i*7919%4099), 36))
	}
	zipf := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, uint64(len(vocab)-1))
	text := func() string {
		w := make([]string, 120)
		for i := range w {
			w[i] = vocab[zipf.Uint64()]
		}
		return strings.Join(w, " ")
	}
	const docs = 2000
	corpus := make([]string, docs)
	for i := range corpus {
		corpus[i] = text()
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			url := be.open(b)
			s, err := store.Open(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			sc := store.Scope{Org: "acme", Module: "kb"}
			for i, t := range corpus {
				for _, org := range []string{"acme", "globex"} {
					doc := store.KnowledgeDoc{Collection: "docs", ID: fmt.Sprint("d", i), Text: t, Owner: "ann",
						Meta: map[string]any{"lang": []string{"en", "fr"}[i%2], "n": i}}
					if _, err := s.KnowledgeAdd(ctx, store.Scope{Org: org, Module: "kb"}, doc, store.KnowledgeQuota{}); err != nil {
						b.Fatal(err)
					}
				}
			}
			be.analyze(b, url)
			quota := store.KnowledgeQuota{Documents: 1 << 30, Bytes: 1 << 40}
			b.Run("add", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					doc := store.KnowledgeDoc{Collection: "new", ID: fmt.Sprint("n", i), Text: corpus[i%docs], Meta: map[string]any{"n": i}}
					if _, err := s.KnowledgeAdd(ctx, sc, doc, quota); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("replace", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					doc := store.KnowledgeDoc{Collection: "docs", ID: "d7", Text: corpus[i%docs]}
					if _, err := s.KnowledgeAdd(ctx, sc, doc, quota); err != nil {
						b.Fatal(err)
					}
				}
			})
			for _, q := range []struct {
				name, query string
				filter      map[string]any
			}{
				{"search-rare", vocab[3000], nil},
				{"search-two", vocab[40] + " " + vocab[60], nil},
				{"search-common", vocab[1], nil},
				{"search-common-filter", vocab[1], map[string]any{"lang": "fr"}},
			} {
				b.Run(q.name, func(b *testing.B) {
					b.ReportAllocs()
					var hits int
					for b.Loop() {
						h, err := s.KnowledgeSearch(ctx, sc, store.KnowledgeQuery{Collection: "docs", Query: q.query, Filter: q.filter})
						if err != nil {
							b.Fatal(err)
						}
						hits = len(h)
					}
					b.ReportMetric(float64(hits), "hits")
				})
			}
		})
	}
}
