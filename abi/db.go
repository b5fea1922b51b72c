package abi

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The db family: JSON documents in the models a module declares in its
// moat.yaml (models:), validated by the host against the model's fields,
// scoped by the host to the caller's organization (and, for a model with
// scope: user, to the caller), and queried with a small typed filter
// language. A guest never sends SQL: field names are checked against the
// model, and values are bound as parameters.
//
// # Wire forms
//
// Documents are JSON objects. Each field of a model has a type:
//
//	string   a JSON string (no NUL character); max: the most characters (code points)
//	int      a JSON number with no fraction, within ±(2^53-1) so that every
//	         language reads it exactly; max: the largest value
//	number   a JSON number (a float64); max: the largest value
//	bool     true or false
//	time     an RFC 3339 string ("2026-01-02T15:04:05Z", any offset, any
//	         fraction); the host stores it in UTC at millisecond precision,
//	         written "2006-01-02T15:04:05.000Z", and answers it that way, so
//	         that stored times sort as strings in time order
//	object   any JSON object, at most MaxDBDepth deep; it can be stored and
//	         read, not filtered, ordered or indexed
//	[T]      a JSON array of T (any type above but object); max: the most items
//
// A declared field is either absent or holds a value of its type: null is
// refused (leave the field out, or unset it with db.update). A model with
// additional: true also keeps fields it does not declare, as any JSON.
//
// Every stored document carries metadata outside its JSON: its id (made by
// the host: 28 lowercase hexadecimal digits, time-ordered), its version (1
// on insert, one more on every update), its owner (the user who inserted
// it), and created and updated (RFC 3339 in UTC, millisecond precision,
// as above).
//
// # Filters
//
// A query's where is a list of conditions, all of which must hold, each a
// JSON array [field, op, value]:
//
//	=  !=  <  <=  >  >=   a scalar field against a value of its type
//	in                    a scalar field against an array of at most MaxDBInValues values
//	prefix                a string or time field starting with a string
//	contains              an array field holding an element equal to the value,
//	                      or a string field holding the value as a substring
//
// A document without the field matches no condition on it, != included.
// order names at most MaxDBOrderFields fields, "-field" for descending;
// ascending order puts documents without the field last, descending first;
// ties are broken by id, which is also the order when order is empty.
//
// # Pages
//
// A query answers at most limit documents (default DefaultDBQueryLimit,
// at most MaxDBQueryLimit; fewer when they would hold more than
// MaxDBPageBytes) and, when more follow, next: an opaque cursor
// to pass back as after with the same model, where and order. A cursor
// holds only the position of the last document (its order values and id)
// and a digest of the query it belongs to; the host validates it, binds
// its values as parameters, and applies the caller's scope as for any
// query, so a forged cursor can at most skip within the caller's own
// documents.

// Op names of the db family.
const (
	OpDBInsert = "db.insert"
	OpDBGet    = "db.get"
	OpDBQuery  = "db.query"
	OpDBUpdate = "db.update"
	OpDBDelete = "db.delete"
	OpDBCount  = "db.count"
)

// Field types of a model (see the package comment for their wire forms).
// An array type is one of the scalar types in brackets: "[string]".
const (
	DBString = "string"
	DBInt    = "int"
	DBNumber = "number"
	DBBool   = "bool"
	DBTime   = "time"
	DBObject = "object"
)

// DBTypes lists every field type a model may declare.
var DBTypes = []string{DBString, DBInt, DBNumber, DBBool, DBTime, DBObject,
	"[" + DBString + "]", "[" + DBInt + "]", "[" + DBNumber + "]", "[" + DBBool + "]", "[" + DBTime + "]"}

// Filter operators.
const (
	DBEq       = "="
	DBNe       = "!="
	DBLt       = "<"
	DBLe       = "<="
	DBGt       = ">"
	DBGe       = ">="
	DBIn       = "in"
	DBPrefix   = "prefix"
	DBContains = "contains"
)

// DBOps lists the filter operators.
var DBOps = []string{DBEq, DBNe, DBLt, DBLe, DBGt, DBGe, DBIn, DBPrefix, DBContains}

// DBTimeLayout is how the host writes a time: UTC, millisecond precision,
// fixed width, so that times sort as strings.
const DBTimeLayout = "2006-01-02T15:04:05.000Z"

