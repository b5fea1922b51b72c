package tracing

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		name    string
		env     map[string]string
		on      bool
		errHint string
	}{
		{name: "nothing set", env: nil, on: false},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "otlp without endpoint: the default localhost:4318", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "none wins over an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, on: false},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, on: false},
		{name: "another exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, errHint: "OTEL_TRACES_EXPORTER"},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, errHint: "http/protobuf"},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true},
		{name: "a long hostile value is clipped", env: map[string]string{"OTEL_TRACES_EXPORTER": strings.Repeat("x", 5000)}, errHint: "…"},
	} {
		t.Run(c.name, func(t *testing.T) {
			on, err := Enabled(func(k string) string { return c.env[k] })
			if c.errHint != "" {
				if err == nil || !strings.Contains(err.Error(), c.errHint) || len(err.Error()) > 300 {
					t.Fatalf("Enabled = %v, %v; want an error naming %q", on, err, c.errHint)
				}
				return
			}
			if err != nil || on != c.on {
				t.Fatalf("Enabled = %v, %v; want %v", on, err, c.on)
			}
		})
	}
}

// TestOffCostsNothing holds the promise the hot paths rely on: with
// traces off, Start, End, WithCorrelation and Inject allocate nothing
// and hand back a span that records nothing.
func TestOffCostsNothing(t *testing.T) {
	if On() {
		t.Fatal("traces on before Setup")
	}
	ctx := context.Background()
	h := http.Header{}
	allocs := testing.AllocsPerRun(100, func() {
		c := WithCorrelation(ctx, "id-1")
		c, span := Start(c, "moat.op kv.get", trace.SpanKindInternal)
		End(span, "ok", nil)
		Inject(c, h)
	})
	if allocs != 0 {
		t.Errorf("off, a span costs %v allocations; want 0", allocs)
	}
	if _, span := Start(ctx, "x", trace.SpanKindInternal); span.IsRecording() {
		t.Error("off, Start returned a recording span")
	}
	if len(h) != 0 {
		t.Errorf("off, Inject wrote %v", h)
	}
}
