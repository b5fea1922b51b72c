package moat

import (
	"encoding/json"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// DBStore is the module's documents: JSON in the models its moat.yaml
// declares (models:), each granted by name (capabilities: db: [notes]).
// The host checks every document against its model's fields, and scopes
// every op to the calling principal's organization (and, in a model with
// scope: user, to the principal): a document of another organization or
// user is simply not found. Use the package variable [DB]:
//
//	id, _, err := moat.DB.Insert("notes", map[string]any{"title": "buy milk", "done": false})
//	page, err := moat.DB.Query("notes", moat.Query{
//		Where: []moat.Cond{moat.Where("done", "=", false)},
//		Order: []string{"-due"},
//	})
//
// Times are RFC 3339 strings on the wire (a time.Time marshals to one);
// the host keeps them in UTC at millisecond precision. The package
// comment of abi lists the types, operators and limits.
type DBStore struct{}

// DB is the module's documents.
var DB DBStore

// Doc is a stored document: its JSON (Raw) and what the host keeps beside
// it.
type Doc struct {
	ID      string
	Version int64 // 1 on insert, one more on every update
	Owner   string
	Created time.Time
	Updated time.Time
	Raw     json.RawMessage
}

// Decode unmarshals the document into v.
func (d Doc) Decode(v any) error {
	if err := json.Unmarshal(d.Raw, v); err != nil {
		return abi.Errorf(abi.CodeInvalidArgument, "decode document %s into %T: %v", d.ID, v, err)
	}
	return nil
}

func docOf(w abi.DBDoc) Doc {
	d := Doc{ID: w.ID, Version: w.Version, Owner: w.Owner, Raw: w.Doc}
	d.Created, _ = time.Parse(time.RFC3339Nano, w.Created)
	d.Updated, _ = time.Parse(time.RFC3339Nano, w.Updated)
	return d
}

// Cond is one condition of a query: Field Op Value, with Op one of = != <
// <= > >= in prefix contains. Build it with [Where].
type Cond struct {
	Field string
	Op    string
	Value any
}

// Where builds a condition: Where("due", "<", time.Now()).
func Where(field, op string, value any) Cond { return Cond{Field: field, Op: op, Value: value} }

func conditions(op string, where []Cond) ([]abi.DBCondition, error) {
	out := make([]abi.DBCondition, len(where))
	for i, c := range where {
		w, err := abi.Where(c.Field, c.Op, c.Value)
		if err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "op %s: %v", op, err)
		}
		out[i] = w
	}
	return out, nil
}

// Query selects documents: all of Where must hold; Order names fields,
// "-field" for descending (ties, and an empty Order, go by id); Limit is
// the page size (0: the host's default); After is the Next of the
// previous page.
type Query struct {
	Where []Cond
	Order []string
	Limit int
	After string
}

// Page is one page of a query; Next is "" on the last.
type Page struct {
	Docs []Doc
	Next string
}

// Insert stores doc (anything that marshals to a JSON object) as a new
// document of model, and returns its id and version.
func (DBStore) Insert(model string, doc any) (id string, version int64, err error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return "", 0, abi.Errorf(abi.CodeInvalidArgument, "op %s: encode the document: %v", abi.OpDBInsert, err)
	}
	var resp abi.DBInsertResponse
	if err := Call(abi.OpDBInsert, abi.DBInsertRequest{Model: model, Doc: raw}, &resp); err != nil {
		return "", 0, err
	}
	return resp.ID, resp.Version, nil
}

// Get reads the document id of model; found is false when the caller's
// scope holds none.
func (DBStore) Get(model, id string) (doc Doc, found bool, err error) {
	var resp abi.DBGetResponse
	if err := Call(abi.OpDBGet, abi.DBGetRequest{Model: model, ID: id}, &resp); err != nil {
		return Doc{}, false, err
	}
	if !resp.Found {
		return Doc{}, false, nil
	}
	return docOf(abi.DBDoc{ID: resp.ID, Version: resp.Version, Doc: resp.Doc, Owner: resp.Owner, Created: resp.Created, Updated: resp.Updated}), true, nil
}

// Query reads one page of the documents of model that q selects.
func (DBStore) Query(model string, q Query) (Page, error) {
	where, err := conditions(abi.OpDBQuery, q.Where)
	if err != nil {
		return Page{}, err
	}
	var resp abi.DBQueryResponse
	if err := Call(abi.OpDBQuery, abi.DBQueryRequest{Model: model, Where: where, Order: q.Order, Limit: q.Limit, After: q.After}, &resp); err != nil {
		return Page{}, err
	}
	p := Page{Docs: make([]Doc, len(resp.Docs)), Next: resp.Next}
	for i, d := range resp.Docs {
		p.Docs[i] = docOf(d)
	}
	return p, nil
}

// Change is what Update does to a document: Set's fields (anything that
// marshals to a JSON object) replace theirs, Unset's are removed. With
// Version not 0 the document must still be at that version, or the
// update fails with abi.CodeConflict.
type Change struct {
	Set     any
	Unset   []string
	Version int64
}

// Update changes the document id of model and returns its new version.
func (DBStore) Update(model, id string, c Change) (version int64, err error) {
	req := abi.DBUpdateRequest{Model: model, ID: id, Unset: c.Unset, Version: c.Version}
	if c.Set != nil {
		if req.Set, err = json.Marshal(c.Set); err != nil {
			return 0, abi.Errorf(abi.CodeInvalidArgument, "op %s: encode set: %v", abi.OpDBUpdate, err)
		}
	}
	var resp abi.DBUpdateResponse
	if err := Call(abi.OpDBUpdate, req, &resp); err != nil {
		return 0, err
	}
	return resp.Version, nil
}

// Delete removes the document id of model and reports whether it was
// there. With version not 0 the document must still be at that version,
// or the delete fails with abi.CodeConflict.
func (DBStore) Delete(model, id string, version int64) (deleted bool, err error) {
	var resp abi.DBDeleteResponse
	if err := Call(abi.OpDBDelete, abi.DBDeleteRequest{Model: model, ID: id, Version: version}, &resp); err != nil {
		return false, err
	}
	return resp.Deleted, nil
}

// Count counts the documents of model for which every condition holds.
func (DBStore) Count(model string, where ...Cond) (int64, error) {
	conds, err := conditions(abi.OpDBCount, where)
	if err != nil {
		return 0, err
	}
	var resp abi.DBCountResponse
	if err := Call(abi.OpDBCount, abi.DBCountRequest{Model: model, Where: conds}, &resp); err != nil {
		return 0, err
	}
	return resp.Count, nil
}
