package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// Documents: what a guest sends is checked as bytes first (size, UTF-8,
// nesting), then decoded and checked against the model field by field,
// and stored in one canonical JSON form (sorted keys, times in UTC at
// millisecond precision, numbers as Go writes them): the bytes a guest
// reads back are the same on every backend, and a filter compares what
// was stored.

// docError is the refusal of a document, naming the op, model and field.
func docError(code abi.Code, op, model, fieldPath, format string, args ...any) error {
	where := "model " + model
	if fieldPath != "" {
		where += ": field " + fieldPath
	}
	return abi.Errorf(code, "%s: %s: %s", op, where, fmt.Sprintf(format, args...))
}

// checkRaw checks the bytes of a JSON value a guest sent: its size, its
// encoding, and how deep it nests. what names it in errors ("doc",
// "set").
func checkRaw(op, model, what string, raw []byte) error {
	if len(raw) > abi.MaxDBDocBytes {
		return abi.Errorf(abi.CodeTooLarge, "%s: model %s: %s is %d bytes; the most is %d (abi.MaxDBDocBytes)", op, model, what, len(raw), abi.MaxDBDocBytes)
	}
	if !utf8.Valid(raw) {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: %s is not valid UTF-8; send JSON text in UTF-8", op, model, what)
	}
	if d := jsonDepth(raw); d > abi.MaxDBDepth {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: %s nests %d deep; the most is %d (abi.MaxDBDepth)", op, model, what, d, abi.MaxDBDepth)
	}
	return nil
}

// jsonDepth is the deepest nesting of objects and arrays in b, which is
// JSON or anything else: brackets inside strings do not count. It stops
// counting past MaxDBDepth+1, so a hostile input costs one pass.
func jsonDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > abi.MaxDBDepth {
					return deepest
				}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// decodeObject decodes raw, which must be exactly one JSON object, keeping
// numbers as json.Number.
func decodeObject(op, model, what string, raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: %s is not valid JSON: %v", op, model, what, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: %s holds more than one JSON value", op, model, what)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: %s must be a JSON object, like {\"title\": \"...\"}; got %s", op, model, what, jsonKind(v))
	}
	return obj, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// normalizer checks and rewrites the values of one document, counting
// them against abi.MaxDBDocValues.
type normalizer struct {
	op, model string
	values    int
}

func (n *normalizer) fail(path, format string, args ...any) error {
	return docError(abi.CodeInvalidArgument, n.op, n.model, path, format, args...)
}

func (n *normalizer) count(path string) error {
	if n.values++; n.values > abi.MaxDBDocValues {
		return docError(abi.CodeTooLarge, n.op, n.model, path, "the document holds more than %d values (abi.MaxDBDocValues)", abi.MaxDBDocValues)
	}
	return nil
}

// document checks doc against sc and rewrites it in place: every declared
// field to its canonical value, every other field (when the model is
// additional) checked as free JSON.
func (n *normalizer) document(sc *Schema, doc map[string]any) error {
	if len(doc) > abi.MaxDBDocFields {
		return docError(abi.CodeTooLarge, n.op, n.model, "", "the document has %d fields; the most is %d (abi.MaxDBDocFields)", len(doc), abi.MaxDBDocFields)
	}
	for _, name := range slices.Sorted(mapsKeys(doc)) {
		nv, err := n.field(sc, name, doc[name])
		if err != nil {
			return err
		}
		doc[name] = nv
	}
	return n.required(sc, doc)
}

// field checks the value a guest gives field name.
func (n *normalizer) field(sc *Schema, name string, v any) (any, error) {
	f, declared := sc.fields[name]
	if declared {
		return n.value(f, name, v)
	}
	if !sc.additional {
		return nil, n.fail(quotePath(name), "is not declared in the model; declare it under models.%s.fields in moat.yaml, or set additional: true", sc.name)
	}
	if err := n.checkKey(quotePath(name), name); err != nil {
		return nil, err
	}
	return n.free(quotePath(name), v)
}

// required checks that doc holds every required field of sc.
func (n *normalizer) required(sc *Schema, doc map[string]any) error {
	for _, name := range slices.Sorted(mapsKeys(sc.fields)) {
		if _, ok := doc[name]; !ok && sc.fields[name].required {
			return n.fail(name, "is required; every document of model %s holds it", sc.name)
		}
	}
	return nil
}

// quotePath names a field that may be any string in messages.
func quotePath(name string) string {
	if abi.ValidDBFieldName(name) {
		return name
	}
	return strconv.QuoteToASCII(name)
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// value checks one value of a declared field.
func (n *normalizer) value(f *field, path string, v any) (any, error) {
	if err := n.count(path); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, n.fail(path, "is null; leave the field out (or unset it in db.update) instead")
	}
	switch {
	case f.kind == 0: // object
		if _, ok := v.(map[string]any); !ok {
			return nil, n.fail(path, "must be a JSON object (type object); got %s", jsonKind(v))
		}
		return n.free(path, v)
	case f.array:
		arr, ok := v.([]any)
		if !ok {
			return nil, n.fail(path, "must be a JSON array (type %s); got %s", f.typ, jsonKind(v))
		}
		if f.hasMax && float64(len(arr)) > f.max {
			return nil, n.fail(path, "has %d items; the most is %v (its max)", len(arr), f.max)
		}
		out := make([]any, len(arr))
		for i, e := range arr {
			p := fmt.Sprintf("%s[%d]", path, i)
			if err := n.count(p); err != nil {
				return nil, err
			}
			if e == nil {
				return nil, n.fail(p, "is null; an array of %s holds no nulls", strings.Trim(f.typ, "[]"))
			}
			ne, err := n.scalar(f, p, e, false)
			if err != nil {
				return nil, err
			}
			out[i] = ne
		}
		return out, nil
	}
	return n.scalar(f, path, v, true)
}

