package deploy_test

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/moat-sandbox/moat/internal/tracing"
)

// traceVars are the OTEL_* variables a manifest may set on moat serve
// (internal/tracing reads them through the OpenTelemetry SDK), each with
// what its value must be. Another OTEL_* name is a typo the SDK would
// ignore in silence. OTEL_EXPORTER_OTLP_HEADERS carries a collector's
// credentials: only from a Secret.
var traceVars = map[string]func(string) error{
	"OTEL_EXPORTER_OTLP_ENDPOINT":        collectorURL,
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collectorURL,
	"OTEL_SERVICE_NAME":                  nonEmpty,
	"OTEL_RESOURCE_ATTRIBUTES":           nonEmpty,
	"OTEL_TRACES_SAMPLER":                sampler,
	"OTEL_TRACES_SAMPLER_ARG":            samplerRatio,
	"OTEL_TRACES_EXPORTER":               nonEmpty, // tracing.Enabled judges it
	"OTEL_EXPORTER_OTLP_PROTOCOL":        nonEmpty,
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": nonEmpty,
	"OTEL_EXPORTER_OTLP_HEADERS":         nil, // a secretKeyRef only
	"OTEL_SDK_DISABLED":                  nonEmpty,
}

func nonEmpty(v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("empty")
	}
	return nil
}

// collectorURL: the OTLP/HTTP exporter takes an http or https URL with a
// host (it sends to /v1/traces below it).
func collectorURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL of the collector (e.g. http://otel-collector.observability.svc:4318)", v)
	}
	return nil
}

func sampler(v string) error {
	ok := []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}
	if !slices.Contains(ok, v) {
		return fmt.Errorf("%q is not a sampler the SDK knows (one of %s)", v, strings.Join(ok, ", "))
	}
	return nil
}

func samplerRatio(v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		return fmt.Errorf("%q is not a ratio between 0 and 1", v)
	}
	return nil
}

// checkTraces holds the moat container's OTEL_* environment to what
// internal/tracing and the SDK accept: known names, well-formed values,
// headers only from a Secret, and tracing.Enabled's own verdict (an
// exporter other than OTLP, a protocol other than http/protobuf).
func checkTraces(b *bundle) []string {
	c := b.moatContainer()
	if c == nil {
		return []string{"no container moat"}
	}
	var probs []string
	vals := map[string]string{}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "OTEL_") {
			continue
		}
		valid, known := traceVars[e.Name]
		switch {
		case !known:
			probs = append(probs, fmt.Sprintf("env %s: not an OTEL_* variable moat's traces read (%s)", e.Name, strings.Join(slices.Sorted(maps.Keys(traceVars)), ", ")))
		case valid == nil:
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				probs = append(probs, fmt.Sprintf("env %s: it carries the collector's credentials; take it from a Secret (valueFrom.secretKeyRef)", e.Name))
			}
		case e.ValueFrom != nil:
			probs = append(probs, fmt.Sprintf("env %s: give it as a value", e.Name))
		default:
			if err := valid(e.Value); err != nil {
				probs = append(probs, fmt.Sprintf("env %s: %v", e.Name, err))
			}
			vals[e.Name] = e.Value
		}
	}
	on, err := tracing.Enabled(func(k string) string { return vals[k] })
	if err != nil {
		probs = append(probs, "traces: "+err.Error())
	}
	if _, ratio := vals["OTEL_TRACES_SAMPLER_ARG"]; ratio && !strings.HasSuffix(vals["OTEL_TRACES_SAMPLER"], "traceidratio") {
		probs = append(probs, "env OTEL_TRACES_SAMPLER_ARG: only a traceidratio sampler reads it")
	}
	if !on && len(vals) > 0 && vals["OTEL_SDK_DISABLED"] == "" && vals["OTEL_TRACES_EXPORTER"] != "none" {
		probs = append(probs, "traces: OTEL_* variables are set but name no collector (OTEL_EXPORTER_OTLP_ENDPOINT): traces stay off")
	}
	return probs
}

// commentedTraces is the commented OTEL_* block of the base's Deployment,
// its lines as they are once uncommented.
var commentedTraces = regexp.MustCompile(`(?m)^( +)# (- name: OTEL_\S+\n) +# ( {2}value: .*\n)`)

// TestTracesExample uncomments the base's commented OTEL_* environment,
// decodes the Deployment strictly and requires it to pass every check:
// the example an operator uncomments turns traces on, and stays valid as
// the code moves.
func TestTracesExample(t *testing.T) {
	data, err := os.ReadFile("kubernetes/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	text := commentedTraces.ReplaceAllStringFunc(string(data), func(m string) string {
		sm := commentedTraces.FindStringSubmatch(m)
		names = append(names, strings.TrimSpace(strings.TrimPrefix(sm[2], "- name:")))
		return sm[1] + sm[2] + sm[1] + sm[3]
	})
	for _, want := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER"} {
		if !slices.Contains(names, want) {
			t.Errorf("deployment.yaml: no commented %s example (found %q)", want, names)
		}
	}
	b := loadBundle(t, ".")
	obj, _, err := decodeDoc([]byte(text))
	if err != nil {
		t.Fatalf("deployment.yaml with its OTEL_* lines uncommented: %v", err)
	}
	for i, m := range b.manifests {
		if m.file == "kubernetes/deployment.yaml" {
			b.manifests[i].obj = obj
		}
	}
	c := b.moatContainer()
	got := map[string]string{}
	for _, e := range c.Env {
		got[e.Name] = e.Value
	}
	for _, n := range names {
		if _, ok := got[n]; !ok {
			t.Errorf("uncommented, %s is not in the moat container's env", n)
		}
	}
	if on, err := tracing.Enabled(func(k string) string { return got[k] }); !on || err != nil {
		t.Errorf("the uncommented example does not turn traces on: %v %v", on, err)
	}
	runChecks(t, b)
}

// TestTracesValues renders the chart with the otel values set and
// requires the OTEL_* variables moat serve reads; with the defaults it
// sets none (TestChartDefaultsMatchBase holds that to the base).
func TestTracesValues(t *testing.T) {
	b := renderedBundle(t, "moat", map[string]any{"otel": map[string]any{
		"endpoint": "http://otel-collector.observability.svc:4318", "serviceName": "moat-eu",
		"tracesSampler": "parentbased_traceidratio", "tracesSamplerArg": "0.25",
	}})
	runChecks(t, b)
	want := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability.svc:4318", "OTEL_SERVICE_NAME": "moat-eu",
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
	}
	got := otelEnv(b.moatContainer())
	for k, v := range want {
		if got[k] != v {
			t.Errorf("env %s = %q, want %q", k, got[k], v)
		}
	}
	if d := otelEnv(renderedBundle(t, "moat", nil).moatContainer()); len(d) != 0 {
		t.Errorf("the chart's defaults set %v: traces must stay off until otel.endpoint is set", d)
	}
}

func otelEnv(c *corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "OTEL_") {
			out[e.Name] = e.Value
		}
	}
	return out
}
