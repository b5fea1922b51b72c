package abi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Decoding errors in the wire's terms.
//
// encoding/json reports a bad request in Go's terms ("cannot unmarshal
// string into Go struct field TaskEnqueueRequest.max_attempts of type
// int"), and a bad base64 field with no field at all ("illegal base64 data
// at input byte 0"). A guest author writes JSON, in JavaScript or Python or
// a shell, and knows neither the host's Go types nor which of their fields
// was base64. So when a request fails to decode, the host decodes it again
// field by field against the request type, finds the first field that
// fails, and says it as the wire does: the op, the field's JSON path, what
// that field expects and what it got. This runs only on the failure path,
// so the common path keeps its one json.Unmarshal.

// UnmarshalRequest decodes the request of op from wire bytes into v. A
// failure is an *Error (CodeInvalidArgument) whose message names op, the
// field in the wire's terms (its JSON name and path) and what the field
// expects; it never names a Go type.
func UnmarshalRequest(op string, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return &Error{Code: CodeInvalidArgument, Message: DescribeDecodeError(op, b, v, err)}
	}
	return nil
}

// DescribeDecodeError explains err, the failure of json.Unmarshal(b, v), in
// the wire's terms, prefixed with what ("task.enqueue"; "" for none).
func DescribeDecodeError(what string, b []byte, v any, err error) string {
	prefix := ""
	if what != "" {
		prefix = what + ": "
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("%sthe request is not valid JSON (at byte %d): %s", prefix, syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil {
		if path, leaf := locate(json.RawMessage(b), t, ""); leaf != nil {
			if path == "" {
				return prefix + "the request: " + describeLeaf(t, leaf, "")
			}
			return fmt.Sprintf("%sfield %q: %s", prefix, path, describeLeaf(fieldType(t, path), leaf, textHint(t, path)))
		}
	}
	// Not found again (it should be): say what json said, without its
	// Go vocabulary.
	return prefix + "malformed request: " + scrub(err.Error())
}

// locate decodes raw as t piece by piece and returns the JSON path of the
// first piece that fails and its error.
func locate(raw json.RawMessage, t reflect.Type, path string) (string, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if string(raw) == "null" {
		return "", nil // json leaves the value alone
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
			return path, err
		}
		return "", nil
	}
	switch {
	case t.Kind() == reflect.Struct:
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return path, err
		}
		for key, val := range obj {
			f, ok := jsonField(t, key)
			if !ok {
				continue // unknown fields are ignored
			}
			if p, err := locate(val, f.Type, join(path, key)); err != nil {
				return p, err
			}
		}
		return "", nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		// []byte: base64 in a string
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		var arr []json.RawMessage
		if err := json.Unmarshal(raw, &arr); err != nil {
			return path, err
		}
		for i, el := range arr {
			if p, err := locate(el, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return p, err
			}
		}
		return "", nil
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return path, err
		}
		for key, val := range obj {
			if p, err := locate(val, t.Elem(), join(path, key)); err != nil {
				return p, err
			}
		}
		return "", nil
	}
	if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
		return path, err
	}
	return "", nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsonField finds the field of struct t that json would fill from key: an
// exact match of its JSON name first, then a case-insensitive one.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var fold reflect.StructField
	found := false
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			if tag == "-" {
				continue
			}
			if n, _, _ := strings.Cut(tag, ","); n != "" {
				name = n
			}
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			if ef, ok := jsonField(f.Type, key); ok {
				return ef, true
			}
			continue
		}
		if name == key {
			return f, true
		}
		if !found && strings.EqualFold(name, key) {
			fold, found = f, true
		}
	}
	return fold, found
}

// fieldType follows a JSON path (a.b[0].c) from t to the type it names.
func fieldType(t reflect.Type, path string) reflect.Type {
	for _, part := range strings.Split(path, ".") {
		name, idx, _ := strings.Cut(part, "[")
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := jsonField(t, name)
			if !ok {
				return nil
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return nil
		}
		for ; idx != ""; _, idx, _ = strings.Cut(idx, "[") {
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
				return nil
			}
			t = t.Elem()
		}
	}
	return t
}

// textHint points a byte field "x" at its text twin "x_text" when the
// request has one: a user who wrote text where base64 was expected meant
// the twin.
func textHint(t reflect.Type, path string) string {
	if strings.ContainsAny(path, ".[") {
		return ""
	}
	if f, ok := jsonField(t, path); !ok || f.Type.Kind() != reflect.Slice || f.Type.Elem().Kind() != reflect.Uint8 {
		return ""
	}
	if _, ok := jsonField(t, path+"_text"); ok {
		return fmt.Sprintf(" (or use %q for text)", path+"_text")
	}
	return ""
}

// describeLeaf says what a value of type t expects (with hint, a pointer
// to an alternative field) and what went wrong.
func describeLeaf(t reflect.Type, err error, hint string) string {
	// Only json's own errors, not one wrapped by a type's UnmarshalJSON
	// (which says what it expects in its own words).
	ute, isType := err.(*json.UnmarshalTypeError)
	switch b64, isB64 := err.(base64.CorruptInputError); {
	case isB64:
		return "expected base64 bytes" + hint + ": " + b64.Error()
	case isType:
		want := wireKind(ute.Type)
		if t != nil && ute.Field == "" {
			want = wireKind(t)
		}
		got := ute.Value // "number 1.5" for a fraction where an integer goes
		if !strings.HasPrefix(got, "number ") {
			got = article(got)
		}
		return fmt.Sprintf("expected %s%s, got %s", want, hint, got)
	}
	return scrub(err.Error()) + hint
}

// wireKind names what a Go type is on the wire.
func wireKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "base64 bytes in a string"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
			return "another form"
		}
		return "an object"
	case reflect.Interface:
		return "a JSON value"
	}
	return "another type"
}

// article puts "a"/"an" before the JSON kind json reports (string,
// object, array, bool, number).
func article(kind string) string {
	switch kind {
	case "object", "array":
		return "an " + kind
	case "bool":
		return "true or false"
	}
	return "a " + kind
}

// scrub removes encoding/json's Go vocabulary from a message it made, for
// the rare error describeLeaf does not know.
func scrub(msg string) string {
	msg = strings.ReplaceAll(msg, "json: ", "")
	if i := strings.Index(msg, " into Go "); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// jsonKind names the kind of a JSON value, for a message.
func jsonKind(raw []byte) string {
	s := strings.TrimLeft(string(raw), " \t\r\n")
	if s == "" {
		return "nothing"
	}
	switch s[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	}
	return "a number"
}
