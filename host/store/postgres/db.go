package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// The db family on PostgreSQL: documents as json (the front's canonical
// text, kept as it is), fields compared as what their kind needs:
//
//	text kinds (strings, times)  ((doc->>'f') COLLATE "C")   bytewise, as SQLite's BINARY
//	numbers and booleans         ((doc->'f')::jsonb)          jsonb orders numbers by value
//	arrays (contains)            ((doc->'f')::jsonb) @> '[v]' a GIN index when indexed
//
// These expressions never fail on a row of another shape (no cast of a
// string to a number), so one index of a model serves every
// organization's rows of it. A model's index is a partial expression
// index (WHERE module = '…' AND model = '…'); queries write the same
// expressions and the same literal predicate, so the planner can prove
// the index applies with any plan (a bound parameter would not, once
// pgx's prepared statement gets a generic plan).
//
// Writes lock in one order: the document row, then the organization's
// module's db_usage row (an insert locks only the latter), so concurrent
// writers cannot deadlock; the usage row serializes the quota check
// across replicas.

var _ driver.DocumentBackend = (*DB)(nil)

// dbMigrateLock serializes DBMigrate across replicas ('moat' 'dbm').
const dbMigrateLock = 0x6d6f6174_64626d

// DBMigrate implements driver.DocumentBackend.
func (d *DB) DBMigrate(ctx context.Context, owner, module string, plan driver.DBMigratePlan) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(dbMigrateLock)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT model, schema FROM db_models WHERE owner = $1 AND module = $2`, owner, module)
		if err != nil {
			return err
		}
		stored := map[string][]byte{}
		var model, schema string
		if _, err := pgx.ForEachRow(rows, []any{&model, &schema}, func() error {
			stored[model] = []byte(schema)
			return nil
		}); err != nil {
			return err
		}
		put, indexes, err := plan(stored)
		if err != nil {
			return err
		}
		for model, schema := range put {
			if _, err := tx.Exec(ctx, `
INSERT INTO db_models (owner, module, model, schema, updated) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (owner, module, model) DO UPDATE SET schema = excluded.schema, updated = excluded.updated`,
				owner, module, model, string(schema), time.Now().UnixMilli()); err != nil {
				return err
			}
		}
		for _, ix := range indexes {
			ddl, err := indexDDL(ix)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("index of model %s on %v: %w", ix.Model, ix.Fields, err)
			}
		}
		return nil
	})
}

// indexDDL is the CREATE INDEX of ix, named by its definition.
func indexDDL(ix driver.DBIndex) (string, error) {
	if !driver.ValidDBName(ix.Module) || !driver.ValidDBName(ix.Model) {
		return "", fmt.Errorf("module %q or model %q is not a name this backend writes into SQL", ix.Module, ix.Model)
	}
	var def string
	if len(ix.Fields) == 1 && ix.Fields[0].Array {
		if !driver.ValidDBField(ix.Fields[0].Field) {
			return "", fmt.Errorf("field %q is not a name this backend writes into SQL", ix.Fields[0].Field)
		}
		def = "ON db_documents USING gin ((" + jsonbExpr(ix.Fields[0].Field) + "))"
	} else {
		cols := []string{"org"}
		if ix.ByOwner {
			cols = append(cols, "owner")
		}
		for _, f := range ix.Fields {
			if !driver.ValidDBField(f.Field) || f.Array {
				return "", fmt.Errorf("field %q cannot be a column of a btree index here", f.Field)
			}
			cols = append(cols, "("+fieldExpr(f.Field, f.Kind)+")")
		}
		def = "ON db_documents (" + strings.Join(append(cols, "id"), ", ") + ")"
	}
	def += " WHERE " + partial(ix.Module, ix.Model)
	sum := sha256.Sum256([]byte(def))
	return "CREATE INDEX IF NOT EXISTS db_ix_" + hex.EncodeToString(sum[:8]) + " " + def, nil
}

// fieldExpr is the expression a field of kind k is compared as; field has
// passed driver.ValidDBField.
func fieldExpr(field string, k driver.DBKind) string {
	if k == driver.DBText {
		return "(doc->>'" + field + "') COLLATE \"C\""
	}
	return jsonbExpr(field)
}

func jsonbExpr(field string) string { return "(doc->'" + field + "')::jsonb" }

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
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `
INSERT INTO db_usage AS u (org, module, rows, bytes) VALUES ($1, $2, 0, 0)
ON CONFLICT (org, module) DO UPDATE SET rows = u.rows
RETURNING rows, bytes`, sc.Org, sc.Module).Scan(&u.Rows, &u.Bytes); err != nil {
			return err
		}
		if driver.DBOverQuota(q, u, 1, int64(len(row.Doc))) {
			return driver.ErrOverQuota
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO db_documents (org, module, model, id, owner, version, created, updated, size, doc)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text::json)`,
			sc.Org, sc.Module, sc.Model, row.ID, row.Owner, row.Version, row.Created, row.Updated, len(row.Doc), string(row.Doc)); err != nil {
			return conflict(err)
		}
		_, err := tx.Exec(ctx, `UPDATE db_usage SET rows = rows + 1, bytes = bytes + $3 WHERE org = $1 AND module = $2`,
			sc.Org, sc.Module, len(row.Doc))
		return err
	})
	return u, err
}

