package ops_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// gate is a test ops.Gate: it allows what allow says and records every
// decision it was asked for.
type gate struct {
	allow func(op, target string) bool
	asked []string // "op target"
}

func (g *gate) AllowOp(env *ops.Env, o *ops.Op, target string) error {
	g.asked = append(g.asked, o.Name+" "+target)
	if g.allow != nil && !g.allow(o.Name, target) {
		return &abi.Error{Code: abi.CodeDenied, Message: "test gate refused " + o.Name + " on " + target}
	}
	return nil
}

var allowAll = &gate{}

// A test family, registered from this file alone: the contract of adding
// an op family is that nothing else changes.
type noteRequest struct {
	Model string `json:"model"`
	Text  string `json:"text"`
}

func (r *noteRequest) OpTarget() string { return r.Model }

var notesWritten []string

func init() {
	ops.Register(ops.Op{Name: "testnotes.add", Capability: "db", Mutates: true,
		Func: ops.Typed(func(env *ops.Env, req *noteRequest) (*abi.Empty, error) {
			notesWritten = append(notesWritten, req.Model+":"+req.Text)
			return &abi.Empty{}, nil
		})})
	// An op written against raw bytes that forgets to ask the gate.
	ops.Register(ops.Op{Name: "testnotes.forgetful", Capability: "db",
		Func: func(env *ops.Env, req []byte) ([]byte, error) { return []byte("{}"), nil }})
}

// TestTableContract holds, for every op of the table, what the gate and
// policy rely on: policy knows the op under the capability the table
// gives it, and the gate decides before the op runs: before the request
// is decoded for a capability granted as a whole, with the request's
// target for one granted per target.
func TestTableContract(t *testing.T) {
	names := ops.Names()
	for _, want := range []string{abi.OpConfigGet, abi.OpKVDelete, abi.OpKVGet, abi.OpKVList, abi.OpKVPut, abi.OpLogWrite} {
		if _, ok := ops.Lookup([]byte(want)); !ok {
			t.Errorf("the table lacks %s (has %v)", want, names)
		}
	}
	if op, _ := ops.Lookup([]byte(abi.OpKVPut)); !op.Mutates {
		t.Error("kv.put must be marked as mutating (audit depends on it)")
	}
	env := &ops.Env{Module: "m", Logger: slog.New(slog.DiscardHandler)}
	env.Begin(context.Background(), "a", policy.Principal{User: "u", Org: "o"}, "c")
	for _, name := range names {
		op, _ := ops.Lookup([]byte(name))
		capability, ok := policy.OpCapability(name)
		if !ok || capability != op.Capability {
			t.Errorf("%s: policy knows it as (%q, %v); the table says capability %q", name, capability, ok, op.Capability)
		}
		// A refusing gate: the op must not run, whatever its request. A
		// request that does not decode may fail first for an op granted
		// per target (it names no target yet), never with success.
		g := &gate{allow: func(string, string) bool { return false }}
		for _, req := range []string{`{}`, `not json`} {
			g.asked = nil
			reply, err := ops.Dispatch(env, g, op, []byte(req))
			var ae *abi.Error
			if err == nil || !errors.As(err, &ae) || reply != nil {
				t.Errorf("%s %s under a refusing gate = %q, %v; want an error", name, req, reply, err)
				continue
			}
			if policy.CapabilityTarget(op.Capability) == "" && (len(g.asked) != 1 || g.asked[0] != name+" " || ae.Code != abi.CodeDenied) {
				t.Errorf("%s %s: gate asked %q, err %v; want one decision on no target, before decoding, and its refusal", name, req, g.asked, err)
			}
		}
	}
}

