package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
)

// TestTwoReleasesOneDatabase runs the previous release (N-1) and this one
// (N) against one database, in both orders of arrival, as a rolling update
// and its rollback do, and each serves reads and writes that the other
// sees.
//
// The previous release is this code opened as a moat that knows only the
// first N-1 steps (MigrateOptions.Known), not a binary built from git
// history: building the previous commit's moat in a test takes minutes on
// a shared machine and breaks whenever the history is rewritten, while the
// promise under test is the schema's (what an N-1 reader is told and
// allowed), which Known exercises exactly. What it does not exercise is
// N-1's own queries against N's newest step; an expand step (MinReader 0)
// only adds, which is what makes those queries keep working.
func TestTwoReleasesOneDatabase(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	n := 0
	{
		url := pgtest.Database(t)
		r, err := store.Migrate(ctx, url, store.MigrateOptions{DryRun: true, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		n = r.Known
	}
	old := store.MigrateOptions{Known: n - 1, Log: quiet}
	cur := store.MigrateOptions{Log: quiet}
	for _, order := range []string{"old first", "new first"} {
		t.Run(order, func(t *testing.T) {
			url := pgtest.Database(t)
			var a, b *store.Store
			var err error
			if order == "old first" {
				// N-1 creates the database; N arrives and refuses the
				// older schema until `moat migrate` ran; N-1 keeps
				// serving throughout, and after.
				if a, err = store.OpenWith(ctx, url, old); err != nil {
					t.Fatal(err)
				}
				if _, err := store.OpenWith(ctx, url, cur); !errors.Is(err, store.ErrSchemaOlder) {
					t.Fatalf("N on N-1's schema: %v, want ErrSchemaOlder", err)
				}
				rw(t, a, "before the migration")
				if _, err := store.Migrate(ctx, url, cur); err != nil {
					t.Fatal(err)
				}
				if b, err = store.OpenWith(ctx, url, cur); err != nil {
					t.Fatal(err)
				}
			} else {
				// N creates the database; N-1 (a rollback, or a replica
				// not yet replaced) starts on the newer schema.
				if b, err = store.OpenWith(ctx, url, cur); err != nil {
					t.Fatal(err)
				}
				if a, err = store.OpenWith(ctx, url, old); err != nil {
					t.Fatalf("N-1 on N's expand-only schema: %v", err)
				}
			}
			defer a.Close()
			defer b.Close()
			// A replica of N-1 started after the migration, too.
			c, err := store.OpenWith(ctx, url, old)
			if err != nil {
				t.Fatalf("N-1 started after N: %v", err)
			}
			defer c.Close()
			for i, s := range []*store.Store{a, b, c} {
				rw(t, s, fmt.Sprint("replica ", i))
			}
			cross(t, a, b)
			cross(t, b, c)
		})
	}
}

var scope = store.Scope{Org: "acme", Module: "m"}

// rw writes and reads back a kv entry and an audit event on s.
func rw(t *testing.T, s *store.Store, who string) {
	t.Helper()
	ctx := context.Background()
	key := "k-" + who
	if err := s.KVPut(ctx, scope, key, []byte(who)); err != nil {
		t.Fatalf("%s: kv put: %v", who, err)
	}
	if v, ok, err := s.KVGet(ctx, scope, key); err != nil || !ok || string(v) != who {
		t.Fatalf("%s: kv get = %q %v %v", who, v, ok, err)
	}
	if err := s.AuditInsert(ctx, []store.AuditEvent{{Kind: "decision", Decision: "deny", Org: "acme", Module: "m", CorrelationID: who}}); err != nil {
		t.Fatalf("%s: audit: %v", who, err)
	}
}

// cross writes on one replica and reads on the other, both ways.
func cross(t *testing.T, x, y *store.Store) {
	t.Helper()
	ctx := context.Background()
	for i, p := range [][2]*store.Store{{x, y}, {y, x}} {
		key := fmt.Sprintf("cross-%p-%d", x, i)
		if err := p[0].KVPut(ctx, scope, key, []byte("v")); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := p[1].KVGet(ctx, scope, key); err != nil || !ok {
			t.Fatalf("the other release does not see the write: %v %v", ok, err)
		}
		evs, err := p[1].AuditQuery(ctx, store.AuditFilter{Org: "acme", Decision: "deny", Limit: 1000})
		if err != nil || len(evs) == 0 {
			t.Fatalf("the other release reads no audit: %d %v", len(evs), err)
		}
	}
}
