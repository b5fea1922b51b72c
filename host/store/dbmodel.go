package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// Model declares a document model, as a module's manifest does (the host
// converts policy.Model): its fields, who sees its documents, its
// indexes. CompileModel checks it and makes the Schema every db call
// takes.
type Model struct {
	Name       string
	Scope      string // abi.DBScopeOrg (also for "") or abi.DBScopeUser
	Fields     map[string]Field
	Indexes    [][]string
	Additional bool // keep fields the model does not declare
}

// Field is one field of a Model: its type (one of abi.DBTypes), whether
// every document must hold it, and its max (string: characters; array:
// items; int and number: the largest value).
type Field struct {
	Type     string
	Required bool
	Max      *float64
}

// Schema is a compiled Model: what the db calls validate documents and
// filters against, and what DBMigrate stores to compare the next load's
// model with. It is immutable, and safe to share.
type Schema struct {
	name       string
	user       bool // scope: user
	additional bool
	fields     map[string]*field
	indexes    [][]string
	enc        []byte // the stored form (schemaEnc)
}

// field is a compiled Field.
type field struct {
	name     string
	typ      string
	kind     driver.DBKind // of the value, or of the elements of an array; 0 for an object
	array    bool
	required bool
	max      float64
	hasMax   bool
	terms    bool // an array field with an index of its own
}

// schemaEnc is the stored form of a model: what every version of it
// loaded so far promises about the documents stored under it, as JSON with
// sorted keys. It is the model as declared, merged with the history:
// a field no longer declared stays, retired, with its type (a later field
// of that name must keep it); Required holds only when every version
// required the field; Max is the highest any version allowed (nil: some
// version had none).
type schemaEnc struct {
	V          int                 `json:"v"`
	Scope      string              `json:"scope"`
	Additional bool                `json:"additional"`
	Fields     map[string]fieldEnc `json:"fields"`
	Indexes    [][]string          `json:"indexes"`
}

type fieldEnc struct {
	Type     string   `json:"type"`
	Required bool     `json:"required,omitempty"`
	Max      *float64 `json:"max,omitempty"`
	Retired  bool     `json:"retired,omitempty"`
}

// Name is the model's name.
func (sc *Schema) Name() string { return sc.name }

// UserScoped reports whether the model's documents are seen by their
// owner only (scope: user).
func (sc *Schema) UserScoped() bool { return sc.user }

var scalarKinds = map[string]driver.DBKind{
	abi.DBString: driver.DBText,
	abi.DBTime:   driver.DBText,
	abi.DBInt:    driver.DBInteger,
	abi.DBNumber: driver.DBReal,
	abi.DBBool:   driver.DBBoolean,
}

