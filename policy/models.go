package policy

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/abi"
)

// Model is one document model of a manifest (models: in moat.yaml): what
// the db ops (db.insert, db.query, ...) store under its name.
//
//	models:
//	  notes:
//	    scope: user          # org (default): every user of the org sees the org's rows; user: only the creator's
//	    fields:
//	      title: {type: string, required: true, max: 200}
//	      tags:  {type: "[string]"}
//	      due:   {type: time}
//	    indexes: [[done, due], [tags]]
//
// A model only declares; the db capability (capabilities: db: [notes])
// is still needed to use it, and the operator's profile must grant it.
// The host checks every document against the fields, keeps the model's
// shape in the store, and refuses at load a change that stored documents
// could not follow (a field's type, a new required field), saying how to
// migrate. abi's package comment gives each type's wire form.
type Model struct {
	Scope      string                `yaml:"scope,omitempty"` // org (default) or user
	Fields     map[string]ModelField `yaml:"fields,omitempty"`
	Indexes    [][]string            `yaml:"indexes,omitempty"`
	Additional bool                  `yaml:"additional,omitempty"` // keep fields the model does not declare
}

// ModelField is one field of a Model.
type ModelField struct {
	Type     string   `yaml:"type"` // one of abi.DBTypes
	Required bool     `yaml:"required,omitempty"`
	Max      *float64 `yaml:"max,omitempty"` // string: characters; array: items; int, number: the largest value
}

// checkModels validates m.Models and fills in each model's default scope.
func checkModels(ix *index, m *Manifest) error {
	if len(m.Models) > abi.MaxDBModels {
		return ix.Errorf("models", "declares %d models; the most is %d", len(m.Models), abi.MaxDBModels)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Models)) {
		md := m.Models[name]
		p := "models." + name
		if !abi.ValidDBModelName(name) {
			return ix.Errorf(p, "%q is not a model name; use %s (the name a db grant uses)", name, abi.DBModelNameRule)
		}
		switch md.Scope {
		case "":
			md.Scope = abi.DBScopeOrg
		case abi.DBScopeOrg, abi.DBScopeUser:
		default:
			return ix.Errorf(p+".scope", "%q is not a scope; write org (every user of the organization sees its documents) or user (only the user who inserted one)", md.Scope)
		}
		if len(md.Fields) == 0 && !md.Additional {
			return ix.Errorf(p, "declares no fields; add fields: {title: {type: string}}, or additional: true for documents of any shape")
		}
		if len(md.Fields) > abi.MaxDBModelFields {
			return ix.Errorf(p+".fields", "declares %d fields; the most is %d", len(md.Fields), abi.MaxDBModelFields)
		}
		for _, fname := range slices.Sorted(maps.Keys(md.Fields)) {
			if err := checkModelField(ix, p+".fields."+fname, fname, md.Fields[fname]); err != nil {
				return err
			}
		}
		if err := checkModelIndexes(ix, p+".indexes", md); err != nil {
			return err
		}
		m.Models[name] = md
	}
	return nil
}

func checkModelField(ix *index, p, name string, f ModelField) error {
	if !abi.ValidDBFieldName(name) {
		return ix.Errorf(p, "%q is not a field name; use %s", name, abi.DBFieldNameRule)
	}
	if f.Type == "" {
		return ix.Errorf(p+".type", "a field needs a type; write one of %s", strings.Join(abi.DBTypes, ", "))
	}
	if !slices.Contains(abi.DBTypes, f.Type) {
		return ix.Errorf(p+".type", "%q is not a field type%s; write one of %s (an array type in quotes: \"[string]\")",
			f.Type, didYouMean(f.Type, abi.DBTypes), strings.Join(abi.DBTypes, ", "))
	}
	if f.Max == nil {
		return nil
	}
	v := *f.Max
	switch {
	case f.Type == abi.DBBool || f.Type == abi.DBTime || f.Type == abi.DBObject:
		return ix.Errorf(p+".max", "a %s field takes no max; remove it", f.Type)
	case f.Type == abi.DBNumber:
		return nil
	case f.Type == abi.DBInt:
		if v != math.Trunc(v) || math.Abs(v) > abi.MaxDBSafeInt {
			return ix.Errorf(p+".max", "%v is not a whole number within ±%d; an int field's max is the largest value it may hold", v, int64(abi.MaxDBSafeInt))
		}
	default: // string and arrays: a count
		what := "characters"
		if strings.HasPrefix(f.Type, "[") {
			what = "items"
		}
		if v != math.Trunc(v) || v < 1 || v > abi.MaxDBDocBytes {
			return ix.Errorf(p+".max", "%v is not a count of %s from 1 to %d", v, what, abi.MaxDBDocBytes)
		}
	}
	return nil
}

func checkModelIndexes(ix *index, p string, md Model) error {
	if len(md.Indexes) > abi.MaxDBModelIndexes {
		return ix.Errorf(p, "declares %d indexes; the most is %d", len(md.Indexes), abi.MaxDBModelIndexes)
	}
	for i, fields := range md.Indexes {
		pi := fmt.Sprintf("%s[%d]", p, i)
		if len(fields) == 0 || len(fields) > abi.MaxDBIndexFields {
			return ix.Errorf(pi, "an index names 1 to %d fields, like [done, due]", abi.MaxDBIndexFields)
		}
		for j, name := range fields {
			f, ok := md.Fields[name]
			pj := fmt.Sprintf("%s[%d]", pi, j)
			switch {
			case !ok:
				return ix.Errorf(pj, "%q is not a field of this model%s; an index names declared fields", name, didYouMean(name, slices.Sorted(maps.Keys(md.Fields))))
			case f.Type == abi.DBObject:
				return ix.Errorf(pj, "%s is an object field, which cannot be indexed (nor filtered or ordered)", name)
			case strings.HasPrefix(f.Type, "[") && len(fields) > 1:
				return ix.Errorf(pj, "%s is an array field: index it on its own, like [%s]", name, name)
			case slices.Index(fields, name) < j:
				return ix.Errorf(pj, "%s is named twice in this index", name)
			}
		}
		for k := range i {
			if slices.Equal(md.Indexes[k], fields) {
				return ix.Errorf(pi, "the same index as %s[%d]; remove one", p, k)
			}
		}
	}
	return nil
}
