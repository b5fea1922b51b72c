package driver

import (
	"context"

	"github.com/moat-sandbox/moat/abi"
)

// The db family's contract: documents in declared models (package store's
// db.go is the front). The front validates every document against its
// model, encodes it (canonical JSON, at most abi.MaxDBDocBytes), picks ids
// and times, compiles filters into typed conditions on declared fields,
// and decides migrations; a backend stores rows, runs the conditions as
// SQL with every value bound as a parameter, keeps the usage counters in
// the transaction of each write, and creates the indexes it is given.
//
// Field names reach SQL text (a JSON path, an index expression): the
// front only passes names of declared fields, and a backend checks each
// again with ValidDBField before it writes one into a statement. Module
// and model names reach SQL text as literals (a partial index's predicate
// must be matched by a literal in the query): a backend checks them with
// ValidDBName and quotes them.

// DocumentBackend is what a backend implements for the db family. It is
// separate from Backend so that adding it touched no other contract; the
// front reaches it with a type assertion, and both backends of this
// repository assert that they implement it.
type DocumentBackend interface {
	// DBMigrate runs plan in one transaction holding a lock that
	// serializes every DBMigrate (of every process), with the stored
	// schemas of owner's module (model name → schema), then stores the
	// schemas plan returns and makes sure every index it returns exists
	// (filling the terms of a new array index). An error from plan
	// aborts the migration and is returned as it is.
	DBMigrate(ctx context.Context, owner, module string, plan DBMigratePlan) error
	// DBInsert stores row in sc (sc.Owner is the row's owner) with its
	// terms, refused with ErrOverQuota when DBOverQuota(q, usage, 1,
	// len(row.Doc)) holds; the check and the write are one transaction.
	// It returns the usage it read, also when it refuses. A duplicate id
	// is ErrConflict.
	DBInsert(ctx context.Context, sc DBScope, row DBRow, terms []DBTerm, q DBQuota) (DBUsage, error)
	// DBGet returns the row of id in sc, or ErrNotFound.
	DBGet(ctx context.Context, sc DBScope, id string) (*DBRow, error)
	// DBUpdate locks the row of id in sc (ErrNotFound when there is
	// none), refuses it with ErrConflict when version is not 0 and the
	// row's is another, passes it to apply, and writes what apply
	// returns with the version one more and updated set to at, refused
	// with ErrOverQuota when the document grows past q. One transaction:
	// of concurrent updates expecting one version, exactly one wins.
	DBUpdate(ctx context.Context, sc DBScope, id string, version, at int64, q DBQuota, apply DBApply) (*DBRow, DBUsage, error)
	// DBDelete removes the row of id in sc and its terms, and reports
	// whether there was one; when version is not 0 and the row's is
	// another, it is kept and the error is ErrConflict.
	DBDelete(ctx context.Context, sc DBScope, id string, version int64) (bool, error)
	// DBQuery returns the rows of q.Scope matching every condition, in
	// q.Order then id, after q.After when q.HasAfter, at most q.Limit;
	// when q.MaxBytes > 0 it stops after the first row that takes the
	// documents' bytes past it (reading no more rows from the database).
	DBQuery(ctx context.Context, q DBQuery) ([]DBRow, error)
	// DBCount counts the rows of q.Scope matching every condition
	// (q.Order, q.After and q.Limit are ignored).
	DBCount(ctx context.Context, q DBQuery) (int64, error)
	// DBUsage returns what the organization's module stores.
	DBUsage(ctx context.Context, org, module string) (DBUsage, error)
}

// DBScope is whose documents a call sees: those of Org, Module and Model,
// and of Owner too when ByOwner. An insert records Owner as the row's
// owner whatever ByOwner says.
type DBScope struct {
	Org, Module, Model string
	Owner              string
	ByOwner            bool
}

// DBRow is a document as stored. Times are unix milliseconds; Doc is the
// front's canonical JSON, returned byte for byte.
type DBRow struct {
	ID, Owner        string
	Version          int64
	Created, Updated int64
	Doc              []byte
}

// DBUsage is what an organization's module stores in the db family: its
// rows and the bytes of their documents.
type DBUsage struct{ Rows, Bytes int64 }