func TestGateSeesTarget(t *testing.T) {
	op, _ := ops.Lookup([]byte("testnotes.add"))
	env := &ops.Env{Module: "m", Logger: slog.New(slog.DiscardHandler)}
	env.Begin(context.Background(), "a", policy.Principal{User: "u", Org: "o"}, "c")
	g := &gate{allow: func(_, target string) bool { return target == "notes" }}
	notesWritten = nil
	if _, err := ops.Dispatch(env, g, op, []byte(`{"model":"notes","text":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	_, err := ops.Dispatch(env, g, op, []byte(`{"model":"secrets","text":"steal"}`))
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != abi.CodeDenied {
		t.Fatalf("secrets: %v, want denied", err)
	}
	if strings.Join(g.asked, ",") != "testnotes.add notes,testnotes.add secrets" || strings.Join(notesWritten, ",") != "notes:hi" {
		t.Fatalf("gate asked %q, written %q", g.asked, notesWritten)
	}
	// A raw op that never asks is refused as a host bug.
	op, _ = ops.Lookup([]byte("testnotes.forgetful"))
	if _, err := ops.Dispatch(env, allowAll, op, []byte(`{}`)); !errors.As(err, &ae) || ae.Code != abi.CodeInternal {
		t.Fatalf("forgetful op: %v, want internal", err)
	}
	// Outside Dispatch nothing can be allowed.
	if err := env.Allow("notes"); !errors.As(err, &ae) || ae.Code != abi.CodeInternal {
		t.Fatalf("Allow outside a call: %v", err)
	}
}

func TestRegisterRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		op   ops.Op
		want string
	}{
		{"no name", ops.Op{Func: func(*ops.Env, []byte) ([]byte, error) { return nil, nil }}, "needs a name"},
		{"duplicate", ops.Op{Name: abi.OpKVGet, Capability: "kv", Func: func(*ops.Env, []byte) ([]byte, error) { return nil, nil }}, "registered twice"},
		{"unknown capability", ops.Op{Name: "testnotes.mail", Capability: "email", Func: func(*ops.Env, []byte) ([]byte, error) { return nil, nil }}, `capability "email", which policy does not know`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tt.want) {
					t.Fatalf("panic %v, want %q", r, tt.want)
				}
			}()
			ops.Register(tt.op)
		})
	}
}

func TestOpErrors(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	env := &ops.Env{Module: "m", Store: st, Logger: slog.New(slog.DiscardHandler), Config: map[string]string{"k": "v"}}
	env.Begin(ctx, "a", policy.Principal{User: "u", Org: "o"}, "c")
	tests := []struct {
		op, req string
		code    abi.Code
		reply   string
	}{
		{abi.OpConfigGet, `{"key":"k"}`, "", `{"value":"v","found":true}`},
		{abi.OpConfigGet, `{"key":""}`, abi.CodeInvalidArgument, ""},
		{abi.OpConfigGet, `not json`, abi.CodeInvalidArgument, ""},
		{abi.OpKVPut, `{"key":"a","value":"aGk="}`, "", `{}`},
		{abi.OpKVGet, `{"key":"a"}`, "", `{"value":"aGk=","found":true}`},
		{abi.OpKVGet, `{"key":""}`, abi.CodeInvalidArgument, ""},
		{abi.OpKVPut, `{"key":"` + strings.Repeat("k", abi.MaxKVKeyLen+1) + `","value":""}`, abi.CodeTooLarge, ""},
		{abi.OpKVList, `{"limit":5000}`, abi.CodeInvalidArgument, ""},
		{abi.OpKVList, `{}`, "", `{"keys":["a"],"more":false}`},
		{abi.OpKVDelete, `{"key":"a"}`, "", `{"deleted":true}`},
		{abi.OpLogWrite, `{"level":"trace","message":"x"}`, abi.CodeInvalidArgument, ""},
		{abi.OpLogWrite, `{"message":"` + strings.Repeat("m", 17<<10) + `"}`, abi.CodeTooLarge, ""},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			op, ok := ops.Lookup([]byte(tt.op))
			if !ok {
				t.Fatalf("no op %s", tt.op)
			}
			reply, err := ops.Dispatch(env, allowAll, op, []byte(tt.req))
			var ae *abi.Error
			switch {
			case tt.code == "" && (err != nil || string(reply) != tt.reply):
				t.Fatalf("%s %s = %s, %v; want %s", tt.op, tt.req, reply, err, tt.reply)
			case tt.code != "" && (!errors.As(err, &ae) || ae.Code != tt.code):
				t.Fatalf("%s: got %v, want code %s", tt.op, err, tt.code)
			}
		})
	}
}
