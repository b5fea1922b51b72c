package ops_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/policy"
)

// requestTypes is the request type of every op of the table. A new op
// without an entry fails TestOpDecodeErrorsHostile, so none escapes it.
var requestTypes = map[string]any{
	abi.OpAIComplete:      abi.AICompleteRequest{},
	abi.OpAIEmbed:         abi.AIEmbedRequest{},
	abi.OpConfigGet:       abi.ConfigGetRequest{},
	abi.OpCaller:          abi.Empty{},
	abi.OpDBInsert:        abi.DBInsertRequest{},
	abi.OpDBGet:           abi.DBGetRequest{},
	abi.OpDBQuery:         abi.DBQueryRequest{},
	abi.OpDBUpdate:        abi.DBUpdateRequest{},
	abi.OpDBDelete:        abi.DBDeleteRequest{},
	abi.OpDBCount:         abi.DBCountRequest{},
	abi.OpHTTPFetch:       abi.HTTPFetchRequest{},
	abi.OpKnowledgeAdd:    abi.KnowledgeAddRequest{},
	abi.OpKnowledgeDelete: abi.KnowledgeDeleteRequest{},
	abi.OpKnowledgeSearch: abi.KnowledgeSearchRequest{},
	abi.OpKVGet:           abi.KVGetRequest{},
	abi.OpKVPut:           abi.KVPutRequest{},
	abi.OpKVDelete:        abi.KVDeleteRequest{},
	abi.OpKVList:          abi.KVListRequest{},
	abi.OpLogWrite:        abi.LogWriteRequest{},
	abi.OpMediaPut:        abi.MediaPutRequest{},
	abi.OpMediaFetch:      abi.MediaFetchRequest{},
	abi.OpMediaGet:        abi.MediaGetRequest{},
	abi.OpMediaInfo:       abi.MediaInfoRequest{},
	abi.OpMediaThumbnail:  abi.MediaThumbnailRequest{},
	abi.OpTaskEnqueue:     abi.TaskEnqueueRequest{},
	abi.OpTaskStatus:      abi.TaskIDRequest{},
	abi.OpTaskCancel:      abi.TaskIDRequest{},
}

// goWords are what a message in the wire's terms never holds: Go type
// names and encoding/json's own phrasing.
var goWords = []string{"*abi.", "abi.", "[]uint8", "struct", "Go value", "Go struct", "of type", "map[", "interface", "json:", "%!"}

// hostileCase is one request that must fail to decode, and what the
// message must start with.
type hostileCase struct {
	name, op, req, want string
}

// wrongValue is a JSON value of the wrong kind for a field of type t,
// and what the message says the field expects; ok is false for a field
// any JSON value fits.
func wrongValue(t reflect.Type) (val, want string, ok bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return "", "", false // its own form (json.RawMessage takes anything)
	}
	switch t.Kind() {
	case reflect.String:
		return `5`, "expected a string, got a number", true
	case reflect.Bool:
		return `"yes"`, "expected true or false, got a string", true
	case reflect.Int, reflect.Int64, reflect.Int32:
		return `"x"`, "expected an integer, got a string", true
	case reflect.Float32, reflect.Float64:
		return `"x"`, "expected a number, got a string", true
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return `5`, "expected base64 bytes in a string", true
		}
		return `{}`, "expected an array, got an object", true
	case reflect.Map, reflect.Struct:
		return `[]`, "expected an object, got an array", true
	}
	return "", "", false
}

