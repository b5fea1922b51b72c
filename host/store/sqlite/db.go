package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// The db family on SQLite: documents in db_documents as TEXT, fields
// read with json_extract(doc, '$.field'). A model's index is a partial
// expression index on those expressions (WHERE module = '…' AND model =
// '…'); a query writes the same expressions and the same literal
// predicate, which is what lets the planner use it (a bound parameter
// would not prove the index's WHERE). SQLite cannot index inside a JSON
// array, so an array field's index is db_terms: a row per element, kept
// in the transaction of every write and filled when the index is new.

var _ driver.DocumentBackend = (*DB)(nil)

const (
	dbUsageRead = `SELECT coalesce((SELECT rows FROM db_usage WHERE org = ?1 AND module = ?2), 0),
	coalesce((SELECT bytes FROM db_usage WHERE org = ?1 AND module = ?2), 0)`
	dbUsageAdd = `INSERT INTO db_usage (org, module, rows, bytes) VALUES (?, ?, ?, ?)
ON CONFLICT (org, module) DO UPDATE SET rows = rows + excluded.rows, bytes = bytes + excluded.bytes`
	dbInsert = `INSERT INTO db_documents (org, module, model, id, owner, version, created, updated, size, doc)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	dbTermInsert  = `INSERT OR IGNORE INTO db_terms (org, module, model, field, value, id) VALUES (?, ?, ?, ?, ?, ?)`
	dbTermsDelete = `DELETE FROM db_terms WHERE org = ? AND module = ? AND model = ? AND id = ?`
	// The statements on one document name the primary key's index: with
	// module and model bound as parameters, SQLite would otherwise check
	// each model's partial index against the bound values and, having
	// read them, re-prepare the statement on every new binding (about
	// 9 µs of a 17 µs db.get).
	dbByID = `db_documents INDEXED BY sqlite_autoindex_db_documents_1`
	dbGet  = `SELECT id, owner, version, created, updated, doc FROM ` + dbByID + `
WHERE org = ? AND module = ? AND model = ? AND id = ?`
	dbGetOwned = dbGet + ` AND owner = ?`
	dbLock     = `SELECT id, owner, version, created, updated, doc, size FROM ` + dbByID + `
WHERE org = ? AND module = ? AND model = ? AND id = ?`
	dbLockOwned = dbLock + ` AND owner = ?`
	dbUpdate    = `UPDATE ` + dbByID + ` SET doc = ?, size = ?, version = ?, updated = ?
WHERE org = ? AND module = ? AND model = ? AND id = ?`
	dbDelete = `DELETE FROM ` + dbByID + ` WHERE org = ? AND module = ? AND model = ? AND id = ?`
)

// scopeArgs are the arguments of a statement's scope (the owner last when
// the scope has one), and get/lock's text for it.
func scopeQuery(sc driver.DBScope, plain, owned string, id string) (string, []any) {
	if sc.ByOwner {
		return owned, []any{sc.Org, sc.Module, sc.Model, id, sc.Owner}
	}
	return plain, []any{sc.Org, sc.Module, sc.Model, id}
}

// sqlValue is how a compared value is bound: SQLite's JSON functions read
// true and false as 1 and 0.
func sqlValue(v any) any {
	if b, ok := v.(bool); ok {
		if b {
			return int64(1)
		}
		return int64(0)
	}
	return v
}

// prepare prepares the statements a write needs before its transaction
// begins (the writer pool's one connection is the transaction's).
func (d *DB) prepareAll(ctx context.Context, queries ...string) ([]*sql.Stmt, error) {
	out := make([]*sql.Stmt, len(queries))
	for i, q := range queries {
		st, err := d.prepared(ctx, d.w, q)
		if err != nil {
			return nil, err
		}
		out[i] = st
	}
	return out, nil
}

// DBMigrate implements driver.DocumentBackend. The IMMEDIATE transaction
// holds the file's write lock: migrations of every process serialize.
func (d *DB) DBMigrate(ctx context.Context, owner, module string, plan driver.DBMigratePlan) error {
	return d.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT model, schema FROM db_models WHERE owner = ? AND module = ?`, owner, module)
		if err != nil {
			return err
		}
		stored := map[string][]byte{}
		for rows.Next() {
			var model, schema string
			if err := rows.Scan(&model, &schema); err != nil {
				rows.Close()
				return err
			}
			stored[model] = []byte(schema)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		put, indexes, err := plan(stored)
		if err != nil {
			return err
		}
		for model, schema := range put {
			if _, err := tx.ExecContext(ctx, `
INSERT INTO db_models (owner, module, model, schema, updated) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (owner, module, model) DO UPDATE SET schema = excluded.schema, updated = excluded.updated`,
				owner, module, model, string(schema), time.Now().UnixMilli()); err != nil {
				return err
			}
		}
		for _, ix := range indexes {
			if err := migrateIndex(ctx, tx, ix); err != nil {
				return fmt.Errorf("index of model %s on %v: %w", ix.Model, ix.Fields, err)
			}
		}
		return nil
	})
}