// DBQuota bounds DBUsage; a zero field is no bound.
type DBQuota struct{ Rows, Bytes int64 }

// DBOverQuota is the db quota rule, the one definition both backends
// apply inside their write transaction: a write that adds addRows rows
// and addBytes bytes to inUse is refused when it grows either past its
// bound. A write that grows neither (an update to a smaller document) is
// always allowed, so a scope over a lowered quota can still shrink.
func DBOverQuota(q DBQuota, inUse DBUsage, addRows, addBytes int64) bool {
	return addRows > 0 && q.Rows > 0 && inUse.Rows+addRows > q.Rows ||
		addBytes > 0 && q.Bytes > 0 && inUse.Bytes+addBytes > q.Bytes
}

// DBApply computes, inside DBUpdate's transaction and with the row locked,
// the new document of old and its terms. An error aborts the update and
// is returned as it is.
type DBApply func(old *DBRow) (doc []byte, terms []DBTerm, err error)

// DBKind is how a backend compares a field: the JSON type of its values
// (or of its elements, for an array field).
type DBKind uint8

const (
	DBText    DBKind = iota + 1 // strings and times (times as DBTimeLayout strings, which sort in time order)
	DBInteger                   // int64
	DBReal                      // float64
	DBBoolean                   // bool
)

// DBTerm is one element of an array field that has an index of its own:
// Value is a string, int64, float64 or bool by the field's kind. A backend
// that cannot index inside JSON arrays keeps them beside the row.
type DBTerm struct {
	Field string
	Value any
}

// DBCond is one condition of a query, on a declared field. Values hold
// one value (string, int64, float64 or bool by Kind) or, for DBIn, each
// value of the list. Op is one of abi.DBOps; for an array field (Array)
// it is only abi.DBContains, and Terms says the field has an index of
// its own (see DBTerm). For abi.DBPrefix, Values[0] is the prefix and
// Values[1], when present, the least string greater than every string
// with that prefix (a valid UTF-8 bound for a range scan).
type DBCond struct {
	Field  string
	Kind   DBKind
	Array  bool
	Terms  bool
	Op     string
	Values []any
}

// DBOrder is one field of a query's order. Nullable says a row may lack
// the field: ascending order puts such rows last, descending first.
type DBOrder struct {
	Field    string
	Kind     DBKind
	Desc     bool
	Nullable bool
}

// DBQuery selects rows. After holds, when HasAfter, the order values of
// the last row of the previous page (nil for a row without the field) and
// AfterID its id: the rows that come after it in (Order..., id) order.
type DBQuery struct {
	Scope    DBScope
	Where    []DBCond
	Order    []DBOrder
	After    []any
	AfterID  string
	HasAfter bool
	Limit    int
	MaxBytes int64
}

// DBIndex is an index a model declares. Fields are its fields in order
// (one field, Array, for an array field's index). ByOwner puts the owner
// after the organization, for a model scoped by user. A backend names it
// by its definition, so that equal definitions are one index; it is
// partial to (Module, Model). Org, when not empty, limits the filling of
// a new array index's terms to that organization's rows (a module loaded
// for one organization); New says the index is new to the stored schema,
// so such terms must be (re)built.
type DBIndex struct {
	Module, Model string
	ByOwner       bool
	Fields        []DBIndexField
	Org           string
	New           bool
}

// DBIndexField is one field of a DBIndex.
type DBIndexField struct {
	Field string
	Kind  DBKind
	Array bool
}

// DBMigratePlan decides a migration from the stored schemas (model name →
// the front's encoding): the schemas to store (model name → encoding;
// models not named are left as they are) and the indexes that must exist.
type DBMigratePlan func(stored map[string][]byte) (put map[string][]byte, indexes []DBIndex, err error)

// ValidDBField reports whether a field name may be written into SQL text:
// 1-64 of A-Z a-z 0-9 _, not starting with a digit. It is the rule of
// abi.ValidDBFieldName, checked again here because a backend must not
// trust its caller with SQL.
func ValidDBField(name string) bool { return abi.ValidDBFieldName(name) }

// ValidDBName reports whether a module or model name may be written into
// SQL text as a quoted literal: 1-64 of a-z 0-9 . _ - (module names) or
// a-z 0-9 _ (model names).
func ValidDBName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
