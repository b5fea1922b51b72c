package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/host/store/storetest"
)

// TestDBCollation runs the db family's tests on a database whose default
// collation is ICU's en-US, where "apple" sorts before "Banana" and
// punctuation is nearly ignored: the backend compares strings and times
// with COLLATE "C" (bytewise, as SQLite does), so orders, ranges, prefixes
// and cursors come out as on SQLite whatever the operator's database says.
func TestDBCollation(t *testing.T) {
	base := pgtest.URL(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	storetest.RunDB(t, func(t *testing.T) *store.Store {
		var b [6]byte
		rand.Read(b[:])
		name := "moat_icu_" + hex.EncodeToString(b[:])
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'"); err != nil {
			t.Skipf("this server cannot make an ICU database: %v", err)
		}
		t.Cleanup(func() { admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + name
		return open(t, u.String())
	})
}
