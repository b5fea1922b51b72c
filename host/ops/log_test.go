package ops_test

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/policy"
)

// TestLogWriteRecord: a guest's record carries the invocation's tags
// (module, action, user, org, correlation id) and then its own fields,
// whether it is the invocation's first record (written without building
// the tagged logger) or a later one (after something built it), in text
// and JSON.
func TestLogWriteRecord(t *testing.T) {
	op, _ := ops.Lookup([]byte(abi.OpLogWrite))
	times := regexp.MustCompile(`time=\S+ |"time":"[^"]*",`)
	for _, tc := range []struct {
		name string
		h    func(*bytes.Buffer) slog.Handler
		want string
	}{
		{"text", func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
			`level=WARN msg=greeting module=m action=greet user=bob org=acme correlation_id=c1 source=guest guest.name=World` + "\n"},
		{"json", func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
			`{"level":"WARN","msg":"greeting","module":"m","action":"greet","user":"bob","org":"acme","correlation_id":"c1","source":"guest","guest.name":"World"}` + "\n"},
	} {
		for _, tagged := range []bool{false, true} {
			var buf bytes.Buffer
			env := &ops.Env{Module: "m", Logger: slog.New(tc.h(&buf))}
			env.Begin(context.Background(), "greet", policy.Principal{User: "bob", Org: "acme"}, "c1")
			if tagged {
				env.Log() // as a guest's stdout would
			}
			if _, err := ops.Dispatch(env, allowAll, op, []byte(`{"level":"warn","message":"greeting","fields":{"name":"World"}}`)); err != nil {
				t.Fatal(err)
			}
			if got := times.ReplaceAllString(buf.String(), ""); got != tc.want {
				t.Errorf("%s, tagged logger built first %v:\n got %s\nwant %s", tc.name, tagged, got, tc.want)
			}
		}
	}
}