// CompileModel checks m (the rules policy applies to a manifest, checked
// again here, where the data is) and compiles it. Errors are *abi.Error
// with abi.CodeInvalidArgument, naming the model and the field.
func CompileModel(m Model) (*Schema, error) {
	bad := func(format string, args ...any) (*Schema, error) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "model %s: %s", m.Name, fmt.Sprintf(format, args...))
	}
	if !abi.ValidDBModelName(m.Name) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "model name %q is not valid; use %s", m.Name, abi.DBModelNameRule)
	}
	sc := &Schema{name: m.Name, additional: m.Additional, fields: map[string]*field{}}
	enc := schemaEnc{V: 1, Scope: abi.DBScopeOrg, Additional: m.Additional, Fields: map[string]fieldEnc{}, Indexes: [][]string{}}
	switch m.Scope {
	case "", abi.DBScopeOrg:
	case abi.DBScopeUser:
		sc.user, enc.Scope = true, abi.DBScopeUser
	default:
		return bad("scope %q is neither %s nor %s", m.Scope, abi.DBScopeOrg, abi.DBScopeUser)
	}
	if len(m.Fields) == 0 && !m.Additional {
		return bad("declares no fields; declare some, or additional: true")
	}
	if len(m.Fields) > abi.MaxDBModelFields {
		return bad("declares %d fields; the most is %d", len(m.Fields), abi.MaxDBModelFields)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Fields)) {
		f := m.Fields[name]
		if !abi.ValidDBFieldName(name) {
			return bad("field name %q is not valid; use %s", name, abi.DBFieldNameRule)
		}
		cf := &field{name: name, typ: f.Type, required: f.Required}
		elem := f.Type
		if strings.HasPrefix(f.Type, "[") && strings.HasSuffix(f.Type, "]") {
			cf.array, elem = true, f.Type[1:len(f.Type)-1]
		}
		if k, ok := scalarKinds[elem]; ok {
			cf.kind = k
		} else if f.Type != abi.DBObject {
			return bad("field %s: type %q is not one of %s", name, f.Type, strings.Join(abi.DBTypes, ", "))
		}
		if f.Max != nil {
			v := *f.Max
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0):
				return bad("field %s: max %v is not a number", name, v)
			case f.Type == abi.DBBool || f.Type == abi.DBTime || f.Type == abi.DBObject:
				return bad("field %s: a %s field takes no max", name, f.Type)
			case f.Type == abi.DBInt && (v != math.Trunc(v) || math.Abs(v) > abi.MaxDBSafeInt):
				return bad("field %s: max %v is not a whole number within ±%d", name, v, int64(abi.MaxDBSafeInt))
			case (f.Type == abi.DBString || cf.array) && (v != math.Trunc(v) || v < 1 || v > abi.MaxDBDocBytes):
				return bad("field %s: max %v is not a count from 1 to %d", name, v, abi.MaxDBDocBytes)
			}
			cf.max, cf.hasMax = v, true
		}
		sc.fields[name] = cf
		enc.Fields[name] = fieldEnc{Type: f.Type, Required: f.Required, Max: f.Max}
	}
	if len(m.Indexes) > abi.MaxDBModelIndexes {
		return bad("declares %d indexes; the most is %d", len(m.Indexes), abi.MaxDBModelIndexes)
	}
	for i, ix := range m.Indexes {
		if len(ix) == 0 || len(ix) > abi.MaxDBIndexFields {
			return bad("index %d names %d fields; an index names 1 to %d", i, len(ix), abi.MaxDBIndexFields)
		}
		for j, name := range ix {
			f, ok := sc.fields[name]
			switch {
			case !ok:
				return bad("index %d names %q, which is not a declared field", i, name)
			case f.kind == 0:
				return bad("index %d names the object field %s, which cannot be indexed", i, name)
			case f.array && len(ix) > 1:
				return bad("index %d: the array field %s must be indexed on its own", i, name)
			case slices.Index(ix, name) < j:
				return bad("index %d names %s twice", i, name)
			}
			if f.array {
				f.terms = true
			}
		}
		for k := range i {
			if slices.Equal(m.Indexes[k], ix) {
				return bad("indexes %d and %d are the same", k, i)
			}
		}
		sc.indexes = append(sc.indexes, slices.Clone(ix))
		enc.Indexes = append(enc.Indexes, slices.Clone(ix))
	}
	b, err := json.Marshal(enc)
	if err != nil {
		return bad("encode: %v", err)
	}
	sc.enc = b
	return sc, nil
}

// index is the driver's description of index i of sc in module.
func (sc *Schema) index(module, owner string, i int, isNew bool) driver.DBIndex {
	ix := driver.DBIndex{Module: module, Model: sc.name, ByOwner: sc.user, Org: owner, New: isNew}
	for _, name := range sc.indexes[i] {
		f := sc.fields[name]
		ix.Fields = append(ix.Fields, driver.DBIndexField{Field: name, Kind: f.kind, Array: f.array})
	}
	return ix
}

