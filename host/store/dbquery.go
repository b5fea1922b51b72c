package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// Filters: a guest's where, order and after become typed conditions on
// declared fields (driver.DBCond), with every value parsed as the field's
// type; a backend writes them as SQL over those fields only and binds the
// values. Nothing of the request is ever SQL text but names that passed
// the model.

// DBQuery is one page request of db.query (abi.DBQueryRequest without the
// model).
type DBQuery struct {
	Where []abi.DBCondition
	Order []string
	Limit int
	After string
}

func (sc *Schema) queryError(op, format string, args ...any) error {
	return abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: %s", op, sc.name, fmt.Sprintf(format, args...))
}

// compileWhere turns conditions into driver conditions.
func (sc *Schema) compileWhere(op string, where []abi.DBCondition) ([]driver.DBCond, error) {
	if len(where) > abi.MaxDBWhere {
		return nil, sc.queryError(op, "where has %d conditions; the most is %d (abi.MaxDBWhere)", len(where), abi.MaxDBWhere)
	}
	out := make([]driver.DBCond, 0, len(where))
	for i, c := range where {
		dc, err := sc.compileCond(op, i, c)
		if err != nil {
			return nil, err
		}
		out = append(out, dc)
	}
	return out, nil
}

func (sc *Schema) compileCond(op string, i int, c abi.DBCondition) (driver.DBCond, error) {
	at := fmt.Sprintf("where[%d]", i)
	f, ok := sc.fields[c.Field]
	if !ok {
		return driver.DBCond{}, sc.queryError(op, "%s: %s is not a declared field of the model; a filter names declared fields (%s)",
			at, quoted(c.Field), strings.Join(slices.Sorted(mapsKeys(sc.fields)), ", "))
	}
	if f.kind == 0 {
		return driver.DBCond{}, sc.queryError(op, "%s: %s is an object field, which cannot be filtered", at, f.name)
	}
	if !slices.Contains(abi.DBOps, c.Op) {
		return driver.DBCond{}, sc.queryError(op, "%s: %s is not an operator; use one of %s", at, quoted(c.Op), strings.Join(abi.DBOps, " "))
	}
	if len(c.Value) > abi.MaxDBFilterValueBytes*(abi.MaxDBInValues+1) ||
		c.Op != abi.DBIn && len(c.Value) > abi.MaxDBFilterValueBytes {
		return driver.DBCond{}, abi.Errorf(abi.CodeTooLarge, "%s: model %s: %s: the value of %s is %d bytes; the most is %d (abi.MaxDBFilterValueBytes)",
			op, sc.name, at, f.name, len(c.Value), abi.MaxDBFilterValueBytes)
	}
	if !utf8.Valid(c.Value) {
		return driver.DBCond{}, sc.queryError(op, "%s: the value of %s is not valid UTF-8", at, f.name)
	}
	dc := driver.DBCond{Field: f.name, Kind: f.kind, Array: f.array, Terms: f.terms, Op: c.Op}
	typ := strings.Trim(f.typ, "[]")
	refuse := func(why string) (driver.DBCond, error) {
		return driver.DBCond{}, sc.queryError(op, "%s: %s %s on %s (type %s): %s", at, f.name, c.Op, f.name, f.typ, why)
	}
	switch {
	case f.array && c.Op != abi.DBContains:
		return refuse("an array field takes only contains (an element equal to the value)")
	case c.Op == abi.DBPrefix && typ != abi.DBString && typ != abi.DBTime:
		return refuse("prefix takes a string or time field")
	case c.Op == abi.DBContains && !f.array && typ != abi.DBString:
		return refuse("contains takes an array field (an element) or a string field (a substring)")
	case typ == abi.DBBool && c.Op != abi.DBEq && c.Op != abi.DBNe && c.Op != abi.DBIn:
		return refuse("a bool field takes =, != and in")
	}
	switch c.Op {
	case abi.DBIn:
		var vals []json.RawMessage
		if err := json.Unmarshal(c.Value, &vals); err != nil {
			return refuse("in takes a JSON array of values, like [\"a\", \"b\"]")
		}
		if len(vals) == 0 || len(vals) > abi.MaxDBInValues {
			return refuse(fmt.Sprintf("in takes 1 to %d values (abi.MaxDBInValues); got %d", abi.MaxDBInValues, len(vals)))
		}
		for j, raw := range vals {
			v, err := filterValue(f, typ, raw)
			if err != nil {
				return refuse(fmt.Sprintf("value %d: %v", j, err))
			}
			dc.Values = append(dc.Values, v)
		}
	case abi.DBPrefix:
		var s string
		if err := json.Unmarshal(c.Value, &s); err != nil {
			return refuse("prefix takes a string")
		}
		if strings.IndexByte(s, 0) >= 0 {
			return refuse("the prefix holds a NUL character, which no stored string holds")
		}
		dc.Values = []any{s}
		if end, ok := prefixEndUTF8(s); ok {
			dc.Values = append(dc.Values, end)
		}
	case abi.DBContains:
		if !f.array { // a substring
			var s string
			if err := json.Unmarshal(c.Value, &s); err != nil {
				return refuse("contains on a string field takes a string")
			}
			if strings.IndexByte(s, 0) >= 0 {
				return refuse("the value holds a NUL character, which no stored string holds")
			}
			dc.Values = []any{s}
			break
		}
		v, err := filterValue(f, typ, c.Value)
		if err != nil {
			return refuse(err.Error())
		}
		dc.Values = []any{v}
	default:
		v, err := filterValue(f, typ, c.Value)
		if err != nil {
			return refuse(err.Error())
		}
		dc.Values = []any{v}
	}
	return dc, nil
}

