package ai_test

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/internal/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestModelCallSpans: with traces on, each model call is a client span
// under the caller's, naming the alias, provider and model call id and
// the tokens, and carrying no prompt, reply, vector or key.
func TestModelCallSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracing.CorrelationProcessor{}), sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	defer tracing.Use(tp)()

	r := newRig(t, nil)
	const prompt = "secret-prompt-Qx81 what is moat"
	ctx, parent := tracing.Start(tracing.WithCorrelation(context.Background(), "corr-ai"), "moat.op ai.complete", 0)
	resp, ev, err := r.svc.Complete(ctx, r.caller(), &abi.AICompleteRequest{Model: "small-chat", Messages: user(prompt)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.svc.Embed(ctx, r.caller(), &abi.AIEmbedRequest{Model: "embed-small", Input: []string{prompt}}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	got := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		got[s.Name] = s
	}
	for _, name := range []string{"moat.ai ai.complete", "moat.ai ai.embed"} {
		s, ok := got[name]
		if !ok {
			t.Fatalf("no span %s among %v", name, got)
		}
		if s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s is not under the op's span", name)
		}
		a := map[string]string{}
		for _, kv := range s.Attributes {
			a[string(kv.Key)] = kv.Value.String()
			for _, bad := range []string{"secret-prompt", resp.Text, testKey, "provider-chat-v1"} {
				if bad != "" && strings.Contains(kv.Value.String(), bad) {
					t.Errorf("%s attribute %s = %q carries %q", name, kv.Key, kv.Value.String(), bad)
				}
			}
		}
		if a["moat.ai.provider"] != "remote" || a["moat.code"] != "ok" || a["moat.correlation_id"] != "corr-ai" || a["gen_ai.usage.input_tokens"] == "0" {
			t.Errorf("%s attributes %v", name, a)
		}
	}
	if a := got["moat.ai ai.complete"].Attributes; len(a) == 0 || ev == nil {
		t.Fatal("no attributes")
	}
	for _, kv := range got["moat.ai ai.complete"].Attributes {
		if string(kv.Key) == "moat.ai.model_call_id" && kv.Value.String() != ev.ModelCallID {
			t.Errorf("model call id %s, want the evidence's %s", kv.Value.String(), ev.ModelCallID)
		}
	}
}
