package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// The db family: JSON documents in the models a module declares (Model,
// CompileModel), one table of documents on every backend, each row
// carrying its organization, module, model, owner, version and times.
//
// The scope is the store's: every call takes a DBScope (the caller's
// organization and user, and the module) and a Schema, and the backend
// puts the organization, module and model (and, for a model with scope:
// user, the owner) into every statement it runs. A request names a model
// and an id, never an organization or a user, so no request can reach
// another's documents; another's document is simply not found.
//
// Quotas (documents and their bytes per organization and module,
// DBQuota) are checked inside the write transaction, as kv's are, so
// concurrent writers cannot overshoot, from one process or several.

// DBScope is who calls: the organization and user of the principal, and
// the module. All three must be non-empty; the user becomes the owner of
// what it inserts, and in a model with scope: user it sees only what it
// owns.
type DBScope struct{ Org, Module, User string }

func (sc DBScope) validate(op string) error {
	switch {
	case sc.Org == "":
		return abi.Errorf(abi.CodeInvalidArgument, "%s: the caller has no organization; every db call is scoped to one", op)
	case sc.Module == "":
		return abi.Errorf(abi.CodeInvalidArgument, "%s: the module is empty; every db call is scoped to a module", op)
	case sc.User == "":
		return abi.Errorf(abi.CodeInvalidArgument, "%s: the caller has no user; every document has an owner", op)
	}
	return nil
}

func (sc DBScope) driver(m *Schema) driver.DBScope {
	return driver.DBScope{Org: sc.Org, Module: sc.Module, Model: m.name, Owner: sc.User, ByOwner: m.user}
}

func (sc DBScope) wrap(op string, m *Schema, err error) error {
	return fmt.Errorf("store: %s org=%q module=%q model=%q: %w", op, sc.Org, sc.Module, m.name, err)
}

// DBQuota bounds what one organization's module stores in the db
// family: documents (Rows) and the bytes of their JSON (Bytes). A zero
// field is no bound.
type DBQuota = driver.DBQuota

// DBUsage is what one organization's module stores in the db family.
type DBUsage = driver.DBUsage

// docIDLen is the length of a document id: 12 hexadecimal digits of unix
// milliseconds, then 16 of randomness.
const docIDLen = 28

// newDocID makes a document id. Ids rise with time, so documents inserted
// together sit together in the table and in id order.
func newDocID() string {
	var b [14]byte
	ms := uint64(time.Now().UnixMilli())
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], ms)
	copy(b[:6], t[2:])
	rand.Read(b[6:])
	return hex.EncodeToString(b[:])
}

func validDocID(id string) bool {
	if len(id) != docIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func checkDocID(op string, m *Schema, id string) error {
	if !validDocID(id) {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: id %s is not a document id (%d lowercase hexadecimal digits, as db.insert returns)", op, m.name, quoted(id), docIDLen)
	}
	return nil
}

// dbTime writes a stored time (unix milliseconds) in its wire form.
func dbTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(abi.DBTimeLayout) }

func wireDoc(r driver.DBRow) abi.DBDoc {
	return abi.DBDoc{ID: r.ID, Version: r.Version, Doc: r.Doc, Owner: r.Owner, Created: dbTime(r.Created), Updated: dbTime(r.Updated)}
}

// quotaError explains a refused write.
func quotaError(op string, sc DBScope, q DBQuota, u DBUsage, addBytes int64) error {
	if q.Rows > 0 && u.Rows+1 > q.Rows && op == abi.OpDBInsert {
		return abi.Errorf(abi.CodeTooLarge, "%s: the db quota of %d documents for module %s in org %s is used up (%d stored); delete documents, or ask the operator to raise limits.db_rows",
			op, q.Rows, sc.Module, sc.Org, u.Rows)
	}
	return abi.Errorf(abi.CodeTooLarge, "%s: the db quota of %d bytes for module %s in org %s would be exceeded (%d stored, this write adds %d); delete documents, or ask the operator to raise limits.db_bytes",
		op, q.Bytes, sc.Module, sc.Org, u.Bytes, addBytes)
}