// Limits of the db family, enforced by the host. A request past one is
// refused (CodeTooLarge for sizes, CodeInvalidArgument for counts) with a
// message naming the limit.
const (
	// MaxDBDocBytes bounds a document as stored (its JSON) and as sent.
	MaxDBDocBytes = 256 << 10
	// MaxDBDepth bounds the nesting of a document: the document itself
	// is depth 1, an object or array inside it 2, and so on.
	MaxDBDepth = 8
	// MaxDBDocValues bounds the JSON values in one document (every
	// field, array element and nested value counts one).
	MaxDBDocValues = 10000
	// MaxDBDocFields bounds the top-level fields of one document.
	MaxDBDocFields = 256
	// MaxDBModelFields bounds the fields a model declares.
	MaxDBModelFields = 128
	// MaxDBModelIndexes bounds the indexes of a model, and
	// MaxDBIndexFields the fields of one index.
	MaxDBModelIndexes = 16
	MaxDBIndexFields  = 4
	// MaxDBModels bounds the models of one module.
	MaxDBModels = 64
	// MaxDBWhere bounds the conditions of a query, MaxDBInValues the
	// values of one in, MaxDBOrderFields the fields of its order.
	MaxDBWhere       = 16
	MaxDBInValues    = 100
	MaxDBOrderFields = 4
	// MaxDBFilterValueBytes bounds one filter value as sent (a string
	// longer than any storable one cannot match anything).
	MaxDBFilterValueBytes = 4096
	// DefaultDBQueryLimit and MaxDBQueryLimit bound the documents of one
	// page of db.query.
	DefaultDBQueryLimit = 100
	MaxDBQueryLimit     = 1000
	// MaxDBPageBytes bounds the documents of one page: a page ends
	// before the document that would take it past this many bytes of
	// documents (it always holds at least one), and next says more
	// follow.
	MaxDBPageBytes = 4 << 20
	// MaxDBCursorBytes bounds a cursor (after).
	MaxDBCursorBytes = 4096
	// MaxDBSafeInt is the largest magnitude of an int field: 2^53-1, the
	// largest integer a float64 (JavaScript's number) holds exactly.
	MaxDBSafeInt = 1<<53 - 1
)

// DBInsertRequest stores a new document in Model. Doc is a JSON object.
type DBInsertRequest struct {
	Model string          `json:"model"`
	Doc   json.RawMessage `json:"doc"`
}

// OpTarget is the model: db is granted per model (capabilities: db: [notes]).
func (r *DBInsertRequest) OpTarget() string { return r.Model }

// DBInsertResponse answers a DBInsertRequest with the new document's id
// and version (1).
type DBInsertResponse struct {
	ID      string `json:"id"`
	Version int64  `json:"version"`
}

// DBGetRequest reads one document by id.
type DBGetRequest struct {
	Model string `json:"model"`
	ID    string `json:"id"`
}

// OpTarget is the model.
func (r *DBGetRequest) OpTarget() string { return r.Model }

// DBDoc is a stored document with its metadata. Created and Updated are
// RFC 3339 in UTC (DBTimeLayout).
type DBDoc struct {
	ID      string          `json:"id"`
	Version int64           `json:"version"`
	Doc     json.RawMessage `json:"doc"`
	Owner   string          `json:"owner"`
	Created string          `json:"created"`
	Updated string          `json:"updated"`
}

// DBGetResponse answers a DBGetRequest. Found is false, and every other
// field empty, when the caller's scope holds no document with that id
// (another organization's or, in a user-scoped model, another user's
// document is not found either).
type DBGetResponse struct {
	Found   bool            `json:"found"`
	ID      string          `json:"id,omitempty"`
	Version int64           `json:"version,omitempty"`
	Doc     json.RawMessage `json:"doc,omitempty"`
	Owner   string          `json:"owner,omitempty"`
	Created string          `json:"created,omitempty"`
	Updated string          `json:"updated,omitempty"`
}

// DBCondition is one condition of a filter; on the wire, the JSON array
// [Field, Op, Value].
type DBCondition struct {
	Field string
	Op    string
	Value json.RawMessage
}

// MarshalJSON writes the array form.
func (c DBCondition) MarshalJSON() ([]byte, error) {
	v := c.Value
	if len(v) == 0 {
		v = json.RawMessage("null")
	}
	return json.Marshal([]any{c.Field, c.Op, v})
}

