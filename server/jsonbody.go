package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxJSONDepth bounds how deeply a request body may nest objects and
// arrays: no request moat takes needs more.
const maxJSONDepth = 32

// decodeJSONBody decodes body, one JSON value, into v, refusing what two
// JSON parsers could read differently, so that what moat acts on is what
// any proxy, log or auditor in front of it read: a key given twice in an
// object (encoding/json keeps the last, others the first), also when the
// two differ only in case (encoding/json matches field names without
// case), anything after the value (encoding/json's Decoder stops at the
// first), and nesting deeper than maxJSONDepth. With strict, fields v
// does not have are refused too.
func decodeJSONBody(body []byte, v any, strict bool) error {
	if err := checkJSONKeys(body); err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(body))
	if strict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value: give exactly one object")
	}
	return nil
}

// checkJSONKeys walks body's tokens: duplicate keys (case-folded) and
// depth.
func checkJSONKeys(body []byte) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next string token of an object is a key
	}
	var stack []*frame
	var path []string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if k, ok := tok.(string); ok {
				folded := strings.ToLower(k)
				if top.keys[folded] {
					return fmt.Errorf("the key %q is given twice in %s (keys differing only in case count as one)", k, where(path))
				}
				top.keys[folded] = true
				top.key = false
				path[len(path)-1] = k
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxJSONDepth {
				return fmt.Errorf("the body nests deeper than %d levels", maxJSONDepth)
			}
			obj := tok == json.Delim('{')
			stack = append(stack, &frame{object: obj, keys: map[string]bool{}, key: obj})
			path = append(path, "")
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			path = path[:len(path)-1]
		}
		// A value ended: the next token of an enclosing object is a key.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}

// where names the object a path of keys leads to.
func where(path []string) string {
	var keys []string
	for _, k := range path[:len(path)-1] {
		if k != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "the body"
	}
	return "the body's " + strings.Join(keys, ".")
}
