package ops_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/policy"
)

// TestLogWriteBudget: one record is bounded before it is decoded (a 3 MB
// record of fields once went to the log whole), and the records of one
// invocation are bounded in number and bytes.
func TestLogWriteBudget(t *testing.T) {
	fields := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"message":"m","fields":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"f` + strings.Repeat("x", 8) + string(rune('a'+i%26)) + `":"` + strings.Repeat("v", 20) + `"`)
		}
		b.WriteString("}}")
		return b.String()
	}
	tests := []struct {
		name    string
		limits  budget.Limits
		req     string
		times   int // the call is repeated; the last one is checked
		code    abi.Code
		inMsg   string
		records int // records in the log afterwards
	}{
		{name: "3 MB of fields", req: fields(90000), times: 1, code: abi.CodeTooLarge, inMsg: "the limit is 32768", records: 0},
		{name: "a record within the limits", req: fields(10), times: 1, records: 1},
		{name: "more records than LogRecords", limits: budget.Limits{LogRecords: 5}, req: `{"message":"m"}`, times: 6,
			code: abi.CodeResourceExhausted, inMsg: budget.KnobLogRecords, records: 5},
		{name: "more bytes than LogBytes", limits: budget.Limits{LogBytes: 40 << 10}, req: `{"message":"` + strings.Repeat("m", 15<<10) + `"}`, times: 3,
			code: abi.CodeResourceExhausted, inMsg: budget.KnobLogBytes, records: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var records int
			h := &countHandler{n: &records}
			b := budget.New(tt.limits, nil)
			env := &ops.Env{Module: "m", Logger: slog.New(h)}
			env.Begin(budget.With(context.Background(), b), "a", policy.Principal{User: "u", Org: "o"}, "c")
			op, _ := ops.Lookup([]byte(abi.OpLogWrite))
			var err error
			for range tt.times {
				_, err = ops.Dispatch(env, allowAll, op, []byte(tt.req))
			}
			var ae *abi.Error
			switch {
			case tt.code == "" && err != nil:
				t.Fatalf("log.write: %v", err)
			case tt.code != "" && (!errors.As(err, &ae) || ae.Code != tt.code || !strings.Contains(ae.Message, tt.inMsg)):
				t.Fatalf("log.write: %v; want %s naming %q", err, tt.code, tt.inMsg)
			}
			if records != tt.records {
				t.Fatalf("%d records logged, want %d", records, tt.records)
			}
		})
	}
}

type countHandler struct{ n *int }

func (h *countHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (h *countHandler) Handle(context.Context, slog.Record) error { *h.n++; return nil }
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h *countHandler) WithGroup(string) slog.Handler             { return h }