// migrateIndex makes index ix exist: a partial expression index, named by
// its definition, or, for an array field, the terms of the field when the
// index is new (stale terms from an earlier index of the field are
// dropped first).
func migrateIndex(ctx context.Context, tx *sql.Tx, ix driver.DBIndex) error {
	if !driver.ValidDBName(ix.Module) || !driver.ValidDBName(ix.Model) {
		return fmt.Errorf("module %q or model %q is not a name this backend writes into SQL", ix.Module, ix.Model)
	}
	for _, f := range ix.Fields {
		if !driver.ValidDBField(f.Field) {
			return fmt.Errorf("field %q is not a name this backend writes into SQL", f.Field)
		}
	}
	if len(ix.Fields) == 1 && ix.Fields[0].Array {
		if !ix.New {
			return nil
		}
		f := ix.Fields[0].Field
		// ?1 module, ?2 model, ?3 field, ?4 organization (when the
		// module is loaded for one).
		args, del, only := []any{ix.Module, ix.Model, f}, "", ""
		if ix.Org != "" {
			args, del, only = append(args, ix.Org), " AND org = ?4", " AND d.org = ?4"
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM db_terms WHERE module = ?1 AND model = ?2 AND field = ?3`+del, args...); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
INSERT OR IGNORE INTO db_terms (org, module, model, field, value, id)
SELECT d.org, d.module, d.model, ?3, j.value, d.id
FROM db_documents d, json_each(d.doc, '$.`+f+`') j
WHERE d.module = ?1 AND d.model = ?2`+only+`
	AND json_type(d.doc, '$.`+f+`') = 'array' AND j.type IN ('text', 'integer', 'real', 'true', 'false')`, args...)
		return err
	}
	cols := []string{"org"}
	if ix.ByOwner {
		cols = append(cols, "owner")
	}
	for _, f := range ix.Fields {
		cols = append(cols, jsonExpr(f.Field))
	}
	cols = append(cols, "id")
	def := "ON db_documents (" + strings.Join(cols, ", ") + ") WHERE " + partial(ix.Module, ix.Model)
	sum := sha256.Sum256([]byte(def))
	_, err := tx.ExecContext(ctx, "CREATE INDEX IF NOT EXISTS db_ix_"+hex.EncodeToString(sum[:8])+" "+def)
	return err
}

// jsonExpr is the expression of a declared field: what indexes are made
// of and what queries compare. field has passed driver.ValidDBField.
func jsonExpr(field string) string { return "json_extract(doc, '$." + field + "')" }

// partial is the predicate of a model's indexes, written the same way in
// every query of the model.
func partial(module, model string) string {
	return "module = " + quote(module) + " AND model = " + quote(model)
}

