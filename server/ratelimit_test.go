package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	_ "github.com/moat-sandbox/moat/host/store/backends"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
)

// BenchmarkRateTake is the cost of one shared rate-bucket take (what a
// request pays per bucket when the rate limits are shared): on SQLite, a
// write transaction; on PostgreSQL, one statement. It is why the server
// shares its buckets only on PostgreSQL: on SQLite one process owns the
// file, and the in-memory bucket is the whole truth for free.
func BenchmarkRateTake(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			loc := b.TempDir()
			if backend == "postgres" {
				loc = pgtest.Database(b)
			}
			st, err := store.Open(context.Background(), loc)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			ctx := context.Background()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, _, err := st.RateTake(ctx, fmt.Sprintf("key:k%d", i%64), 1e9, 1<<30, time.Now()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