// DBMigrate makes the store ready for models of module, loaded for the
// organization owner ("" when every organization may call the module):
// in one transaction, serialized with every other migration, it compares
// each model with the one stored for (owner, module) at the last load,
// refuses the whole migration when a change could invalidate stored
// documents (an *abi.Error of abi.CodeInvalidArgument listing each change
// and how to migrate), and otherwise stores the models and creates their
// indexes. A model stored before and not given now is left as it is, with
// its documents.
func (s *Store) DBMigrate(ctx context.Context, owner, module string, models []*Schema) error {
	const op = "db.migrate"
	if module == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: the module is empty", op)
	}
	if len(models) == 0 {
		return nil
	}
	d, err := s.docs()
	if err != nil {
		return err
	}
	plan := func(stored map[string][]byte) (map[string][]byte, []driver.DBIndex, error) {
		put := map[string][]byte{}
		var indexes []driver.DBIndex
		var why []string
		for _, m := range models {
			record, oldIndexes := m.enc, [][]string(nil)
			if old, had := stored[m.name]; had {
				merged, problems, err := m.merge(old)
				if err != nil {
					return nil, nil, err
				}
				why = append(why, problems...)
				record, oldIndexes = merged, storedIndexes(old)
				if bytes.Equal(merged, old) {
					record = nil // unchanged
				}
			}
			if record != nil {
				put[m.name] = record
			}
			for i, ix := range m.indexes {
				isNew := !slices.ContainsFunc(oldIndexes, func(o []string) bool { return slices.Equal(o, ix) })
				indexes = append(indexes, m.index(module, owner, i, isNew))
			}
		}
		if len(why) > 0 {
			return nil, nil, abi.Errorf(abi.CodeInvalidArgument, "the models of module %s changed in ways stored documents may not follow: %s",
				module, strings.Join(why, "; "))
		}
		return put, indexes, nil
	}
	if err := d.DBMigrate(ctx, owner, module, plan); err != nil {
		var ae *abi.Error
		if errors.As(err, &ae) {
			return ae
		}
		return fmt.Errorf("store: %s owner=%q module=%q: %w", op, owner, module, err)
	}
	return nil
}

// DBInsert stores doc (a JSON object) as a new document of model m,
// owned by sc.User, within quota q, and returns its id and version (1).
// The document is checked against m: a refusal is an *abi.Error naming
// the field.
func (s *Store) DBInsert(ctx context.Context, sc DBScope, m *Schema, doc []byte, q DBQuota) (id string, version int64, err error) {
	const op = abi.OpDBInsert
	if err := sc.validate(op); err != nil {
		return "", 0, err
	}
	d, err := s.docs()
	if err != nil {
		return "", 0, err
	}
	canon, terms, err := m.checkDocument(op, doc)
	if err != nil {
		return "", 0, err
	}
	now := time.Now().UnixMilli()
	row := driver.DBRow{ID: newDocID(), Owner: sc.User, Version: 1, Created: now, Updated: now, Doc: canon}
	u, err := d.DBInsert(ctx, sc.driver(m), row, terms, q)
	if errors.Is(err, driver.ErrOverQuota) {
		return "", 0, quotaError(op, sc, q, u, int64(len(canon)))
	}
	if err != nil {
		return "", 0, sc.wrap(op, m, err)
	}
	return row.ID, 1, nil
}

// DBGet returns the document id of model m in sc's scope; found is false
// when there is none (another organization's, or in a user-scoped model
// another user's, is not found either).
func (s *Store) DBGet(ctx context.Context, sc DBScope, m *Schema, id string) (doc abi.DBDoc, found bool, err error) {
	const op = abi.OpDBGet
	if err := sc.validate(op); err != nil {
		return abi.DBDoc{}, false, err
	}
	if err := checkDocID(op, m, id); err != nil {
		return abi.DBDoc{}, false, err
	}
	d, err := s.docs()
	if err != nil {
		return abi.DBDoc{}, false, err
	}
	r, err := d.DBGet(ctx, sc.driver(m), id)
	if errors.Is(err, driver.ErrNotFound) {
		return abi.DBDoc{}, false, nil
	}
	if err != nil {
		return abi.DBDoc{}, false, sc.wrap(op, m, err)
	}
	return wireDoc(*r), true, nil
}

