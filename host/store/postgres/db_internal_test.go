package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/store/driver"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
)

// A model's indexes are real PostgreSQL indexes, and the queries the
// backend writes can use them: the partial expression btree for
// conditions and order on its fields, the GIN index for an array field's
// contains. (Sequential scans are turned off for the EXPLAIN: on a few
// rows the planner rightly prefers them; what is held here is that the
// query matches the index at all.)
func TestDBIndexesUsed(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	indexes := []driver.DBIndex{
		{Module: "app", Model: "notes", ByOwner: true, New: true, Fields: []driver.DBIndexField{{Field: "done", Kind: driver.DBBoolean}, {Field: "due", Kind: driver.DBText}}},
		{Module: "app", Model: "notes", ByOwner: true, New: true, Fields: []driver.DBIndexField{{Field: "tags", Kind: driver.DBText, Array: true}}},
		{Module: "app", Model: "items", New: true, Fields: []driver.DBIndexField{{Field: "n", Kind: driver.DBInteger}}},
		{Module: "app", Model: "tagged", New: true, Fields: []driver.DBIndexField{{Field: "tags", Kind: driver.DBText, Array: true}}},
	}
	gin, err := indexDDL(indexes[3])
	if err != nil {
		t.Fatal(err)
	}
	gin = strings.Fields(gin)[5] // CREATE INDEX IF NOT EXISTS name ...
	plan := func(map[string][]byte) (map[string][]byte, []driver.DBIndex, error) {
		return map[string][]byte{"notes": []byte(`{}`)}, indexes, nil
	}
	for range 2 { // named by definition: made once
		if err := d.DBMigrate(ctx, "", "app", plan); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = 'db_documents' AND indexname LIKE 'db_ix_%'`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("db_ix_ indexes: %d, %v; want 4", n, err)
	}
	// Enough rows of the array model for the planner to weigh the GIN
	// index against the primary key.
	if _, err := d.pool.Exec(ctx, `
INSERT INTO db_documents (org, module, model, id, owner, version, created, updated, size, doc)
SELECT 'acme', 'app', 'tagged', lpad(to_hex(i), 28, '0'), 'ann', 1, 0, 0, 20,
	json_build_object('tags', json_build_array(CASE WHEN i % 500 = 0 THEN 'home' ELSE 'tag' || i END))
FROM generate_series(1, 5000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.pool.Exec(ctx, `ANALYZE db_documents`); err != nil {
		t.Fatal(err)
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET enable_seqscan`)
	notes := driver.DBScope{Org: "acme", Module: "app", Model: "notes", Owner: "ann", ByOwner: true}
	items := driver.DBScope{Org: "acme", Module: "app", Model: "items"}
	tagged := driver.DBScope{Org: "acme", Module: "app", Model: "tagged"}
	for _, tt := range []struct {
		name  string
		q     driver.DBQuery
		index string
	}{
		{"equality and range", driver.DBQuery{Scope: notes, Where: []driver.DBCond{
			{Field: "done", Kind: driver.DBBoolean, Op: "=", Values: []any{false}},
			{Field: "due", Kind: driver.DBText, Op: ">", Values: []any{"2026-01-01T00:00:00.000Z"}}}}, "db_ix_"},
		{"array contains", driver.DBQuery{Scope: tagged, Where: []driver.DBCond{
			{Field: "tags", Kind: driver.DBText, Array: true, Terms: true, Op: "contains", Values: []any{"home"}}}}, "Bitmap Index Scan on " + gin},
		{"number range", driver.DBQuery{Scope: items, Where: []driver.DBCond{
			{Field: "n", Kind: driver.DBInteger, Op: ">=", Values: []any{int64(3)}}}}, "db_ix_"},
		{"in", driver.DBQuery{Scope: items, Where: []driver.DBCond{
			{Field: "n", Kind: driver.DBInteger, Op: "in", Values: []any{int64(3), int64(4)}}}}, "db_ix_"},
	} {
		var b queryBuilder
		b.sql.WriteString("EXPLAIN SELECT id FROM db_documents")
		if err := b.where(tt.q); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, b.sql.String(), b.args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tt.name, err, b.sql.String())
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		t.Logf("%s: %s", tt.name, strings.Join(plan, "; "))
		if !strings.Contains(strings.Join(plan, "\n"), tt.index) {
			t.Errorf("%s: the plan does not use %s:\n%s\n(query %s)", tt.name, tt.index, strings.Join(plan, "\n"), b.sql.String())
		}
	}
}