// quote writes s as an SQL string literal; s has passed driver.ValidDBName,
// and quotes are doubled all the same.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// DBInsert implements driver.DocumentBackend.
func (d *DB) DBInsert(ctx context.Context, sc driver.DBScope, row driver.DBRow, terms []driver.DBTerm, q driver.DBQuota) (u driver.DBUsage, err error) {
	st, err := d.prepareAll(ctx, dbUsageRead, dbInsert, dbTermInsert, dbUsageAdd)
	if err != nil {
		return u, err
	}
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		if err := tx.StmtContext(ctx, st[0]).QueryRowContext(ctx, sc.Org, sc.Module).Scan(&u.Rows, &u.Bytes); err != nil {
			return err
		}
		if driver.DBOverQuota(q, u, 1, int64(len(row.Doc))) {
			return driver.ErrOverQuota
		}
		if _, err := tx.StmtContext(ctx, st[1]).ExecContext(ctx, sc.Org, sc.Module, sc.Model, row.ID, row.Owner, row.Version,
			row.Created, row.Updated, len(row.Doc), string(row.Doc)); err != nil {
			if isConstraint(err) {
				return fmt.Errorf("%w: document %s exists", driver.ErrConflict, row.ID)
			}
			return err
		}
		if err := insertTerms(ctx, tx.StmtContext(ctx, st[2]), sc, row.ID, terms); err != nil {
			return err
		}
		_, err := tx.StmtContext(ctx, st[3]).ExecContext(ctx, sc.Org, sc.Module, 1, len(row.Doc))
		return err
	})
	return u, err
}

func insertTerms(ctx context.Context, st *sql.Stmt, sc driver.DBScope, id string, terms []driver.DBTerm) error {
	for _, t := range terms {
		if _, err := st.ExecContext(ctx, sc.Org, sc.Module, sc.Model, t.Field, sqlValue(t.Value), id); err != nil {
			return err
		}
	}
	return nil
}

func scanDBRow(r rowScanner, extra ...any) (*driver.DBRow, error) {
	var row driver.DBRow
	var doc string
	if err := r.Scan(append([]any{&row.ID, &row.Owner, &row.Version, &row.Created, &row.Updated, &doc}, extra...)...); err != nil {
		return nil, err
	}
	row.Doc = []byte(doc)
	return &row, nil
}

// DBGet implements driver.DocumentBackend.
func (d *DB) DBGet(ctx context.Context, sc driver.DBScope, id string) (*driver.DBRow, error) {
	q, args := scopeQuery(sc, dbGet, dbGetOwned, id)
	st, err := d.prepared(ctx, d.r, q)
	if err != nil {
		return nil, err
	}
	row, err := scanDBRow(st.QueryRowContext(ctx, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	return row, err
}

// DBUpdate implements driver.DocumentBackend.
func (d *DB) DBUpdate(ctx context.Context, sc driver.DBScope, id string, version, at int64, q driver.DBQuota, apply driver.DBApply) (out *driver.DBRow, u driver.DBUsage, err error) {
	lockQ, args := scopeQuery(sc, dbLock, dbLockOwned, id)
	st, err := d.prepareAll(ctx, lockQ, dbUsageRead, dbUpdate, dbTermsDelete, dbTermInsert, dbUsageAdd)
	if err != nil {
		return nil, u, err
	}
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		var size int64
		row, err := scanDBRow(tx.StmtContext(ctx, st[0]).QueryRowContext(ctx, args...), &size)
		if errors.Is(err, sql.ErrNoRows) {
			return driver.ErrNotFound
		}
		if err != nil {
			return err
		}
		if version != 0 && row.Version != version {
			return driver.ErrConflict
		}
		doc, terms, err := apply(row)
		if err != nil {
			return err
		}
		grow := int64(len(doc)) - size
		if grow > 0 {
			if err := tx.StmtContext(ctx, st[1]).QueryRowContext(ctx, sc.Org, sc.Module).Scan(&u.Rows, &u.Bytes); err != nil {
				return err
			}
			if driver.DBOverQuota(q, u, 0, grow) {
				return driver.ErrOverQuota
			}
		}
		row.Version++
		row.Updated, row.Doc = at, doc
		if _, err := tx.StmtContext(ctx, st[2]).ExecContext(ctx, string(doc), len(doc), row.Version, at, sc.Org, sc.Module, sc.Model, id); err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, st[3]).ExecContext(ctx, sc.Org, sc.Module, sc.Model, id); err != nil {
			return err
		}
		if err := insertTerms(ctx, tx.StmtContext(ctx, st[4]), sc, id, terms); err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, st[5]).ExecContext(ctx, sc.Org, sc.Module, 0, grow); err != nil {
			return err
		}
		out = row
		return nil
	})
	return out, u, err
}