// scalar checks one value of f's kind (a field's value, or an element of
// an array field: max applies to a field's value only).
func (n *normalizer) scalar(f *field, path string, v any, applyMax bool) (any, error) {
	typ := strings.Trim(f.typ, "[]")
	switch typ {
	case abi.DBString:
		s, ok := v.(string)
		if !ok {
			return nil, n.fail(path, "must be a string; got %s", jsonKind(v))
		}
		if i := strings.IndexByte(s, 0); i >= 0 {
			return nil, n.fail(path, "holds a NUL character at byte %d; strings may not hold NUL", i)
		}
		if applyMax && f.hasMax {
			if c := utf8.RuneCountInString(s); float64(c) > f.max {
				return nil, n.fail(path, "is %d characters; the most is %v (its max)", c, f.max)
			}
		}
		return s, nil
	case abi.DBTime:
		s, ok := v.(string)
		if !ok {
			return nil, n.fail(path, "must be an RFC 3339 time string like \"2026-01-02T15:04:05Z\"; got %s", jsonKind(v))
		}
		t, err := parseDBTime(s)
		if err != nil {
			return nil, n.fail(path, "%v", err)
		}
		return t, nil
	case abi.DBBool:
		b, ok := v.(bool)
		if !ok {
			return nil, n.fail(path, "must be true or false; got %s", jsonKind(v))
		}
		return b, nil
	case abi.DBInt:
		num, ok := v.(json.Number)
		if !ok {
			return nil, n.fail(path, "must be an integer; got %s", jsonKind(v))
		}
		i, err := parseDBInt(num)
		if err != nil {
			return nil, n.fail(path, "%v", err)
		}
		if applyMax && f.hasMax && float64(i) > f.max {
			return nil, n.fail(path, "is %d; the most is %v (its max)", i, f.max)
		}
		return i, nil
	case abi.DBNumber:
		num, ok := v.(json.Number)
		if !ok {
			return nil, n.fail(path, "must be a number; got %s", jsonKind(v))
		}
		x, err := parseDBNumber(num)
		if err != nil {
			return nil, n.fail(path, "%v", err)
		}
		if applyMax && f.hasMax && x > f.max {
			return nil, n.fail(path, "is %v; the most is %v (its max)", x, f.max)
		}
		return x, nil
	}
	return nil, n.fail(path, "has type %q, which the host cannot check", f.typ)
}

// free checks JSON of any shape (an object field, an undeclared field of
// an additional model): no NUL in a string or a key, finite numbers.
func (n *normalizer) free(path string, v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(mapsKeys(x)) {
			p := path + "." + quotePath(k)
			if err := n.count(p); err != nil {
				return nil, err
			}
			if err := n.checkKey(p, k); err != nil {
				return nil, err
			}
			nv, err := n.free(p, x[k])
			if err != nil {
				return nil, err
			}
			x[k] = nv
		}
		return x, nil
	case []any:
		for i, e := range x {
			p := fmt.Sprintf("%s[%d]", path, i)
			if err := n.count(p); err != nil {
				return nil, err
			}
			ne, err := n.free(p, e)
			if err != nil {
				return nil, err
			}
			x[i] = ne
		}
		return x, nil
	case string:
		if i := strings.IndexByte(x, 0); i >= 0 {
			return nil, n.fail(path, "holds a NUL character at byte %d; strings may not hold NUL", i)
		}
	case json.Number:
		if _, err := parseDBNumber(x); err != nil {
			return nil, n.fail(path, "%v", err)
		}
	}
	return v, nil
}

func (n *normalizer) checkKey(path, k string) error {
	if i := strings.IndexByte(k, 0); i >= 0 {
		return n.fail(path, "the key holds a NUL character at byte %d; keys may not hold NUL", i)
	}
	if k == "" {
		return n.fail(path, "the key is empty")
	}
	return nil
}

// parseDBTime reads an RFC 3339 time and writes it as the host stores
// it: UTC, millisecond precision, fixed width (abi.DBTimeLayout).
func parseDBTime(s string) (string, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "", fmt.Errorf("%q is not an RFC 3339 time like \"2026-01-02T15:04:05Z\"", truncate(s, 64))
	}
	t = t.UTC().Truncate(time.Millisecond)
	if t.Year() < 0 || t.Year() > 9999 {
		return "", fmt.Errorf("%q is outside the years 0000 to 9999 in UTC", truncate(s, 64))
	}
	return t.Format(abi.DBTimeLayout), nil
}

