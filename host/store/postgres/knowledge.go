package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// KnowledgeBackend is the knowledge family's storage (driver.Families).
var _ driver.KnowledgeBackend = (*DB)(nil)

// Knowledge on PostgreSQL: a tsvector per document (of the front's terms,
// through the 'simple' configuration, which only lower-cases), a GIN index
// over them, and ts_rank with length normalization 1 (the rank divided by
// 1 + the log of the document's length). The query is
// plainto_tsquery('simple', terms) with the terms bound as one parameter:
// the AND of its words, no operators read from it (there are none in it
// anyway: the front's terms are a-z 0-9).
//
// Each term is indexed behind a prefix of its collection (collPrefix), as
// on SQLite: ts_rank reads nothing but the document, so no score depends
// on another collection anyway, but the GIN index is shared, and without
// the prefix a search would walk every organization's postings of its
// words, and take longer the more documents elsewhere hold them.

// collPrefix is the prefix of a collection's terms: k and 8 hex digits
// of the SHA-256 of its org, module and name. It is short because it is
// in every lexeme (16 digits made a 120-word document's tsvector too
// large to stay in its row, and a scan 2.5 times slower); a collision
// only puts two collections' postings side by side, since every statement
// also filters by org, module and collection. A term starts with a
// letter, so the prefix ends where it begins.
func collPrefix(org, module, collection string) string {
	h := sha256.Sum256([]byte(org + "\x00" + module + "\x00" + collection))
	return "k" + hex.EncodeToString(h[:4])
}

// prefixedTerms joins terms, each behind prefix, with spaces.
func prefixedTerms(prefix string, terms []string) string {
	var b strings.Builder
	for i, t := range terms {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(prefix)
		b.WriteString(t)
	}
	return b.String()
}

// knowledgeLock locks the module's knowledge_usage row (creating it
// empty) and returns what the module stores. Every knowledge write takes
// it first: the usage trigger would lock the row anyway, after the
// document's, and one order for every writer keeps two from deadlocking.
const knowledgeLock = `
INSERT INTO knowledge_usage AS u (org, module, docs, bytes) VALUES ($1, $2, 0, 0)
ON CONFLICT (org, module) DO UPDATE SET docs = u.docs
RETURNING docs, bytes`

const knowledgeUpsert = `
INSERT INTO knowledge_docs (org, module, collection, id, owner, text, meta, tsv, bytes, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, to_tsvector('simple', $8), $9, $10)
ON CONFLICT (org, module, collection, id) DO UPDATE SET
	owner = excluded.owner, text = excluded.text, meta = excluded.meta, tsv = excluded.tsv,
	bytes = excluded.bytes, updated_at = excluded.updated_at`

const knowledgeVector = `
INSERT INTO knowledge_vectors (org, module, collection, id, model, vec) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (org, module, collection, id) DO UPDATE SET model = excluded.model, vec = excluded.vec`

// KnowledgeAdd implements driver.Backend: the usage is read under the
// module's lock (knowledgeLock), and the document being replaced after
// it, by a statement whose snapshot sees every write committed before the
// lock was granted.
func (d *DB) KnowledgeAdd(ctx context.Context, doc driver.KnowledgeDoc, quota driver.KnowledgeUsage) (replaced bool, inUse, adds driver.KnowledgeUsage, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, knowledgeLock, doc.Org, doc.Module).Scan(&inUse.Docs, &inUse.Bytes); err != nil {
			return err
		}
		var old int64
		err := tx.QueryRow(ctx, `SELECT bytes FROM knowledge_docs WHERE org = $1 AND module = $2 AND collection = $3 AND id = $4`,
			doc.Org, doc.Module, doc.Collection, doc.ID).Scan(&old)
		switch {
		case err == nil:
			replaced = true
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		adds = driver.KnowledgeUsage{Docs: 1, Bytes: doc.Bytes - old}
		if replaced {
			adds.Docs = 0
		}
		if driver.OverKnowledgeQuota(quota, inUse, adds) {
			return driver.ErrOverQuota
		}
		if _, err = tx.Exec(ctx, knowledgeUpsert, doc.Org, doc.Module, doc.Collection, doc.ID, doc.Owner, doc.Text, doc.Meta,
			prefixedTerms(collPrefix(doc.Org, doc.Module, doc.Collection), doc.Terms), doc.Bytes, doc.At); err != nil {
			return err
		}
		// The vector of the new text, or none: never the old text's.
		if doc.Vector != nil {
			_, err = tx.Exec(ctx, knowledgeVector, doc.Org, doc.Module, doc.Collection, doc.ID, doc.VectorModel, doc.Vector)
		} else if replaced {
			_, err = tx.Exec(ctx, `DELETE FROM knowledge_vectors WHERE org = $1 AND module = $2 AND collection = $3 AND id = $4`,
				doc.Org, doc.Module, doc.Collection, doc.ID)
		}
		return err
	})
	return replaced, inUse, adds, err
}

