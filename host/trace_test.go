package host_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/internal/tracing"
	"github.com/moat-sandbox/moat/policy"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTracePropagation holds the rule of outbound trace context: with
// traces on, traceparent goes only to a target whose grant says
// propagate_trace: true, hop by hop (a redirect from it to another
// granted target carries none), names the request's own client span
// under the op's, and every span carries the correlation id.
func TestTracePropagation(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracing.CorrelationProcessor{}), sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	defer tracing.Use(tp)()

	var mu sync.Mutex
	saw := map[string]string{} // server → the traceparent of its last request
	record := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			saw[name] = r.Header.Get("Traceparent") + "|" + r.Header.Get("Tracestate")
			mu.Unlock()
			if to := r.URL.Query().Get("to"); to != "" {
				http.Redirect(w, r, to, http.StatusFound)
				return
			}
			w.Write([]byte("ok"))
		}
	}
	b := serveOn(t, "127.0.0.2:0", record("b"))
	a := serveOn(t, "127.0.0.1:0", record("a"))
	profile := fmt.Sprintf(`name: p
on_ungranted: deny_at_call
default:
  capabilities:
    http:
      - url: %s/
        propagate_trace: true
      - %s
`, a.url, b.url)
	h, _ := httpHost(t, profile, nil, nil)
	m := fetcher(t, h, fmt.Sprintf(`["%s/", "%s"]`, a.url, b.url))
	who := policy.Principal{User: "ann", Org: "acme"}
	get := func(corr, url string) {
		t.Helper()
		mu.Lock()
		clear(saw)
		mu.Unlock()
		res, err := fetch(t, m, who, corr, abi.HTTPFetchRequest{Method: "GET", URL: url})
		if err != nil || res.Status != 200 {
			t.Fatalf("fetch %s: %v %v", url, res, err)
		}
	}
	seen := func(server string) string {
		mu.Lock()
		defer mu.Unlock()
		return saw[server]
	}

	get("tp-a", a.url+"/x")
	tpA := seen("a")
	if !strings.HasPrefix(tpA, "00-") {
		t.Fatalf("the opted-in target got traceparent %q, want one", tpA)
	}
	get("tp-b", b.url+"/x")
	if got := seen("b"); got != "|" {
		t.Errorf("a target that did not opt in got trace context %q", got)
	}
	get("tp-redirect", a.url+"/r?to="+b.url+"/y")
	if got := seen("a"); !strings.HasPrefix(got, "00-") {
		t.Errorf("the opted-in first hop got %q", got)
	}
	if got := seen("b"); got != "|" {
		t.Errorf("a redirect from the opted-in target to one that did not opt in carried trace context %q", got)
	}

	spans := exp.GetSpans()
	byCorr := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if kv.Key == tracing.KeyCorrelationID {
				byCorr[kv.Value.AsString()] = append(byCorr[kv.Value.AsString()], s)
			}
		}
	}
	mine := byCorr["tp-a"]
	find := func(name string) tracetest.SpanStub {
		t.Helper()
		for _, s := range mine {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no span %s for tp-a among %d", name, len(mine))
		return tracetest.SpanStub{}
	}
	inv, op, out := find("moat.invoke"), find("moat.op http.fetch"), find("moat.outbound")
	if op.Parent.SpanID() != inv.SpanContext.SpanID() || out.Parent.SpanID() != op.SpanContext.SpanID() {
		t.Errorf("parents: op under %v (invoke %v), outbound under %v (op %v)", op.Parent.SpanID(), inv.SpanContext.SpanID(), out.Parent.SpanID(), op.SpanContext.SpanID())
	}
	want := fmt.Sprintf("00-%s-%s-01", out.SpanContext.TraceID(), out.SpanContext.SpanID())
	if !strings.HasPrefix(tpA, want) {
		t.Errorf("traceparent %q does not name the outbound span %s", tpA, want)
	}
	for _, s := range mine {
		for _, kv := range s.Attributes {
			if v := kv.Value.String(); strings.Contains(v, "/x") {
				t.Errorf("span %s attribute %s carries the URL's path: %s", s.Name, kv.Key, v)
			}
		}
	}
	for _, s := range byCorr["tp-redirect"] {
		if s.Name != "moat.outbound" {
			continue
		}
		for _, kv := range s.Attributes {
			if kv.Key == tracing.KeyPropagated && !kv.Value.AsBool() {
				t.Errorf("the redirect's request says it propagated nothing, but its first hop did")
			}
		}
	}
}
