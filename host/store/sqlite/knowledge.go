package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// KnowledgeBackend is the knowledge family's storage (driver.Families).
var _ driver.KnowledgeBackend = (*DB)(nil)

// Knowledge on SQLite: FTS5 holds the index, and a search scores with
// BM25 computed here, over the collection's own statistics.
//
// FTS5's bm25() takes its statistics from the whole table: the number of
// rows, their average length, and how many rows hold each term, whichever
// organization they belong to. A score, or even just the order of two
// hits, would then tell one organization how often a word occurs in every
// other organization's documents (add documents, search, watch the score
// move). So the terms of each collection are indexed under a prefix of
// its own (s<collection id>, the id never reused), which makes the
// postings of a term in one collection a term of their own; the search
// reads them through knowledge_vocab (fts5vocab, instance), counts each
// document's occurrences (tf) and the collection's documents holding each
// term (df), and computes BM25 (k1 1.2, b 0.75, the idf of Lucene's, which
// never goes negative) with the collection's documents and tokens, kept
// by triggers. Nothing of another collection enters a score, and a search
// reads only its own collection's postings.

// knowledgeCollection creates the collection's row if needed and returns
// its id, the prefix of its terms.
const knowledgeCollection = `
INSERT INTO knowledge_collections (org, module, collection) VALUES (?, ?, ?)
ON CONFLICT (org, module, collection) DO UPDATE SET docs = docs
RETURNING id`

// knowledgeQuotaCheck reads, in an add's transaction, the module's usage
// and the document being replaced (0, 0 when none).
const knowledgeQuotaCheck = `
SELECT
	coalesce((SELECT docs FROM knowledge_usage WHERE org = ?1 AND module = ?2), 0),
	coalesce((SELECT bytes FROM knowledge_usage WHERE org = ?1 AND module = ?2), 0),
	coalesce((SELECT doc FROM knowledge_docs WHERE org = ?1 AND module = ?2 AND collection = ?3 AND id = ?4), 0),
	coalesce((SELECT bytes FROM knowledge_docs WHERE org = ?1 AND module = ?2 AND collection = ?3 AND id = ?4), 0)`

const knowledgeInsert = `
INSERT INTO knowledge_docs (coll, org, module, collection, id, owner, text, meta, tokens, bytes, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING doc`

// knowledgeReplace rewrites a document's content; its trigger takes the
// old terms out of the index.
const knowledgeReplace = `
UPDATE knowledge_docs SET owner = ?, text = ?, meta = ?, tokens = ?, bytes = ?, updated_at = ?
WHERE doc = ?`

const knowledgeIndex = `INSERT INTO knowledge_fts (rowid, terms) VALUES (?, ?)`

// knowledgeVector stores a document's vector, replacing any; a document
// written without one loses the one of its old text (knowledgeNoVector).
const (
	knowledgeVector   = `INSERT INTO knowledge_vectors (doc, model, vec) VALUES (?, ?, ?) ON CONFLICT (doc) DO UPDATE SET model = excluded.model, vec = excluded.vec`
	knowledgeNoVector = `DELETE FROM knowledge_vectors WHERE doc = ?`
)

