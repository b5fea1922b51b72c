package sqlite

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// A model's indexes are real SQLite indexes, and the queries the backend
// writes use them: the partial expression index for conditions on its
// fields, db_terms for an indexed array field.
func TestDBIndexesUsed(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	indexes := []driver.DBIndex{
		{Module: "app", Model: "notes", ByOwner: true, New: true, Fields: []driver.DBIndexField{{Field: "done", Kind: driver.DBBoolean}, {Field: "due", Kind: driver.DBText}}},
		{Module: "app", Model: "notes", ByOwner: true, New: true, Fields: []driver.DBIndexField{{Field: "tags", Kind: driver.DBText, Array: true}}},
	}
	plan := func(map[string][]byte) (map[string][]byte, []driver.DBIndex, error) {
		return map[string][]byte{"notes": []byte(`{}`)}, indexes, nil
	}
	if err := d.DBMigrate(ctx, "", "app", plan); err != nil {
		t.Fatal(err)
	}
	// Twice: the index is named by its definition, so it is made once.
	if err := d.DBMigrate(ctx, "", "app", plan); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := d.r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'db_ix_%'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("db_ix_ indexes: %d, %v; want 1", n, err)
	}
	sc := driver.DBScope{Org: "acme", Module: "app", Model: "notes", Owner: "ann", ByOwner: true}
	for _, tt := range []struct {
		name  string
		q     driver.DBQuery
		index string
	}{
		{"equality and range", driver.DBQuery{Scope: sc, Where: []driver.DBCond{
			{Field: "done", Kind: driver.DBBoolean, Op: "=", Values: []any{false}},
			{Field: "due", Kind: driver.DBText, Op: ">", Values: []any{"2026-01-01T00:00:00.000Z"}}}}, "db_ix_"},
		{"array contains", driver.DBQuery{Scope: sc, Where: []driver.DBCond{
			{Field: "tags", Kind: driver.DBText, Array: true, Terms: true, Op: "contains", Values: []any{"home"}}}}, "db_terms"},
	} {
		var b queryBuilder
		b.sql.WriteString("EXPLAIN QUERY PLAN SELECT id FROM db_documents")
		if err := b.where(tt.q); err != nil {
			t.Fatal(err)
		}
		rows, err := d.r.QueryContext(ctx, b.sql.String(), b.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		t.Logf("%s: %s", tt.name, strings.Join(plan, "; "))
		if !strings.Contains(strings.Join(plan, "\n"), tt.index) {
			t.Errorf("%s: the plan does not use %s:\n%s\n(query %s)", tt.name, tt.index, strings.Join(plan, "\n"), b.sql.String())
		}
	}
}