func quoted(s string) string { return fmt.Sprintf("%q", truncate(s, 64)) }

// filterValue parses one JSON value as a value of the field's (or its
// elements') type: what a backend compares stored values with.
func filterValue(f *field, typ string, raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the value is not JSON: %v", err)
	}
	if v == nil {
		return nil, fmt.Errorf("the value is null; a document without the field matches no condition on it")
	}
	switch typ {
	case abi.DBString:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("the value must be a string; got %s", jsonKind(v))
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("the value holds a NUL character, which no stored string holds")
		}
		return s, nil
	case abi.DBTime:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("the value must be an RFC 3339 time string; got %s", jsonKind(v))
		}
		return parseDBTime(s)
	case abi.DBBool:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("the value must be true or false; got %s", jsonKind(v))
		}
		return b, nil
	case abi.DBInt:
		num, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("the value must be an integer; got %s", jsonKind(v))
		}
		return parseDBInt(num)
	case abi.DBNumber:
		num, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("the value must be a number; got %s", jsonKind(v))
		}
		return parseDBNumber(num)
	}
	return nil, fmt.Errorf("type %s cannot be compared", f.typ)
}

// prefixEndUTF8 returns the least string greater than every string that
// starts with prefix, in bytewise (code point) order, as valid UTF-8: the
// prefix with its last code point incremented (U+D7FF becomes U+E000,
// past the surrogates), trailing U+10FFFF dropped. ok is false when there
// is no such string (an empty prefix, or only U+10FFFF).
func prefixEndUTF8(prefix string) (string, bool) {
	r := []rune(prefix)
	for i := len(r) - 1; i >= 0; i-- {
		switch {
		case r[i] == utf8.MaxRune:
			continue
		case r[i] == 0xD7FF:
			r[i] = 0xE000
		default:
			r[i]++
		}
		return string(r[:i+1]), true
	}
	return "", false
}

