package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// TestKnowledgeOps drives the knowledge family through Dispatch as a
// transport does: the gate is asked with each request's collection before
// the op acts, replies have the contract's shape, hostile requests are
// refused with their code, and the scope is the invocation's.
func TestKnowledgeOps(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	env := &ops.Env{Module: "kb", Store: st, Logger: slog.New(slog.DiscardHandler)}
	env.Begin(ctx, "a", policy.Principal{User: "ann", Org: "acme"}, "c")
	g := &gate{allow: func(op, target string) bool { return target == "docs" }}
	deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	tests := []struct {
		name, op, req string
		code          abi.Code
		reply         string // "" to skip the comparison
	}{
		{"add", abi.OpKnowledgeAdd, `{"collection":"docs","id":"z","text":"The zebra crossing","meta":{"n":1,"tag":"road"}}`, "", `{"replaced":false}`},
		{"add again", abi.OpKnowledgeAdd, `{"collection":"docs","id":"z","text":"A zebra crossing at night","meta":{"n":1,"tag":"road"}}`, "", `{"replaced":true}`},
		{"search, no hit", abi.OpKnowledgeSearch, `{"collection":"docs","query":"giraffe"}`, "", `{"hits":[]}`},
		{"ungranted collection", abi.OpKnowledgeSearch, `{"collection":"secrets","query":"zebra"}`, abi.CodeDenied, ""},
		{"no collection", abi.OpKnowledgeAdd, `{"id":"x","text":"t"}`, abi.CodeDenied, ""},
		{"NUL through a JSON escape", abi.OpKnowledgeAdd, `{"collection":"docs","id":"x","text":"a\u0000b"}`, abi.CodeInvalidArgument, ""},
		{"nested meta", abi.OpKnowledgeAdd, `{"collection":"docs","id":"x","text":"t","meta":{"a":{"b":1}}}`, abi.CodeInvalidArgument, ""},
		{"20000-deep meta", abi.OpKnowledgeAdd, `{"collection":"docs","id":"x","text":"t","meta":` + deep + `}`, abi.CodeInvalidArgument, ""},
		{"meta not an object", abi.OpKnowledgeAdd, `{"collection":"docs","id":"x","text":"t","meta":[1]}`, abi.CodeInvalidArgument, ""},
		{"limit past the maximum", abi.OpKnowledgeSearch, `{"collection":"docs","query":"zebra","limit":51}`, abi.CodeInvalidArgument, ""},
		{"limit as a string", abi.OpKnowledgeSearch, `{"collection":"docs","query":"zebra","limit":"5"}`, abi.CodeInvalidArgument, ""},
		// Syntax is no error: the words are zebra, near and or, and the
		// text holds no near.
		{"query syntax", abi.OpKnowledgeSearch, `{"collection":"docs","query":"\"NEAR(zebra* OR"}`, "", `{"hits":[]}`},
		{"delete", abi.OpKnowledgeDelete, `{"collection":"docs","id":"z"}`, "", `{"deleted":true}`},
		{"delete again", abi.OpKnowledgeDelete, `{"collection":"docs","id":"z"}`, "", `{"deleted":false}`},
	}
	for _, tt := range tests {
		if tt.name == "delete" {
			// Before the document goes: a search returns it whole.
			op, _ := ops.Lookup([]byte(abi.OpKnowledgeSearch))
			reply, err := ops.Dispatch(env, g, op, []byte(`{"collection":"docs","query":"ZEBRA night","filter":{"tag":"road","n":1}}`))
			if err != nil {
				t.Fatal(err)
			}
			var resp abi.KnowledgeSearchResponse
			if err := json.Unmarshal(reply, &resp); err != nil {
				t.Fatal(err)
			}
			if len(resp.Hits) != 1 || resp.Hits[0].ID != "z" || resp.Hits[0].Score <= 0 || resp.Hits[0].Snippet != "A zebra crossing at night" ||
				resp.Hits[0].Meta["n"] != 1.0 || resp.Hits[0].Meta["tag"] != "road" {
				t.Errorf("search reply %s", reply)
			}
		}
		t.Run(tt.name, func(t *testing.T) {
			op, ok := ops.Lookup([]byte(tt.op))
			if !ok {
				t.Fatalf("no op %s", tt.op)
			}
			g.asked = nil
			reply, err := ops.Dispatch(env, g, op, []byte(tt.req))
			var ae *abi.Error
			switch {
			case tt.code == "" && (err != nil || tt.reply != "" && string(reply) != tt.reply):
				t.Fatalf("%s %s = %s, %v; want %s", tt.op, tt.req, reply, err, tt.reply)
			case tt.code != "" && (!errors.As(err, &ae) || ae.Code != tt.code):
				t.Fatalf("%s: got %v, want code %s", tt.op, err, tt.code)
			}
			if tt.code == abi.CodeInvalidArgument && len(err.Error()) > 400 {
				t.Errorf("the error repeats the request: %d bytes", len(err.Error()))
			}
			// The gate decided, on the collection, before anything else:
			// a request that does not decode is refused before any grant
			// check, and one that does is checked once.
			var req ops.Targeted
			switch tt.op {
			case abi.OpKnowledgeAdd:
				req = &abi.KnowledgeAddRequest{}
			case abi.OpKnowledgeDelete:
				req = &abi.KnowledgeDeleteRequest{}
			default:
				req = &abi.KnowledgeSearchRequest{}
			}
			var want []string
			if json.Unmarshal([]byte(tt.req), req) == nil {
				want = []string{tt.op + " " + req.OpTarget()}
			}
			if !slices.Equal(g.asked, want) {
				t.Errorf("gate asked %q, want %q", g.asked, want)
			}
		})
	}
	// The op wrote under the invocation's scope, and nowhere else.
	if u, err := st.KnowledgeUsage(ctx, store.Scope{Org: "acme", Module: "kb"}); err != nil || u.Documents != 0 {
		t.Errorf("usage after the delete: %+v, %v", u, err)
	}
	for _, mut := range []string{abi.OpKnowledgeAdd, abi.OpKnowledgeDelete} {
		if op, _ := ops.Lookup([]byte(mut)); !op.Mutates {
			t.Errorf("%s must be marked as mutating (audit depends on it)", mut)
		}
	}
	if op, _ := ops.Lookup([]byte(abi.OpKnowledgeSearch)); op.Mutates || op.LeavesSandbox {
		t.Error("knowledge.search neither mutates nor leaves the sandbox")
	}
}

// TestKnowledgeDiskQuota: an add past the module's disk limit is refused
// with too_large naming the quota.
func TestKnowledgeDiskQuota(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	views := attachViews(t, st, "", "name: kb\nversion: 1.0.0\ncapabilities: {knowledge: [docs]}\nlimits: {disk: 64}\n")
	env := &ops.Env{Module: "kb", Store: st, Logger: slog.New(slog.DiscardHandler), Views: views}
	env.Begin(ctx, "a", policy.Principal{User: "ann", Org: "acme"}, "c")
	op, _ := ops.Lookup([]byte(abi.OpKnowledgeAdd))
	if _, err := ops.Dispatch(env, allowAll, op, []byte(`{"collection":"docs","id":"a","text":"`+strings.Repeat("w ", 20)+`"}`)); err != nil {
		t.Fatal(err)
	}
	_, err = ops.Dispatch(env, allowAll, op, []byte(`{"collection":"docs","id":"b","text":"`+strings.Repeat("w ", 20)+`"}`))
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != abi.CodeTooLarge || !strings.Contains(ae.Message, "disk quota of 64 bytes") {
		t.Errorf("add past the disk quota: %v", err)
	}
}