// DBDelete implements driver.DocumentBackend.
func (d *DB) DBDelete(ctx context.Context, sc driver.DBScope, id string, version int64) (deleted bool, err error) {
	lockQ, args := scopeQuery(sc, dbLock, dbLockOwned, id)
	st, err := d.prepareAll(ctx, lockQ, dbDelete, dbTermsDelete, dbUsageAdd)
	if err != nil {
		return false, err
	}
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		var size int64
		row, err := scanDBRow(tx.StmtContext(ctx, st[0]).QueryRowContext(ctx, args...), &size)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if version != 0 && row.Version != version {
			return driver.ErrConflict
		}
		if _, err := tx.StmtContext(ctx, st[1]).ExecContext(ctx, sc.Org, sc.Module, sc.Model, id); err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, st[2]).ExecContext(ctx, sc.Org, sc.Module, sc.Model, id); err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, st[3]).ExecContext(ctx, sc.Org, sc.Module, -1, -size); err != nil {
			return err
		}
		deleted = true
		return nil
	})
	return deleted, err
}

// queryBuilder writes the WHERE clause of a query: the scope, the
// conditions, the position after the previous page. Every value is a
// bound parameter; the only text from the request is field names (each
// checked with driver.ValidDBField) and the module and model (checked
// with driver.ValidDBName, quoted).
type queryBuilder struct {
	sql  strings.Builder
	args []any
}

// arg binds v and returns its placeholder, numbered: the position of a
// row after a page repeats its equalities, so one placeholder may appear
// in the text more than once.
func (b *queryBuilder) arg(v any) string {
	b.args = append(b.args, sqlValue(v))
	return "?" + strconv.Itoa(len(b.args))
}

func (b *queryBuilder) where(q driver.DBQuery) error {
	sc := q.Scope
	if !driver.ValidDBName(sc.Module) || !driver.ValidDBName(sc.Model) {
		return fmt.Errorf("module %q or model %q is not a name this backend writes into SQL", sc.Module, sc.Model)
	}
	b.sql.WriteString(" WHERE org = " + b.arg(sc.Org) + " AND " + partial(sc.Module, sc.Model))
	if sc.ByOwner {
		b.sql.WriteString(" AND owner = " + b.arg(sc.Owner))
	}
	for _, c := range q.Where {
		if !driver.ValidDBField(c.Field) {
			return fmt.Errorf("field %q is not a name this backend writes into SQL", c.Field)
		}
		if len(c.Values) == 0 {
			return fmt.Errorf("condition on %s has no value", c.Field)
		}
		b.sql.WriteString(" AND ")
		e := jsonExpr(c.Field)
		switch c.Op {
		case "=", "!=", "<", "<=", ">", ">=":
			if c.Array {
				return fmt.Errorf("%s on the array field %s", c.Op, c.Field)
			}
			b.sql.WriteString(e + " " + c.Op + " " + b.arg(c.Values[0]))
		case "in":
			ph := make([]string, len(c.Values))
			for i, v := range c.Values {
				ph[i] = b.arg(v)
			}
			b.sql.WriteString(e + " IN (" + strings.Join(ph, ", ") + ")")
		case "prefix":
			b.sql.WriteString("(" + e + " >= " + b.arg(c.Values[0]))
			if len(c.Values) > 1 {
				b.sql.WriteString(" AND " + e + " < " + b.arg(c.Values[1]))
			}
			b.sql.WriteString(")")
		case "contains":
			switch {
			case !c.Array:
				b.sql.WriteString("instr(" + e + ", " + b.arg(c.Values[0]) + ") > 0")
			case c.Terms:
				b.sql.WriteString("id IN (SELECT id FROM db_terms WHERE org = " + b.arg(sc.Org) + " AND module = " + b.arg(sc.Module) +
					" AND model = " + b.arg(sc.Model) + " AND field = " + b.arg(c.Field) + " AND value = " + b.arg(c.Values[0]) + ")")
			default:
				b.sql.WriteString("EXISTS (SELECT 1 FROM json_each(doc, '$." + c.Field + "') j WHERE j.value = " + b.arg(c.Values[0]) + ")")
			}
		default:
			return fmt.Errorf("operator %q", c.Op)
		}
	}
	if q.HasAfter {
		return b.after(q)
	}
	return nil
}

