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

func TestTableHasFoundationOps(t *testing.T) {
	got := strings.Join(ops.Names(), " ")
	if got != "config.get kv.delete kv.get kv.list kv.put log.write" {
		t.Fatalf("ops: %s", got)
	}
	if op, _ := ops.Lookup([]byte(abi.OpKVPut)); !op.Mutates {
		t.Fatal("kv.put must be marked as mutating (audit depends on it)")
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
			reply, err := op.Func(env, []byte(tt.req))
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