// DBUpdate changes the document id of model m in sc's scope: each field
// of set (a JSON object) replaces the field's value, each field of unset
// is removed, and the result is checked against m as a whole. When
// version is not 0 the document must be at that version, or the update
// is refused with abi.CodeConflict. It returns the new version; a
// document not in the scope is abi.CodeNotFound.
func (s *Store) DBUpdate(ctx context.Context, sc DBScope, m *Schema, id string, set []byte, unset []string, version int64, q DBQuota) (int64, error) {
	const op = abi.OpDBUpdate
	if err := sc.validate(op); err != nil {
		return 0, err
	}
	if err := checkDocID(op, m, id); err != nil {
		return 0, err
	}
	if version < 0 {
		return 0, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: version %d is negative; pass the version read, or 0 for none", op, m.name, version)
	}
	if len(unset) > abi.MaxDBDocFields {
		return 0, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: unset names %d fields; the most is %d", op, m.name, len(unset), abi.MaxDBDocFields)
	}
	var setFields map[string]any
	if len(set) > 0 {
		if err := checkRaw(op, m.name, "set", set); err != nil {
			return 0, err
		}
		var err error
		if setFields, err = decodeObject(op, m.name, "set", set); err != nil {
			return 0, err
		}
	}
	for _, name := range unset {
		if _, declared := m.fields[name]; !declared && !m.additional && !abi.ValidDBFieldName(name) {
			// An undeclared field may be one an earlier version of
			// the model declared: unsetting it drops what documents
			// still hold of it.
			return 0, docError(abi.CodeInvalidArgument, op, m.name, quotePath(name), "is not a field name (%s), so no document holds it", abi.DBFieldNameRule)
		}
		if _, both := setFields[name]; both {
			return 0, docError(abi.CodeInvalidArgument, op, m.name, quotePath(name), "is both set and unset; do one")
		}
	}
	if len(setFields) == 0 && len(unset) == 0 {
		return 0, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: set and unset are both empty; name what to change", op, m.name)
	}
	d, err := s.docs()
	if err != nil {
		return 0, err
	}
	var grew int64
	apply := func(old *driver.DBRow) ([]byte, []driver.DBTerm, error) {
		b, terms, err := m.applyUpdate(op, old.Doc, set, unset)
		grew = int64(len(b) - len(old.Doc))
		return b, terms, err
	}
	r, u, err := d.DBUpdate(ctx, sc.driver(m), id, version, time.Now().UnixMilli(), q, apply)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return 0, abi.Errorf(abi.CodeNotFound, "%s: model %s: no document %s", op, m.name, id)
	case errors.Is(err, driver.ErrConflict):
		return 0, abi.Errorf(abi.CodeConflict, "%s: model %s: document %s is no longer at version %d; read it again and retry", op, m.name, id, version)
	case errors.Is(err, driver.ErrOverQuota):
		return 0, quotaError(op, sc, q, u, grew)
	case err != nil:
		var ae *abi.Error
		if errors.As(err, &ae) {
			return 0, ae
		}
		return 0, sc.wrap(op, m, err)
	}
	return r.Version, nil
}

// DBDelete removes the document id of model m from sc's scope and reports
// whether it was there. When version is not 0 the document must be at
// that version, or it is kept and the error is abi.CodeConflict.
func (s *Store) DBDelete(ctx context.Context, sc DBScope, m *Schema, id string, version int64) (bool, error) {
	const op = abi.OpDBDelete
	if err := sc.validate(op); err != nil {
		return false, err
	}
	if err := checkDocID(op, m, id); err != nil {
		return false, err
	}
	if version < 0 {
		return false, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: version %d is negative; pass the version read, or 0 for none", op, m.name, version)
	}
	d, err := s.docs()
	if err != nil {
		return false, err
	}
	deleted, err := d.DBDelete(ctx, sc.driver(m), id, version)
	if errors.Is(err, driver.ErrConflict) {
		return false, abi.Errorf(abi.CodeConflict, "%s: model %s: document %s is no longer at version %d; read it again and retry", op, m.name, id, version)
	}
	if err != nil {
		return false, sc.wrap(op, m, err)
	}
	return deleted, nil
}