// rowQuery is a statement on one document of the scope: its text ends
// with the scope's conditions, the owner's when the model has one.
func rowQuery(sc driver.DBScope, head, tail string, id string) (string, []any) {
	q := head + ` WHERE org = $1 AND module = $2 AND model = $3 AND id = $4`
	args := []any{sc.Org, sc.Module, sc.Model, id}
	if sc.ByOwner {
		q += ` AND owner = $5`
		args = append(args, sc.Owner)
	}
	return q + tail, args
}

const rowColumns = `SELECT id, owner, version, created, updated, doc::text FROM db_documents`

func scanRow(r pgx.Row, extra ...any) (*driver.DBRow, error) {
	var row driver.DBRow
	var doc string
	if err := r.Scan(append([]any{&row.ID, &row.Owner, &row.Version, &row.Created, &row.Updated, &doc}, extra...)...); err != nil {
		return nil, notFound(err)
	}
	row.Doc = []byte(doc)
	return &row, nil
}

// DBGet implements driver.DocumentBackend.
func (d *DB) DBGet(ctx context.Context, sc driver.DBScope, id string) (*driver.DBRow, error) {
	q, args := rowQuery(sc, rowColumns, "", id)
	return scanRow(d.pool.QueryRow(ctx, q, args...))
}

// DBUpdate implements driver.DocumentBackend.
func (d *DB) DBUpdate(ctx context.Context, sc driver.DBScope, id string, version, at int64, q driver.DBQuota, apply driver.DBApply) (out *driver.DBRow, u driver.DBUsage, err error) {
	lock, args := rowQuery(sc, `SELECT id, owner, version, created, updated, doc::text, size FROM db_documents`, " FOR UPDATE", id)
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var size int64
		row, err := scanRow(tx.QueryRow(ctx, lock, args...), &size)
		if err != nil {
			return err
		}
		if version != 0 && row.Version != version {
			return driver.ErrConflict
		}
		doc, _, err := apply(row)
		if err != nil {
			return err
		}
		grow := int64(len(doc)) - size
		if grow != 0 {
			// Locks the usage row and reads it as it was before this write.
			if err := tx.QueryRow(ctx, `UPDATE db_usage SET bytes = bytes + $3 WHERE org = $1 AND module = $2 RETURNING rows, bytes - $3`,
				sc.Org, sc.Module, grow).Scan(&u.Rows, &u.Bytes); err != nil {
				return err
			}
			if driver.DBOverQuota(q, u, 0, grow) {
				return driver.ErrOverQuota
			}
		}
		row.Version++
		row.Updated, row.Doc = at, doc
		_, err = tx.Exec(ctx, `UPDATE db_documents SET doc = $5::text::json, size = $6, version = $7, updated = $8
WHERE org = $1 AND module = $2 AND model = $3 AND id = $4`,
			sc.Org, sc.Module, sc.Model, id, string(doc), len(doc), row.Version, at)
		out = row
		return err
	})
	return out, u, err
}