// parseDBInt reads an integer within ±abi.MaxDBSafeInt; 3.0 and 3e2 are
// integers too.
func parseDBInt(num json.Number) (int64, error) {
	if i, err := strconv.ParseInt(string(num), 10, 64); err == nil {
		if i > abi.MaxDBSafeInt || i < -abi.MaxDBSafeInt {
			return 0, fmt.Errorf("%s is outside ±%d, the integers every language reads exactly", num, int64(abi.MaxDBSafeInt))
		}
		return i, nil
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || f != math.Trunc(f) {
		return 0, fmt.Errorf("%s is not an integer", truncate(string(num), 64))
	}
	if math.Abs(f) > abi.MaxDBSafeInt {
		return 0, fmt.Errorf("%s is outside ±%d, the integers every language reads exactly", truncate(string(num), 64), int64(abi.MaxDBSafeInt))
	}
	return int64(f), nil
}

// parseDBNumber reads a finite float64.
func parseDBNumber(num json.Number) (float64, error) {
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s is not a number a float64 holds", truncate(string(num), 64))
	}
	return f, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// encodeDoc writes a checked document in canonical form and refuses one
// larger than abi.MaxDBDocBytes.
func encodeDoc(op, model string, doc map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: encode the document: %v", op, model, err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > abi.MaxDBDocBytes {
		return nil, abi.Errorf(abi.CodeTooLarge, "%s: model %s: the document is %d bytes as stored; the most is %d (abi.MaxDBDocBytes)", op, model, len(b), abi.MaxDBDocBytes)
	}
	return b, nil
}

// terms lists the elements of doc's array fields that have an index of
// their own, once each.
func (sc *Schema) terms(doc map[string]any) []driver.DBTerm {
	var out []driver.DBTerm
	for _, name := range slices.Sorted(mapsKeys(sc.fields)) {
		f := sc.fields[name]
		if !f.terms {
			continue
		}
		arr, _ := doc[name].([]any)
		seen := make(map[any]bool, len(arr))
		for _, e := range arr {
			// A value carried from the stored document is still a
			// json.Number: terms hold the field kind's Go type.
			if num, ok := e.(json.Number); ok {
				var err error
				if f.kind == driver.DBInteger {
					e, err = parseDBInt(num)
				} else {
					e, err = parseDBNumber(num)
				}
				if err != nil {
					continue
				}
			}
			if !seen[e] {
				seen[e] = true
				out = append(out, driver.DBTerm{Field: name, Value: e})
			}
		}
	}
	return out
}

// checkDocument checks raw against sc and returns its canonical bytes and
// terms.
func (sc *Schema) checkDocument(op string, raw []byte) ([]byte, []driver.DBTerm, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s: doc is missing; send the document as a JSON object", op, sc.name)
	}
	if err := checkRaw(op, sc.name, "doc", raw); err != nil {
		return nil, nil, err
	}
	doc, err := decodeObject(op, sc.name, "doc", raw)
	if err != nil {
		return nil, nil, err
	}
	n := normalizer{op: op, model: sc.name}
	if err := n.document(sc, doc); err != nil {
		return nil, nil, err
	}
	b, err := encodeDoc(op, sc.name, doc)
	if err != nil {
		return nil, nil, err
	}
	return b, sc.terms(doc), nil
}

// applyUpdate applies set (a JSON object) and unset to the stored
// document old: each value set is checked as an insert's would be, the
// required fields must still be there, and the fields the stored document
// holds beyond those (fields an earlier version of the model declared)
// are carried along as they are.
func (sc *Schema) applyUpdate(op string, old []byte, set []byte, unset []string) ([]byte, []driver.DBTerm, error) {
	doc, err := decodeObject(op, sc.name, "the stored document", old)
	if err != nil {
		return nil, nil, err
	}
	n := normalizer{op: op, model: sc.name}
	if len(bytes.TrimSpace(set)) > 0 {
		if err := checkRaw(op, sc.name, "set", set); err != nil {
			return nil, nil, err
		}
		changes, err := decodeObject(op, sc.name, "set", set)
		if err != nil {
			return nil, nil, err
		}
		for _, name := range slices.Sorted(mapsKeys(changes)) {
			nv, err := n.field(sc, name, changes[name])
			if err != nil {
				return nil, nil, err
			}
			doc[name] = nv
		}
	}
	for _, name := range unset {
		if f, ok := sc.fields[name]; ok && f.required {
			return nil, nil, docError(abi.CodeInvalidArgument, op, sc.name, name, "is required and cannot be unset; set a new value instead")
		}
		delete(doc, name)
	}
	if len(doc) > abi.MaxDBDocFields {
		return nil, nil, docError(abi.CodeTooLarge, op, sc.name, "", "the document would have %d fields; the most is %d (abi.MaxDBDocFields)", len(doc), abi.MaxDBDocFields)
	}
	if err := n.required(sc, doc); err != nil {
		return nil, nil, err
	}
	b, err := encodeDoc(op, sc.name, doc)
	if err != nil {
		return nil, nil, err
	}
	return b, sc.terms(doc), nil
}