// KnowledgeAdd implements driver.Backend: the quota check and the write
// run in one IMMEDIATE transaction, which holds the file's write lock.
func (d *DB) KnowledgeAdd(ctx context.Context, doc driver.KnowledgeDoc, quota driver.KnowledgeUsage) (replaced bool, inUse, adds driver.KnowledgeUsage, err error) {
	// Prepared before the transaction (see KVPutWithin).
	var st [7]*sql.Stmt
	for i, q := range [...]string{knowledgeCollection, knowledgeQuotaCheck, knowledgeInsert, knowledgeReplace, knowledgeIndex, knowledgeVector, knowledgeNoVector} {
		if st[i], err = d.prepared(ctx, d.w, q); err != nil {
			return false, inUse, adds, err
		}
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return false, inUse, adds, err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	var coll int64
	if err := tx.StmtContext(ctx, st[0]).QueryRowContext(ctx, doc.Org, doc.Module, doc.Collection).Scan(&coll); err != nil {
		return false, inUse, adds, err
	}
	var old, oldBytes int64
	if err := tx.StmtContext(ctx, st[1]).QueryRowContext(ctx, doc.Org, doc.Module, doc.Collection, doc.ID).
		Scan(&inUse.Docs, &inUse.Bytes, &old, &oldBytes); err != nil {
		return false, inUse, adds, err
	}
	replaced = old != 0
	adds = driver.KnowledgeUsage{Docs: 1, Bytes: doc.Bytes - oldBytes}
	if replaced {
		adds.Docs = 0
	}
	if driver.OverKnowledgeQuota(quota, inUse, adds) {
		return false, inUse, adds, driver.ErrOverQuota
	}
	tokens := int64(len(doc.Terms))
	if replaced {
		if _, err := tx.StmtContext(ctx, st[3]).ExecContext(ctx, doc.Owner, doc.Text, doc.Meta, tokens, doc.Bytes, doc.At, old); err != nil {
			return false, inUse, adds, err
		}
	} else if err := tx.StmtContext(ctx, st[2]).QueryRowContext(ctx, coll, doc.Org, doc.Module, doc.Collection, doc.ID,
		doc.Owner, doc.Text, doc.Meta, tokens, doc.Bytes, doc.At).Scan(&old); err != nil {
		return false, inUse, adds, err
	}
	if _, err := tx.StmtContext(ctx, st[4]).ExecContext(ctx, old, prefixedTerms(coll, doc.Terms)); err != nil {
		return false, inUse, adds, err
	}
	if doc.Vector != nil {
		if _, err := tx.StmtContext(ctx, st[5]).ExecContext(ctx, old, doc.VectorModel, doc.Vector); err != nil {
			return false, inUse, adds, err
		}
	} else if replaced {
		if _, err := tx.StmtContext(ctx, st[6]).ExecContext(ctx, old); err != nil {
			return false, inUse, adds, err
		}
	}
	if err := tx.Commit(); err != nil {
		return false, inUse, adds, err
	}
	return replaced, inUse, adds, nil
}

// prefixedTerms writes terms for knowledge_fts: each behind the
// collection's prefix s<coll>, separated by spaces. A term starts with a
// letter, so the prefix's digits end where the term begins and no two
// (collection, term) pairs share a token.
func prefixedTerms(coll int64, terms []string) string {
	prefix := "s" + strconv.FormatInt(coll, 10)
	n := 0
	for _, t := range terms {
		n += len(prefix) + len(t) + 1
	}
	var b strings.Builder
	b.Grow(n)
	for i, t := range terms {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(prefix)
		b.WriteString(t)
	}
	return b.String()
}

// KnowledgeDelete implements driver.Backend; the delete trigger takes the
// document out of the index and the counts.
func (d *DB) KnowledgeDelete(ctx context.Context, org, module, collection, id string) (bool, error) {
	st, err := d.prepared(ctx, d.w, `DELETE FROM knowledge_docs WHERE org = ? AND module = ? AND collection = ? AND id = ?`)
	if err != nil {
		return false, err
	}
	res, err := st.ExecContext(ctx, org, module, collection, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// knowledgeSearch is one statement, so one snapshot: the collection's
// statistics (c), its postings of the query's terms (q: each term behind
// the collection's prefix), each document's tf per term (hits), each
// term's df (df), the BM25 of every document holding all ?5 terms
// (scored), the meta filter, and the best ?6 (top); only those are read
// whole. The filter holds when no key of ?7 lacks a member of the
// document's meta with the same key, the same JSON type (integer and real
// are both numbers) and an equal value.
const knowledgeSearch = `
WITH
c AS (SELECT id, docs, tokens FROM knowledge_collections WHERE org = ?1 AND module = ?2 AND collection = ?3),
q(term) AS (SELECT 's' || c.id || j.value FROM c, json_each(?4) AS j),
hits(doc, term, tf) AS (
	SELECT v.doc, v.term, count(*) FROM q JOIN knowledge_vocab AS v ON v.term = q.term GROUP BY v.doc, v.term),
df(term, n) AS (SELECT term, count(*) FROM hits GROUP BY term),
scored(doc, score) AS (
	SELECT h.doc, sum(
		ln(1 + (c.docs - df.n + 0.5) / (df.n + 0.5)) * h.tf * 2.2 /
		(h.tf + 1.2 * (0.25 + 0.75 * d.tokens * c.docs / max(c.tokens, 1.0))))
	FROM hits AS h JOIN df ON df.term = h.term JOIN knowledge_docs AS d ON d.doc = h.doc JOIN c ON d.coll = c.id
	GROUP BY h.doc
	HAVING count(*) = ?5),
top(doc, score, id) AS (
	SELECT s.doc, s.score, d.id
	FROM scored AS s JOIN knowledge_docs AS d ON d.doc = s.doc
	WHERE d.org = ?1 AND d.module = ?2 AND d.collection = ?3
		AND NOT EXISTS (
			SELECT 1 FROM json_each(?7) AS f
			WHERE NOT EXISTS (
				SELECT 1 FROM json_each(d.meta) AS m
				WHERE m.key = f.key AND m.atom = f.atom
					AND (m.type = f.type OR m.type IN ('integer', 'real') AND f.type IN ('integer', 'real'))))
	ORDER BY s.score DESC, d.id
	LIMIT ?6)
SELECT top.id, top.score, d.text, d.meta
FROM top JOIN knowledge_docs AS d ON d.doc = top.doc
ORDER BY top.score DESC, top.id`

// KnowledgeSearch implements driver.Backend.
func (d *DB) KnowledgeSearch(ctx context.Context, q driver.KnowledgeQuery) ([]driver.KnowledgeCandidate, error) {
	terms, err := json.Marshal(q.Terms)
	if err != nil {
		return nil, err
	}
	st, err := d.prepared(ctx, d.r, knowledgeSearch)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, q.Org, q.Module, q.Collection, string(terms), len(q.Terms), q.Limit, q.Filter)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.KnowledgeCandidate
	for rows.Next() {
		var c driver.KnowledgeCandidate
		if err := rows.Scan(&c.ID, &c.Score, &c.Text, &c.Meta); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// KnowledgeUsage implements driver.Backend.
func (d *DB) KnowledgeUsage(ctx context.Context, org, module string) (u driver.KnowledgeUsage, err error) {
	err = d.r.QueryRowContext(ctx, `SELECT docs, bytes FROM knowledge_usage WHERE org = ? AND module = ?`, org, module).Scan(&u.Docs, &u.Bytes)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.KnowledgeUsage{}, nil
	}
	return u, err
}

// knowledgeVectors reads a collection's vectors of one model, with the
// meta filter of knowledgeSearch, the most recently updated first. The
// documents are chosen (and sorted) before their vectors are read, so the
// sort carries ids, not vectors.
const knowledgeVectors = `
WITH recent(doc, id) AS (
	SELECT d.doc, d.id FROM knowledge_docs AS d
	WHERE d.org = ?1 AND d.module = ?2 AND d.collection = ?3
		AND EXISTS (SELECT 1 FROM knowledge_vectors AS v WHERE v.doc = d.doc AND v.model = ?4)
		AND NOT EXISTS (
			SELECT 1 FROM json_each(?5) AS f
			WHERE NOT EXISTS (
				SELECT 1 FROM json_each(d.meta) AS m
				WHERE m.key = f.key AND m.atom = f.atom
					AND (m.type = f.type OR m.type IN ('integer', 'real') AND f.type IN ('integer', 'real'))))
	ORDER BY d.updated_at DESC, d.doc DESC
	LIMIT ?6)
SELECT r.id, v.vec FROM recent AS r JOIN knowledge_vectors AS v ON v.doc = r.doc`

// KnowledgeVectors implements driver.Backend.
func (d *DB) KnowledgeVectors(ctx context.Context, q driver.KnowledgeVectorQuery, each func(id string, vec []byte) error) error {
	st, err := d.prepared(ctx, d.r, knowledgeVectors)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(ctx, q.Org, q.Module, q.Collection, q.Model, q.Filter, q.Limit)
	if err != nil {
		return err
	}
	defer rows.Close()
	var id string
	var vec sql.RawBytes
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
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := d.r.QueryContext(ctx, `
SELECT d.id, d.text, d.meta FROM json_each(?4) AS j
JOIN knowledge_docs AS d ON d.org = ?1 AND d.module = ?2 AND d.collection = ?3 AND d.id = j.value`,
		org, module, collection, string(list))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.KnowledgeCandidate
	for rows.Next() {
		var c driver.KnowledgeCandidate
		if err := rows.Scan(&c.ID, &c.Text, &c.Meta); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