// after writes the rows that follow (After..., AfterID) in (Order..., id)
// order, ascending putting rows without a field last and descending
// first:
//
//	f0 after v0
//	OR f0 = v0 AND f1 after v1
//	...
//	OR f0 = v0 AND ... AND id > AfterID
func (b *queryBuilder) after(q driver.DBQuery) error {
	if len(q.After) != len(q.Order) {
		return fmt.Errorf("a position of %d values for an order of %d fields", len(q.After), len(q.Order))
	}
	var ors, eqs []string
	for i, o := range q.Order {
		if !driver.ValidDBField(o.Field) {
			return fmt.Errorf("field %q is not a name this backend writes into SQL", o.Field)
		}
		e, v := jsonExpr(o.Field), q.After[i]
		var next string
		switch {
		case v == nil && o.Desc:
			next = e + " IS NOT NULL"
		case v == nil:
			// ascending: nothing but ties follows a row without the field
		case o.Desc:
			next = e + " < " + b.arg(v)
		case o.Nullable:
			next = "(" + e + " > " + b.arg(v) + " OR " + e + " IS NULL)"
		default:
			next = e + " > " + b.arg(v)
		}
		if next != "" {
			ors = append(ors, strings.Join(append(append([]string(nil), eqs...), next), " AND "))
		}
		if v == nil {
			eqs = append(eqs, e+" IS NULL")
		} else {
			eqs = append(eqs, e+" = "+b.arg(v))
		}
	}
	ors = append(ors, strings.Join(append(eqs, "id > "+b.arg(q.AfterID)), " AND "))
	b.sql.WriteString(" AND (" + strings.Join(ors, " OR ") + ")")
	return nil
}

// orderBy writes the order: each field (rows without it last when
// ascending, first when descending: the order PostgreSQL's indexes keep,
// written out for SQLite, whose NULLs sort first), then id.
func orderBy(order []driver.DBOrder) string {
	var parts []string
	for _, o := range order {
		e := jsonExpr(o.Field)
		switch {
		case o.Desc && o.Nullable:
			parts = append(parts, e+" DESC NULLS FIRST")
		case o.Desc:
			parts = append(parts, e+" DESC")
		case o.Nullable:
			parts = append(parts, e+" ASC NULLS LAST")
		default:
			parts = append(parts, e)
		}
	}
	return " ORDER BY " + strings.Join(append(parts, "id"), ", ")
}

// DBQuery implements driver.DocumentBackend.
func (d *DB) DBQuery(ctx context.Context, q driver.DBQuery) ([]driver.DBRow, error) {
	var b queryBuilder
	b.sql.WriteString("SELECT id, owner, version, created, updated, doc FROM db_documents")
	if err := b.where(q); err != nil {
		return nil, err
	}
	b.sql.WriteString(orderBy(q.Order) + " LIMIT " + b.arg(int64(q.Limit)))
	rows, err := d.r.QueryContext(ctx, b.sql.String(), b.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]driver.DBRow, 0, min(q.Limit, 64))
	var bytes int64
	for rows.Next() {
		r, err := scanDBRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *r)
		if bytes += int64(len(r.Doc)); q.MaxBytes > 0 && bytes > q.MaxBytes {
			break
		}
	}
	return out, rows.Err()
}

// DBCount implements driver.DocumentBackend.
func (d *DB) DBCount(ctx context.Context, q driver.DBQuery) (n int64, err error) {
	var b queryBuilder
	b.sql.WriteString("SELECT count(*) FROM db_documents")
	q.HasAfter = false
	if err := b.where(q); err != nil {
		return 0, err
	}
	err = d.r.QueryRowContext(ctx, b.sql.String(), b.args...).Scan(&n)
	return n, err
}

// DBUsage implements driver.DocumentBackend.
func (d *DB) DBUsage(ctx context.Context, org, module string) (u driver.DBUsage, err error) {
	st, err := d.prepared(ctx, d.r, dbUsageRead)
	if err != nil {
		return u, err
	}
	err = st.QueryRowContext(ctx, org, module).Scan(&u.Rows, &u.Bytes)
	return u, err
}