// merge compares sc with the stored record of its model and returns the
// record to store (sc merged with the history) and, when documents stored
// under earlier versions might not follow sc, why, each with how to
// migrate. Compatible: new optional fields, indexes added or removed, a
// higher max or none, required dropped, additional turned on or off (an
// update carries fields a model no longer declares along unchanged), a
// field retired. Refused: a field's type changed (retired fields
// included), a field required that some version left optional (or new
// and required), a max below one some version allowed, the scope
// changed.
func (sc *Schema) merge(old []byte) (record []byte, why []string, err error) {
	var o schemaEnc
	if err := json.Unmarshal(old, &o); err != nil {
		return nil, nil, fmt.Errorf("stored schema of model %s: %w", sc.name, err)
	}
	if o.V != 1 {
		return nil, nil, fmt.Errorf("stored schema of model %s has version %d, which this moat does not know; upgrade moat", sc.name, o.V)
	}
	var n schemaEnc
	if err := json.Unmarshal(sc.enc, &n); err != nil {
		return nil, nil, err
	}
	add := func(format string, args ...any) {
		why = append(why, fmt.Sprintf("model %s: ", sc.name)+fmt.Sprintf(format, args...))
	}
	if o.Scope != n.Scope {
		add("scope changed from %s to %s, which changes who sees the stored documents; keep scope: %s, or declare a model with another name and copy the documents into it with an action", o.Scope, n.Scope, o.Scope)
	}
	for _, name := range slices.Sorted(maps.Keys(n.Fields)) {
		nf := n.Fields[name]
		of, had := o.Fields[name]
		switch {
		case !had:
			if nf.Required {
				add("field %s is new and required, but documents stored before lack it; declare it required: false and have the module fill it in", name)
			}
			continue
		case nf.Type != of.Type:
			was := ""
			if of.Retired {
				was = " (an earlier version declared it, and stored documents may still hold it)"
			}
			add("field %s changed type from %s to %s%s, but stored documents hold %s values there; declare a new field (%s_%s: {type: %q}), copy the values into it with an action, and stop writing %s",
				name, of.Type, nf.Type, was, of.Type, name, strings.Trim(nf.Type, "[]"), nf.Type, name)
		case nf.Required && !of.Required:
			add("field %s became required, but documents stored while it was optional may lack it; keep it required: false and have the module fill it in", name)
		case nf.Max != nil && (of.Max == nil || *nf.Max < *of.Max):
			was := "no max"
			if of.Max != nil {
				was = fmt.Sprintf("max %v", *of.Max)
			}
			add("field %s's max went from %s to %v, but stored documents may exceed it; keep %s, or declare a new field with the lower max and copy the values into it with an action", name, was, *nf.Max, was)
		}
		// The record keeps what stored documents still promise.
		if !of.Required {
			nf.Required = false
		}
		if of.Max == nil || nf.Max != nil && *of.Max > *nf.Max {
			nf.Max = of.Max
		}
		n.Fields[name] = nf
	}
	for name, of := range o.Fields {
		if _, ok := n.Fields[name]; !ok {
			of.Retired, of.Required = true, false
			n.Fields[name] = of
		}
	}
	if why != nil {
		return nil, why, nil
	}
	record, err = json.Marshal(n)
	return record, nil, err
}

// storedIndexes are the indexes of a stored record, for telling new
// indexes from old.
func storedIndexes(enc []byte) [][]string {
	var o schemaEnc
	if json.Unmarshal(enc, &o) != nil {
		return nil
	}
	return o.Indexes
}

// Models are the compiled models of one module, by name, and the
// organization they were loaded for ("" when every organization may call
// the module). ops take them from the module's load.
type Models struct {
	Owner  string
	byName map[string]*Schema
}

// NewModels gathers compiled schemas. owner is the organization the
// module is loaded for, or "".
func NewModels(owner string, schemas ...*Schema) *Models {
	m := &Models{Owner: owner, byName: make(map[string]*Schema, len(schemas))}
	for _, sc := range schemas {
		m.byName[sc.name] = sc
	}
	return m
}

// Lookup returns the schema of model name.
func (m *Models) Lookup(name string) (*Schema, bool) {
	if m == nil {
		return nil, false
	}
	sc, ok := m.byName[name]
	return sc, ok
}

// Names lists the models, sorted.
func (m *Models) Names() []string {
	if m == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(m.byName))
}