// UnmarshalJSON reads the array form: exactly three elements, the first
// two strings.
func (c *DBCondition) UnmarshalJSON(b []byte) error {
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil {
		return fmt.Errorf("a condition is a JSON array [field, op, value], not %s", jsonKind(b))
	}
	if len(parts) != 3 {
		return fmt.Errorf("a condition is [field, op, value]; this one has %d elements", len(parts))
	}
	var out DBCondition
	if err := json.Unmarshal(parts[0], &out.Field); err != nil {
		return fmt.Errorf("a condition's field must be a string, not %s", jsonKind(parts[0]))
	}
	if err := json.Unmarshal(parts[1], &out.Op); err != nil {
		return fmt.Errorf("a condition's op must be a string, not %s", jsonKind(parts[1]))
	}
	out.Value = json.RawMessage(bytes.Clone(parts[2]))
	*c = out
	return nil
}

// Where builds a condition: Where("done", "=", false).
func Where(field, op string, value any) (DBCondition, error) {
	b, err := json.Marshal(value)
	if err != nil {
		return DBCondition{}, fmt.Errorf("condition on %s: encode the value: %w", field, err)
	}
	return DBCondition{Field: field, Op: op, Value: b}, nil
}

// DBQueryRequest reads a page of the documents of Model matching every
// condition of Where, in Order. After is the Next of the previous page.
type DBQueryRequest struct {
	Model string        `json:"model"`
	Where []DBCondition `json:"where,omitempty"`
	Order []string      `json:"order,omitempty"`
	Limit int           `json:"limit,omitempty"`
	After string        `json:"after,omitempty"`
}

// OpTarget is the model.
func (r *DBQueryRequest) OpTarget() string { return r.Model }

// DBQueryResponse answers a DBQueryRequest. Next is empty on the last
// page.
type DBQueryResponse struct {
	Docs []DBDoc `json:"docs"`
	Next string  `json:"next,omitempty"`
}

// DBUpdateRequest changes one document: each field of Set (a JSON object)
// replaces the field's value, each field named in Unset is removed, and
// the result must still be a valid document of the model. When Version is
// not 0, the document must be at that version, or the update is refused
// with CodeConflict (optimistic concurrency: read, change, write back with
// the version read).
type DBUpdateRequest struct {
	Model   string          `json:"model"`
	ID      string          `json:"id"`
	Set     json.RawMessage `json:"set,omitempty"`
	Unset   []string        `json:"unset,omitempty"`
	Version int64           `json:"version,omitempty"`
}

// OpTarget is the model.
func (r *DBUpdateRequest) OpTarget() string { return r.Model }

// DBUpdateResponse answers a DBUpdateRequest with the document's new
// version.
type DBUpdateResponse struct {
	Version int64 `json:"version"`
}

// DBDeleteRequest removes one document. When Version is not 0, the
// document must be at that version, or the delete is refused with
// CodeConflict.
type DBDeleteRequest struct {
	Model   string `json:"model"`
	ID      string `json:"id"`
	Version int64  `json:"version,omitempty"`
}

// OpTarget is the model.
func (r *DBDeleteRequest) OpTarget() string { return r.Model }

// DBDeleteResponse says whether the document existed in the caller's
// scope.
type DBDeleteResponse struct {
	Deleted bool `json:"deleted"`
}

// DBCountRequest counts the documents of Model matching Where.
type DBCountRequest struct {
	Model string        `json:"model"`
	Where []DBCondition `json:"where,omitempty"`
}

// OpTarget is the model.
func (r *DBCountRequest) OpTarget() string { return r.Model }

// DBCountResponse answers a DBCountRequest.
type DBCountResponse struct {
	Count int64 `json:"count"`
}

// DBFieldNameRule says which field names a model may declare; a filter,
// an order or an update can name only declared fields.
const DBFieldNameRule = "1-64 characters A-Z a-z 0-9 _, not starting with a digit"

// ValidDBFieldName reports whether name follows DBFieldNameRule. Field
// names reach the database's JSON paths, so the host holds them to this
// small alphabet, in the manifest and again in the store.
func ValidDBFieldName(name string) bool {
	if len(name) == 0 || len(name) > 64 || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// DBModelNameRule says which model names a manifest may declare: the
// names of db grants (capabilities: db: [notes]).
const DBModelNameRule = "1-64 characters a-z 0-9 _, like notes"

// ValidDBModelName reports whether name follows DBModelNameRule.
func ValidDBModelName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// DB scopes of a model: who sees a document.
const (
	DBScopeOrg  = "org"  // every user of the organization (the default)
	DBScopeUser = "user" // only the user who inserted it
)
