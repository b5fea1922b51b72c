// Package tracing is moat's one door to OpenTelemetry traces: Setup reads
// the standard OTEL_* variables and, when they ask for traces, installs an
// OTLP/HTTP exporter; Start opens a span only then. Off (the default: no
// endpoint, OTEL_TRACES_EXPORTER=none, OTEL_SDK_DISABLED=true) every
// call is an atomic load and a return, so the hot paths (an op's
// dispatch, a pooled invocation) pay nothing for the feature they do not
// use; BenchmarkInvoke and BenchmarkOpRoundTrip measure it.
//
// What a span may carry is decided here and at each call site: names of
// things the operator configured (module, action, op, family, route,
// grant target as scheme://host:port, model and provider), outcomes
// (status, abi code) and the request's correlation id, which
// CorrelationProcessor sets on every span from the context. Never a
// guest's input or output, a request body, a header value, a URL's path
// or query, a secret or a key.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names moat's tracer (the instrumentation scope of
// every span it makes).
const InstrumentationName = "github.com/moat-sandbox/moat"

// Attribute keys moat's spans use beyond OpenTelemetry's conventions.
const (
	KeyCorrelationID = attribute.Key("moat.correlation_id")
	KeyModule        = attribute.Key("moat.module")
	KeyAction        = attribute.Key("moat.action")
	KeyOrg           = attribute.Key("moat.org")
	KeyOp            = attribute.Key("moat.op")
	KeyFamily        = attribute.Key("moat.op.family")
	KeyCode          = attribute.Key("moat.code") // an abi code, "ok" on success
	KeyTarget        = attribute.Key("moat.target")
	KeyTaskID        = attribute.Key("moat.task.id")
	KeyAttempt       = attribute.Key("moat.task.attempt")
	KeyModel         = attribute.Key("moat.ai.model")
	KeyProvider      = attribute.Key("moat.ai.provider")
	KeyPropagated    = attribute.Key("moat.trace_propagated")
)

// current holds the tracer while traces are on, nil while off: one
// atomic load is the whole cost of a call site when off.
var current atomic.Pointer[tracerHolder]

type tracerHolder struct{ t trace.Tracer }

// offSpan is what Start returns while off: a span that records nothing
// (not ctx's own, which End would end).
var offSpan = trace.SpanFromContext(context.Background())

var (
	// traceContext is W3C Trace Context: the traceparent and tracestate
	// headers, the only propagation format moat reads or writes.
	traceContext = propagation.TraceContext{}
)

// On reports whether spans are recorded. Call sites that would build
// attributes check it first, so that off costs no allocation.
func On() bool { return current.Load() != nil }

// Start opens a span named name under ctx's span. Off, it returns ctx and
// a span that records nothing, allocating nothing.
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	h := current.Load()
	if h == nil {
		return ctx, offSpan
	}
	return h.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// End ends span with its outcome: code ("ok" or an abi code) as
// moat.code, and err, when not nil, as the span's error status (its
// message is moat's own error text, never a guest's data: callers pass
// the error the caller of the API sees).
func End(span trace.Span, code string, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(KeyCode.String(code))
	if err != nil {
		span.SetStatus(codes.Error, code)
	}
	span.End()
}

type correlationKey struct{}

// WithCorrelation puts the request's correlation id in ctx, for
// CorrelationProcessor to set on every span started under it. Off, it
// returns ctx as it is.
func WithCorrelation(ctx context.Context, id string) context.Context {
	if !On() || id == "" {
		return ctx
	}
	if cur, _ := ctx.Value(correlationKey{}).(string); cur == id {
		return ctx
	}
	return context.WithValue(ctx, correlationKey{}, id)
}

// Correlation is the correlation id WithCorrelation put in ctx, or "".
func Correlation(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}

// Extract returns ctx under the remote span a request's traceparent
// header names (a client that traces its calls sees moat's spans in its
// trace); a header that does not parse is ignored. Off, ctx as it is.
func Extract(ctx context.Context, h http.Header) context.Context {
	if !On() || h.Get("Traceparent") == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject writes ctx's span as traceparent (and tracestate) into h: only
// for a target whose grant opted in (propagate_trace), see
// host/ops/outbound.go. It reports whether it wrote anything.
func Inject(ctx context.Context, h http.Header) bool {
	sc := trace.SpanContextFromContext(ctx)
	if !On() || !sc.IsValid() {
		return false
	}
	traceContext.Inject(ctx, propagation.HeaderCarrier(h))
	return h.Get("Traceparent") != ""
}

// PropagationHeaders are the headers Inject writes: the outbound client
// removes them from a hop whose grant did not opt in, so that a trace id
// reaches no other server.
var PropagationHeaders = []string{"Traceparent", "Tracestate"}

// CorrelationProcessor sets moat.correlation_id on every span from the
// context it starts under, so each call site need not.
type CorrelationProcessor struct{}

var _ sdktrace.SpanProcessor = CorrelationProcessor{}

func (CorrelationProcessor) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	if id := Correlation(parent); id != "" {
		s.SetAttributes(KeyCorrelationID.String(id))
	}
}
func (CorrelationProcessor) OnEnd(sdktrace.ReadOnlySpan)      {}
func (CorrelationProcessor) Shutdown(context.Context) error   { return nil }
func (CorrelationProcessor) ForceFlush(context.Context) error { return nil }

// Enabled says whether the OTEL_* variables of getenv ask for traces: not
// when OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is none; yes
// when it is otlp; unset, yes when an OTLP endpoint is set. Any other
// exporter is an error naming the variable.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: moat exports traces over OTLP only; set it to otlp (or none to turn traces off)", clip(exp))
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		p := strings.TrimSpace(getenv(v))
		if p == "" {
			continue
		}
		if p != "http/protobuf" {
			return false, fmt.Errorf("%s=%q: moat sends OTLP over HTTP with protobuf only; set it to http/protobuf and the endpoint to the collector's OTLP/HTTP port (4318)", v, clip(p))
		}
		break
	}
	return true, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Setup turns traces on when the process's OTEL_* variables ask for them
// (Enabled): an OTLP/HTTP exporter configured by those variables
// (endpoint, headers, timeout, compression, TLS files), batched, with
// OTEL_TRACES_SAMPLER's sampler (default parent-based always-on) and
// OTEL_SERVICE_NAME/OTEL_RESOURCE_ATTRIBUTES as the resource (service
// name "moat" unless set). It returns a shutdown that flushes what is
// buffered and turns traces off again; off, a shutdown that does
// nothing.
func Setup(ctx context.Context) (shutdown func(context.Context) error, err error) {
	ok, err := Enabled(os.Getenv)
	if err != nil || !ok {
		return func(context.Context) error { return nil }, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "moat")), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: the resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(CorrelationProcessor{}),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)))
	install(tp.Tracer(InstrumentationName))
	return func(ctx context.Context) error {
		uninstall()
		return tp.Shutdown(ctx)
	}, nil
}

// Use makes tp the provider of moat's spans, for an embedder of host
// that has its own (and for tests); nil turns traces off. Setup does it
// from the OTEL_* variables for moat serve. It returns a func that puts
// back what was in use before.
func Use(tp trace.TracerProvider) (restore func()) {
	prev := current.Load()
	if tp == nil {
		uninstall()
	} else {
		install(tp.Tracer(InstrumentationName))
	}
	return func() { current.Store(prev) }
}

func install(t trace.Tracer) { current.Store(&tracerHolder{t: t}) }

func uninstall() { current.Store(nil) }
