package tasks_test

import (
	"context"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/tasks"
	"github.com/moat-sandbox/moat/internal/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTaskTraces: with traces on, each attempt of a task is a span of
// its own carrying the enqueuing request's correlation id, the attempt's
// number and outcome, with the attempt's invocation as its child. (Not
// parallel: the tracer provider is the process's.)
func TestTaskTraces(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracing.CorrelationProcessor{}), sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	defer tracing.Use(tp)()

	h := taskHost(t, t.TempDir())
	m := loadTaskGuest(t, h, "tasker", "")
	startRunner(t, h, tasks.Config{}, m)
	id := startTask(t, m, ann, "corr-traced", map[string]any{"action": "flaky", "input": "f:2", "max_attempts": 3})
	if tk := waitTask(t, hosttest.Store(h), store.Scope{Org: "acme", Module: "tasker"}, id); tk.State != abi.TaskDone || tk.Attempts != 2 {
		t.Fatalf("task = %+v; want done on attempt 2", tk)
	}
	attrs := func(s tracetest.SpanStub) map[string]string {
		out := map[string]string{}
		for _, kv := range s.Attributes {
			out[string(kv.Key)] = kv.Value.String()
		}
		return out
	}
	var attempts []tracetest.SpanStub
	invokes := map[string]tracetest.SpanStub{} // by parent span id
	for _, s := range exp.GetSpans() {
		a := attrs(s)
		if a["moat.correlation_id"] != "corr-traced" {
			continue
		}
		switch s.Name {
		case "moat.task.attempt":
			attempts = append(attempts, s)
		case "moat.invoke":
			invokes[s.Parent.SpanID().String()] = s
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans for corr-traced, want 2", len(attempts))
	}
	for _, s := range attempts {
		a := attrs(s)
		want := map[string]string{"1": string(abi.CodeGuestError), "2": "ok"}[a["moat.task.attempt"]]
		if a["moat.task.id"] != id || want == "" || a["moat.code"] != want {
			t.Errorf("attempt span %v; want task %s, attempt 1 failing and 2 ok", a, id)
		}
		if inv, ok := invokes[s.SpanContext.SpanID().String()]; !ok || inv.SpanContext.TraceID() != s.SpanContext.TraceID() {
			t.Errorf("attempt %s has no invocation span under it", a["moat.task.attempt"])
		}
	}
}