// compileOrder turns "field" and "-field" into driver orders. A field is
// nullable (a row may lack it) unless it is required or a condition of
// where names it: every condition excludes the rows without its field,
// and a field that cannot be missing lets SQLite read its index in order.
func (sc *Schema) compileOrder(op string, order []string, where []driver.DBCond) ([]driver.DBOrder, error) {
	if len(order) > abi.MaxDBOrderFields {
		return nil, sc.queryError(op, "order names %d fields; the most is %d (abi.MaxDBOrderFields)", len(order), abi.MaxDBOrderFields)
	}
	out := make([]driver.DBOrder, 0, len(order))
	for i, o := range order {
		name, desc := strings.CutPrefix(o, "-")
		f, ok := sc.fields[name]
		switch {
		case !ok:
			return nil, sc.queryError(op, "order[%d]: %s is not a declared field; order by declared fields, \"-field\" for descending", i, quoted(name))
		case f.kind == 0 || f.array:
			return nil, sc.queryError(op, "order[%d]: %s is of type %s, which cannot be ordered by", i, name, f.typ)
		}
		for _, prev := range out {
			if prev.Field == name {
				return nil, sc.queryError(op, "order[%d]: %s is named twice", i, name)
			}
		}
		constrained := slices.ContainsFunc(where, func(c driver.DBCond) bool { return c.Field == name })
		out = append(out, driver.DBOrder{Field: name, Kind: f.kind, Desc: desc, Nullable: !f.required && !constrained})
	}
	return out, nil
}

// cursor is the position a next token holds: the order values of the
// last document of a page (in their stored form; null when the document
// lacks the field), its id, and a digest of the query, so that a token is
// refused with another query. It grants nothing: its values are bound as
// parameters, and the scope is the caller's whatever it says.
type cursor struct {
	V  int               `json:"v"`
	Q  string            `json:"q"`
	K  []json.RawMessage `json:"k"`
	ID string            `json:"id"`
}

// queryDigest identifies a query (model, where, order) in its cursors.
func (sc *Schema) queryDigest(q DBQuery) string {
	b, _ := json.Marshal(struct {
		Model string            `json:"m"`
		Where []abi.DBCondition `json:"w"`
		Order []string          `json:"o"`
	}{sc.name, q.Where, q.Order})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// encodeCursor makes the next token after row.
func (sc *Schema) encodeCursor(q DBQuery, order []driver.DBOrder, row driver.DBRow) (string, error) {
	c := cursor{V: 1, Q: sc.queryDigest(q), ID: row.ID, K: []json.RawMessage{}}
	if len(order) > 0 {
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(row.Doc, &doc); err != nil {
			return "", fmt.Errorf("decode the stored document %s: %w", row.ID, err)
		}
		for _, o := range order {
			v, ok := doc[o.Field]
			if !ok {
				v = json.RawMessage("null")
			}
			c.K = append(c.K, v)
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// decodeCursor checks a next token against the query and returns the
// position it holds.
func (sc *Schema) decodeCursor(op string, q DBQuery, order []driver.DBOrder) (vals []any, id string, err error) {
	bad := func(why string) ([]any, string, error) {
		return nil, "", abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: after: %s; pass the next of the previous page of the same query, unchanged", op, sc.name, why)
	}
	if len(q.After) > abi.MaxDBCursorBytes {
		return bad(fmt.Sprintf("is %d bytes, more than a cursor ever is (%d)", len(q.After), abi.MaxDBCursorBytes))
	}
	raw, err := base64.RawURLEncoding.DecodeString(q.After)
	if err != nil {
		return bad("is not a cursor this host made")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var c cursor
	if err := dec.Decode(&c); err != nil || c.V != 1 {
		return bad("is not a cursor this host made")
	}
	if c.Q != sc.queryDigest(q) {
		return bad("was made for another query (another model, where or order)")
	}
	if !validDocID(c.ID) || len(c.K) != len(order) {
		return bad("is damaged")
	}
	for i, o := range order {
		f := sc.fields[o.Field]
		if bytes.Equal(bytes.TrimSpace(c.K[i]), []byte("null")) {
			if !o.Nullable {
				return bad("is damaged")
			}
			vals = append(vals, nil)
			continue
		}
		v, err := filterValue(f, f.typ, c.K[i])
		if err != nil {
			return bad("is damaged")
		}
		vals = append(vals, v)
	}
	return vals, c.ID, nil
}