// KnowledgeDelete implements driver.Backend, under the module's lock.
func (d *DB) KnowledgeDelete(ctx context.Context, org, module, collection, id string) (deleted bool, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var u driver.KnowledgeUsage
		if err := tx.QueryRow(ctx, knowledgeLock, org, module).Scan(&u.Docs, &u.Bytes); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM knowledge_docs WHERE org = $1 AND module = $2 AND collection = $3 AND id = $4`,
			org, module, collection, id)
		deleted = tag.RowsAffected() > 0
		return err
	})
	return deleted, err
}

// knowledgeSearch: the documents of the collection whose tsvector holds
// every term and whose meta contains the filter (jsonb @>: each key with
// an equal value of the same JSON type; numbers compare as numbers).
const knowledgeSearch = `
SELECT id, ts_rank(tsv, q, 1)::float8 AS score, text, meta::text
FROM knowledge_docs, plainto_tsquery('simple', $4) AS q
WHERE org = $1 AND module = $2 AND collection = $3 AND tsv @@ q AND meta @> $5::jsonb
ORDER BY score DESC, id
LIMIT $6`

// KnowledgeSearch implements driver.Backend. The statement is planned
// for each search's own terms (QueryExecModeExec: an unnamed statement,
// planned at bind; a cached generic plan cannot tell a rare word from a
// common one), and never as a scan of the table (SET LOCAL
// enable_seqscan = off, in a read-only transaction): the planner does not
// count the cost of decompressing each row's tsvector, and for a word in
// every document of a collection it read every organization's documents
// (17 ms, 4000 rows) rather than the collection's by the primary key
// (7 ms). So a search reads the GIN index or its own collection's rows,
// never another's.
func (d *DB) KnowledgeSearch(ctx context.Context, q driver.KnowledgeQuery) (out []driver.KnowledgeCandidate, err error) {
	err = pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, knowledgeSearch, pgx.QueryExecModeExec, q.Org, q.Module, q.Collection,
			prefixedTerms(collPrefix(q.Org, q.Module, q.Collection), q.Terms), q.Filter, q.Limit)
		if err != nil {
			return err
		}
		var c driver.KnowledgeCandidate
		_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.Score, &c.Text, &c.Meta}, func() error {
			out = append(out, c)
			return nil
		})
		return err
	})
	return out, err
}

// KnowledgeUsage implements driver.Backend.
func (d *DB) KnowledgeUsage(ctx context.Context, org, module string) (u driver.KnowledgeUsage, err error) {
	err = d.pool.QueryRow(ctx, `SELECT docs, bytes FROM knowledge_usage WHERE org = $1 AND module = $2`, org, module).Scan(&u.Docs, &u.Bytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.KnowledgeUsage{}, nil
	}
	return u, err
}

// knowledgeVectors reads a collection's vectors of one model whose
// document's meta contains the filter, the most recently updated first;
// the documents are chosen (and sorted) before their vectors are read, so
// the sort carries ids, not vectors.
const knowledgeVectors = `
WITH recent AS (
	SELECT d.id, d.updated_at FROM knowledge_docs AS d
	WHERE d.org = $1 AND d.module = $2 AND d.collection = $3 AND d.meta @> $5::jsonb
		AND EXISTS (SELECT 1 FROM knowledge_vectors AS v
			WHERE v.org = d.org AND v.module = d.module AND v.collection = d.collection AND v.id = d.id AND v.model = $4)
	ORDER BY d.updated_at DESC, d.id DESC
	LIMIT $6)
SELECT r.id, v.vec FROM recent AS r
JOIN knowledge_vectors AS v ON v.org = $1 AND v.module = $2 AND v.collection = $3 AND v.id = r.id`

// KnowledgeVectors implements driver.Backend.
func (d *DB) KnowledgeVectors(ctx context.Context, q driver.KnowledgeVectorQuery, each func(id string, vec []byte) error) error {
	rows, err := d.pool.Query(ctx, knowledgeVectors, q.Org, q.Module, q.Collection, q.Model, q.Filter, q.Limit)
	if err != nil {
		return err
	}
	defer rows.Close()
	var id string
	var vec pgtype.DriverBytes // the row's own buffer, valid until the next row: no copy per vector
	for rows.Next() {
		if err := rows.Scan(&id, &vec); err != nil {
			return err
		}
		if err := each(id, vec); err != nil {
			return err
		}
	}
	return rows.Err()
}

// KnowledgeDocs implements driver.Backend.
func (d *DB) KnowledgeDocs(ctx context.Context, org, module, collection string, ids []string) ([]driver.KnowledgeCandidate, error) {
	rows, err := d.pool.Query(ctx, `
SELECT id, text, meta::text FROM knowledge_docs
WHERE org = $1 AND module = $2 AND collection = $3 AND id = ANY($4::text[])`, org, module, collection, ids)
	if err != nil {
		return nil, err
	}
	var out []driver.KnowledgeCandidate
	var c driver.KnowledgeCandidate
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.Text, &c.Meta}, func() error {
		out = append(out, c)
		return nil
	})
	return out, err
}