// hostileCases builds, for every op: malformed JSON, a request that is
// not an object, a fraction where an integer goes, and for every field a
// value of the wrong kind; for every byte field, bad base64.
func hostileCases(t *testing.T) []hostileCase {
	var cases []hostileCase
	for _, op := range ops.Names() {
		if strings.HasPrefix(op, "testnotes.") {
			continue
		}
		proto, ok := requestTypes[op]
		if !ok {
			t.Errorf("op %s has no entry in requestTypes: add its request type so its decoding errors are tested", op)
			continue
		}
		cases = append(cases,
			hostileCase{"syntax", op, `{"key":`, op + ": the request is not valid JSON (at byte 7): unexpected end of JSON input"},
			hostileCase{"trailing", op, `{} x`, op + ": the request is not valid JSON (at byte 4): invalid character 'x' after top-level value"},
			hostileCase{"array", op, `[1]`, op + ": the request: expected an object, got an array"},
			hostileCase{"string", op, `"hi"`, op + ": the request: expected an object, got a string"},
		)
		rt := reflect.TypeOf(proto)
		for i := range rt.NumField() {
			f := rt.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if val, want, ok := wrongValue(f.Type); ok {
				cases = append(cases, hostileCase{"type/" + name, op, `{"` + name + `":` + val + `}`,
					op + `: field "` + name + `": ` + want})
			}
			if f.Type.Kind() == reflect.Int {
				cases = append(cases, hostileCase{"fraction/" + name, op, `{"` + name + `":1.5}`,
					op + `: field "` + name + `": expected an integer, got number 1.5`})
			}
			if f.Type == reflect.TypeFor[[]byte]() {
				cases = append(cases, hostileCase{"base64/" + name, op, `{"` + name + `":"t1"}`,
					op + `: field "` + name + `": expected base64 bytes`})
			}
		}
	}
	return append(cases,
		// The issue's own example, word for word.
		hostileCase{"issue", abi.OpTaskEnqueue, `{"action":"work","input":"t1"}`,
			`task.enqueue: field "input": expected base64 bytes (or use "input_text" for text): illegal base64 data at input byte 0`},
		// Nested fields are named by their path.
		hostileCase{"nested", abi.OpDBQuery, `{"model":"m","where":[["done","=",true],[1,"=",2]]}`,
			`db.query: field "where[1]": a condition's field must be a string, not a number`},
		hostileCase{"nested", abi.OpDBQuery, `{"model":"m","where":[{"field":"x"}]}`,
			`db.query: field "where[0]": a condition is a JSON array [field, op, value], not an object`},
		hostileCase{"nested", abi.OpAIComplete, `{"messages":[{"role":"user","content":7}]}`,
			`ai.complete: field "messages[0].content": expected a string, got a number`},
		hostileCase{"nested", abi.OpHTTPFetch, `{"url":"http://x","headers":{"a":1}}`,
			`http.fetch: field "headers.a": expected a string, got a number`},
		// json matches field names without regard to case; so does the message.
		hostileCase{"case", abi.OpKVPut, `{"Key":"k","VALUE":"%%"}`,
			`kv.put: field "VALUE": expected base64 bytes: illegal base64 data at input byte 0`},
	)
}

// Every op answers a request it cannot decode with invalid_argument in the
// wire's terms: the op, the field by its JSON name and path, what the
// field expects; never a Go type.
func TestOpDecodeErrorsHostile(t *testing.T) {
	env := &ops.Env{Module: "m", Logger: slog.New(slog.DiscardHandler)}
	env.Begin(t.Context(), "a", policy.Principal{User: "u", Org: "o"}, "c")
	cases := hostileCases(t)
	if len(cases) < 100 {
		t.Fatalf("only %d hostile cases: the table lost its ops", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.op+"/"+tc.name, func(t *testing.T) {
			o, ok := ops.Lookup([]byte(tc.op))
			if !ok {
				t.Fatalf("no op %s", tc.op)
			}
			reply, err := ops.Dispatch(env, allowAll, o, []byte(tc.req))
			var ae *abi.Error
			if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
				t.Fatalf("%s %s = %s, %v; want invalid_argument", tc.op, tc.req, reply, err)
			}
			if !strings.HasPrefix(ae.Message, tc.want) {
				t.Errorf("%s %s:\n got  %s\n want %s…", tc.op, tc.req, ae.Message, tc.want)
			}
			for _, w := range goWords {
				if strings.Contains(ae.Message, w) {
					t.Errorf("%s %s: message %q speaks Go (%q)", tc.op, tc.req, ae.Message, w)
				}
			}
		})
	}
}

// task.enqueue takes its input as text in input_text; input and
// input_text together are refused, naming both.
func TestTaskEnqueueInputText(t *testing.T) {
	env := taskEnv(t)
	o, _ := ops.Lookup([]byte(abi.OpTaskEnqueue))
	reply, err := ops.Dispatch(env, allowAll, o, []byte(`{"action":"work","input_text":"t1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var r abi.TaskEnqueueResponse
	if err := json.Unmarshal(reply, &r); err != nil {
		t.Fatal(err)
	}
	task, err := env.Store.TaskGet(t.Context(), env.Scope(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(task.Input) != "t1" {
		t.Errorf("input_text t1 stored as %q", task.Input)
	}
	_, err = ops.Dispatch(env, allowAll, o, []byte(`{"action":"work","input":"dDE=","input_text":"t1"}`))
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument || !strings.Contains(ae.Message, `give "input" (base64 bytes) or "input_text" (text), not both`) {
		t.Errorf("input and input_text together: %v", err)
	}
}