// DBDelete implements driver.DocumentBackend.
func (d *DB) DBDelete(ctx context.Context, sc driver.DBScope, id string, version int64) (deleted bool, err error) {
	lock, args := rowQuery(sc, `SELECT version, size FROM db_documents`, " FOR UPDATE", id)
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var v, size int64
		if err := tx.QueryRow(ctx, lock, args...).Scan(&v, &size); errors.Is(err, pgx.ErrNoRows) {
			return nil
		} else if err != nil {
			return err
		}
		if version != 0 && v != version {
			return driver.ErrConflict
		}
		if _, err := tx.Exec(ctx, `DELETE FROM db_documents WHERE org = $1 AND module = $2 AND model = $3 AND id = $4`,
			sc.Org, sc.Module, sc.Model, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE db_usage SET rows = rows - 1, bytes = bytes - $3 WHERE org = $1 AND module = $2`,
			sc.Org, sc.Module, size); err != nil {
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

// text binds a string.
func (b *queryBuilder) text(s string) string {
	b.args = append(b.args, s)
	return "$" + strconv.Itoa(len(b.args))
}

// value binds v as field kind k compares it: text for text kinds, jsonb
// (from its JSON text) for the others.
func (b *queryBuilder) value(v any, k driver.DBKind) (string, error) {
	if k == driver.DBText {
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("a %T compared with a text field", v)
		}
		return b.text(s), nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return b.text(string(j)) + "::text::jsonb", nil
}

func (b *queryBuilder) where(q driver.DBQuery) error {
	sc := q.Scope
	if !driver.ValidDBName(sc.Module) || !driver.ValidDBName(sc.Model) {
		return fmt.Errorf("module %q or model %q is not a name this backend writes into SQL", sc.Module, sc.Model)
	}
	b.sql.WriteString(" WHERE org = " + b.text(sc.Org) + " AND " + partial(sc.Module, sc.Model))
	if sc.ByOwner {
		b.sql.WriteString(" AND owner = " + b.text(sc.Owner))
	}
	for _, c := range q.Where {
		if !driver.ValidDBField(c.Field) {
			return fmt.Errorf("field %q is not a name this backend writes into SQL", c.Field)
		}
		if len(c.Values) == 0 {
			return fmt.Errorf("condition on %s has no value", c.Field)
		}
		b.sql.WriteString(" AND ")
		e := fieldExpr(c.Field, c.Kind)
		switch c.Op {
		case "=", "!=", "<", "<=", ">", ">=":
			if c.Array {
				return fmt.Errorf("%s on the array field %s", c.Op, c.Field)
			}
			p, err := b.value(c.Values[0], c.Kind)
			if err != nil {
				return err
			}
			b.sql.WriteString(e + " " + c.Op + " " + p)
		case "in":
			ph := make([]string, len(c.Values))
			for i, v := range c.Values {
				p, err := b.value(v, c.Kind)
				if err != nil {
					return err
				}
				ph[i] = p
			}
			b.sql.WriteString(e + " IN (" + strings.Join(ph, ", ") + ")")
		case "prefix":
			lo, err := b.value(c.Values[0], driver.DBText)
			if err != nil {
				return err
			}
			b.sql.WriteString("(" + e + " >= " + lo)
			if len(c.Values) > 1 {
				hi, err := b.value(c.Values[1], driver.DBText)
				if err != nil {
					return err
				}
				b.sql.WriteString(" AND " + e + " < " + hi)
			}
			b.sql.WriteString(")")
		case "contains":
			if !c.Array {
				s, ok := c.Values[0].(string)
				if !ok {
					return fmt.Errorf("contains of a %T in a string", c.Values[0])
				}
				b.sql.WriteString("strpos(doc->>'" + c.Field + "', " + b.text(s) + ") > 0")
				break
			}
			j, err := json.Marshal([]any{c.Values[0]})
			if err != nil {
				return err
			}
			b.sql.WriteString(jsonbExpr(c.Field) + " @> " + b.text(string(j)) + "::text::jsonb")
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
// order; see the SQLite backend's, which this one mirrors.
func (b *queryBuilder) after(q driver.DBQuery) error {
	if len(q.After) != len(q.Order) {
		return fmt.Errorf("a position of %d values for an order of %d fields", len(q.After), len(q.Order))
	}
	var ors, eqs []string
	for i, o := range q.Order {
		if !driver.ValidDBField(o.Field) {
			return fmt.Errorf("field %q is not a name this backend writes into SQL", o.Field)
		}
		e, v := fieldExpr(o.Field, o.Kind), q.After[i]
		var p string
		if v != nil {
			var err error
			if p, err = b.value(v, o.Kind); err != nil {
				return err
			}
		}
		var next string
		switch {
		case v == nil && o.Desc:
			next = e + " IS NOT NULL"
		case v == nil:
		case o.Desc:
			next = e + " < " + p
		case o.Nullable:
			next = "(" + e + " > " + p + " OR " + e + " IS NULL)"
		default:
			next = e + " > " + p
		}
		if next != "" {
			ors = append(ors, strings.Join(append(append([]string(nil), eqs...), next), " AND "))
		}
		if v == nil {
			eqs = append(eqs, e+" IS NULL")
		} else {
			eqs = append(eqs, e+" = "+p)
		}
	}
	ors = append(ors, strings.Join(append(eqs, "id > "+b.text(q.AfterID)), " AND "))
	b.sql.WriteString(" AND (" + strings.Join(ors, " OR ") + ")")
	return nil
}

// orderBy writes the order: PostgreSQL's own (NULLs last ascending, first
// descending) is the one the db family promises, so no NULLS clause is
// needed, and an index scan serves it either way.
func orderBy(order []driver.DBOrder) string {
	var parts []string
	for _, o := range order {
		e := fieldExpr(o.Field, o.Kind)
		if o.Desc {
			e += " DESC"
		}
		parts = append(parts, e)
	}
	return " ORDER BY " + strings.Join(append(parts, "id"), ", ")
}

// DBQuery implements driver.DocumentBackend.
func (d *DB) DBQuery(ctx context.Context, q driver.DBQuery) ([]driver.DBRow, error) {
	var b queryBuilder
	b.sql.WriteString(rowColumns)
	if err := b.where(q); err != nil {
		return nil, err
	}
	b.args = append(b.args, q.Limit)
	b.sql.WriteString(orderBy(q.Order) + " LIMIT $" + strconv.Itoa(len(b.args)))
	rows, err := d.pool.Query(ctx, b.sql.String(), b.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]driver.DBRow, 0, min(q.Limit, 64))
	var bytes int64
	for rows.Next() {
		var r driver.DBRow
		var doc string
		if err := rows.Scan(&r.ID, &r.Owner, &r.Version, &r.Created, &r.Updated, &doc); err != nil {
			return nil, err
		}
		r.Doc = []byte(doc)
		out = append(out, r)
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
	err = d.pool.QueryRow(ctx, b.sql.String(), b.args...).Scan(&n)
	return n, err
}

// DBUsage implements driver.DocumentBackend.
func (d *DB) DBUsage(ctx context.Context, org, module string) (u driver.DBUsage, err error) {
	err = d.pool.QueryRow(ctx, `SELECT coalesce((SELECT rows FROM db_usage WHERE org = $1 AND module = $2), 0),
	coalesce((SELECT bytes FROM db_usage WHERE org = $1 AND module = $2), 0)`, org, module).Scan(&u.Rows, &u.Bytes)
	return u, err
}
