package postgres_test

import (
	"context"
	"testing"

	"github.com/moat-sandbox/moat/host/store"
	_ "github.com/moat-sandbox/moat/host/store/postgres"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/host/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T, url string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the store conformance suite on PostgreSQL: a
// database per test, and for the shared tests several *store.Store (each
// its own pool, as replicas have) on one database.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *store.Store { return open(t, pgtest.Database(t)) })
	t.Run("Shared", func(t *testing.T) {
		storetest.RunShared(t, func(t *testing.T, n int) []*store.Store {
			url := pgtest.Database(t)
			out := make([]*store.Store, n)
			for i := range out {
				out[i] = open(t, url)
			}
			return out
		})
	})
}
