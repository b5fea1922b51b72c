package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/tracing"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver on loopback: what a
// collector's otlp receiver does with POST /v1/traces, protobuf-encoded,
// keeping every span it is sent.
type otlpReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []*tracepb.Span
	bad   []string
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(rcv.serve), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return rcv
}

func (rcv *otlpReceiver) serve(w http.ResponseWriter, r *http.Request) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		rcv.bad = append(rcv.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		http.Error(w, "not OTLP/HTTP protobuf traces", http.StatusBadRequest)
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		rcv.bad = append(rcv.bad, err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			rcv.spans = append(rcv.spans, ss.Spans...)
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Write(out)
}

func (rcv *otlpReceiver) received() ([]*tracepb.Span, []string) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return append([]*tracepb.Span(nil), rcv.spans...), append([]string(nil), rcv.bad...)
}

func attr(s *tracepb.Span, key string) (*commonpb.AnyValue, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

func attrString(s *tracepb.Span, key string) string {
	v, _ := attr(s, key)
	return v.GetStringValue()
}

// TestTraceOfOneRequest sends one invocation of hello-go's greet through
// a real server with traces exported to an in-process OTLP receiver, and
// checks that the request's trace holds the HTTP request, the admission,
// the invocation and every op greet made, each parented under the one
// before it and each carrying the correlation id, and that no span
// carries the guest's input or output.
func TestTraceOfOneRequest(t *testing.T) {
	rcv := startOTLPReceiver(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	shutdown, err := tracing.Setup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	flushed := false
	t.Cleanup(func() {
		if !flushed {
			shutdown(context.Background())
		}
	})
	if !tracing.On() {
		t.Fatal("tracing.Setup with an OTLP endpoint left traces off")
	}

	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann", "admin")
	bob := ts.key(t, "acme", "bob")
	if r := ts.upload(t, ann, helloWasm(t), helloManifest(t)); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/healthz", "", nil, "X-Request-Id", "trace-probe-1"); r.status != http.StatusOK {
		t.Fatalf("healthz: %d", r.status)
	}
	const marker = "Zebulon-guest-input-7f3a"
	r := ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", bob, strings.NewReader(marker), "X-Request-Id", "trace-greet-1")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), marker) {
		t.Fatalf("greet: %d %q", r.status, r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("flushing the spans: %v", err)
	}
	flushed = true
	spans, bad := rcv.received()
	if len(bad) > 0 {
		t.Fatalf("the receiver refused exports: %q", bad)
	}

	var mine []*tracepb.Span
	for _, s := range spans {
		if attrString(s, "moat.correlation_id") == "trace-probe-1" {
			t.Errorf("a probe made span %s: probes make no traces", s.Name)
		}
		if attrString(s, "moat.correlation_id") == "trace-greet-1" {
			mine = append(mine, s)
		}
	}
	byName := map[string][]*tracepb.Span{}
	for _, s := range mine {
		byName[s.Name] = append(byName[s.Name], s)
	}
	one := func(name string) *tracepb.Span {
		t.Helper()
		if len(byName[name]) != 1 {
			var names []string
			for _, s := range mine {
				names = append(names, s.Name)
			}
			t.Fatalf("%d spans named %q in the request's trace; its spans: %q", len(byName[name]), name, names)
		}
		return byName[name][0]
	}
	root := one("POST /v1/modules/:name/actions/:action")
	if len(root.ParentSpanId) != 0 || root.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("the request's span has parent %x, kind %v: want a root server span", root.ParentSpanId, root.Kind)
	}
	if v, _ := attr(root, "http.response.status_code"); v.GetIntValue() != 200 {
		t.Errorf("http.response.status_code = %v, want 200", v)
	}
	adm := one("admission invocations")
	inv := one("moat.invoke")
	for _, c := range []struct {
		child, parent *tracepb.Span
	}{{adm, root}, {inv, root}} {
		if string(c.child.ParentSpanId) != string(c.parent.SpanId) {
			t.Errorf("span %s's parent is %x, want %s (%x)", c.child.Name, c.child.ParentSpanId, c.parent.Name, c.parent.SpanId)
		}
	}
	if attrString(inv, "moat.module") != "hello-go" || attrString(inv, "moat.action") != "greet" || attrString(inv, "moat.code") != "ok" {
		t.Errorf("invoke span attributes: %v", inv.Attributes)
	}
	// greet reads its config, logs, and reads and writes its counter.
	for _, op := range []string{"config.get", "log.write", "kv.get", "kv.put"} {
		s := one("moat.op " + op)
		if string(s.ParentSpanId) != string(inv.SpanId) {
			t.Errorf("op %s's parent is %x, want the invocation %x", op, s.ParentSpanId, inv.SpanId)
		}
		if attrString(s, "moat.op") != op || attrString(s, "moat.op.family") == "" || attrString(s, "moat.code") != "ok" {
			t.Errorf("op %s's span attributes: %v", op, s.Attributes)
		}
	}
	for _, s := range mine {
		if string(s.TraceId) != string(root.TraceId) {
			t.Errorf("span %s is in trace %x, not the request's %x", s.Name, s.TraceId, root.TraceId)
		}
	}
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), marker) {
				t.Errorf("span %s's attribute %s carries the guest's input: %v", s.Name, kv.Key, kv.Value)
			}
		}
		if strings.Contains(s.Name, marker) || strings.Contains(s.Status.GetMessage(), marker) {
			t.Errorf("span %s carries the guest's input in its name or status", s.Name)
		}
	}
}