// DBQuery returns a page of the documents of model m in sc's scope that
// match every condition of q.Where, in q.Order then id, and the cursor of
// the next page ("" on the last). A page holds at most q.Limit documents
// and, unless its first document alone is larger, at most
// abi.MaxDBPageBytes of them.
func (s *Store) DBQuery(ctx context.Context, sc DBScope, m *Schema, q DBQuery) (docs []abi.DBDoc, next string, err error) {
	const op = abi.OpDBQuery
	if err := sc.validate(op); err != nil {
		return nil, "", err
	}
	limit := q.Limit
	switch {
	case limit == 0:
		limit = abi.DefaultDBQueryLimit
	case limit < 0 || limit > abi.MaxDBQueryLimit:
		return nil, "", abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: limit %d is outside 1..%d (abi.MaxDBQueryLimit); 0 means %d", op, m.name, limit, abi.MaxDBQueryLimit, abi.DefaultDBQueryLimit)
	}
	where, err := m.compileWhere(op, q.Where)
	if err != nil {
		return nil, "", err
	}
	order, err := m.compileOrder(op, q.Order, where)
	if err != nil {
		return nil, "", err
	}
	dq := driver.DBQuery{Scope: sc.driver(m), Where: where, Order: order, Limit: limit + 1, MaxBytes: abi.MaxDBPageBytes}
	if q.After != "" {
		dq.After, dq.AfterID, err = m.decodeCursor(op, q, order)
		if err != nil {
			return nil, "", err
		}
		dq.HasAfter = true
	}
	d, err := s.docs()
	if err != nil {
		return nil, "", err
	}
	rows, err := d.DBQuery(ctx, dq)
	if err != nil {
		return nil, "", sc.wrap(op, m, err)
	}
	// The page: at most limit rows, and no more bytes of documents than
	// abi.MaxDBPageBytes unless one document alone is that large. The
	// backend returns at most one row past it, which says more follow.
	keep, bytes := 0, 0
	for keep < len(rows) && keep < limit && (keep == 0 || bytes+len(rows[keep].Doc) <= abi.MaxDBPageBytes) {
		bytes += len(rows[keep].Doc)
		keep++
	}
	if keep < len(rows) {
		rows = rows[:keep]
		if next, err = m.encodeCursor(q, order, rows[len(rows)-1]); err != nil {
			return nil, "", sc.wrap(op, m, err)
		}
	}
	docs = make([]abi.DBDoc, len(rows))
	for i, r := range rows {
		docs[i] = wireDoc(r)
	}
	return docs, next, nil
}

// DBCount counts the documents of model m in sc's scope that match every
// condition of where.
func (s *Store) DBCount(ctx context.Context, sc DBScope, m *Schema, where []abi.DBCondition) (int64, error) {
	const op = abi.OpDBCount
	if err := sc.validate(op); err != nil {
		return 0, err
	}
	conds, err := m.compileWhere(op, where)
	if err != nil {
		return 0, err
	}
	d, err := s.docs()
	if err != nil {
		return 0, err
	}
	n, err := d.DBCount(ctx, driver.DBQuery{Scope: sc.driver(m), Where: conds})
	if err != nil {
		return 0, sc.wrap(op, m, err)
	}
	return n, nil
}

// DBUsage returns what the organization's module stores in the db
// family, the measure DBQuota applies to.
func (s *Store) DBUsage(ctx context.Context, org, module string) (DBUsage, error) {
	if org == "" || module == "" {
		return DBUsage{}, abi.Errorf(abi.CodeInvalidArgument, "db.usage: org and module must not be empty")
	}
	d, err := s.docs()
	if err != nil {
		return DBUsage{}, err
	}
	u, err := d.DBUsage(ctx, org, module)
	if err != nil {
		return DBUsage{}, fmt.Errorf("store: db.usage org=%q module=%q: %w", org, module, err)
	}
	return u, nil
}
