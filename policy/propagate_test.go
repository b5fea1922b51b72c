package policy_test

import (
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
	"gopkg.in/yaml.v3"
)

// TestPropagatesTrace: the trace context goes to the targets whose grant
// says propagate_trace: true and to no other, a target of any server may
// not say it (a host wildcard like *.example.com names the operator's
// own domain, and may, as it may inject headers),
// and the field survives a round trip through YAML.
func TestPropagatesTrace(t *testing.T) {
	const profile = `name: p
default:
  capabilities:
    http:
      - url: https://api.example.com:443/v1/
        propagate_trace: true
      - https://other.example.com:443
`
	p, err := policy.ParseProfile("p.yaml", []byte(profile))
	if err != nil {
		t.Fatal(err)
	}
	e := p.Evaluate(manifest(t, "m", "capabilities:\n  http: [https://api.example.com:443/v1/, https://other.example.com:443]\n"), "")
	if len(e.Refusals) != 0 {
		t.Fatal(e.Refusals)
	}
	for _, c := range []struct {
		url  string
		want bool
	}{
		{"https://api.example.com/v1/x", true},
		{"https://api.example.com/v1", true},
		{"https://api.example.com/v2/x", false}, // outside the opted-in prefix
		{"https://other.example.com/v1/x", false},
		{"http://api.example.com/v1/x", false}, // another scheme is another target
		{"https://api.example.com.evil.test/v1/", false},
		{"not a url", false},
	} {
		if got := e.PropagatesTrace(c.url); got != c.want {
			t.Errorf("PropagatesTrace(%q) = %v, want %v", c.url, got, c.want)
		}
	}
	var nilEval *policy.Evaluation
	if nilEval.PropagatesTrace("https://api.example.com/v1/") {
		t.Error("a nil Evaluation propagates")
	}

	out, err := yaml.Marshal(p.Default.Capabilities.HTTP)
	if err != nil || !strings.Contains(string(out), "propagate_trace: true") || strings.Count(string(out), "propagate_trace") != 1 {
		t.Errorf("marshalled: %s %v", out, err)
	}

	for _, bad := range []string{
		"name: p\ndefault:\n  capabilities:\n    http:\n      targets:\n        - {url: \"https://*:443\", propagate_trace: true}\n      allow_any: true\n",
		"name: p\ndefault:\n  capabilities:\n    http:\n      targets:\n        - {url: \"*\", propagate_trace: true}\n      allow_any: true\n",
	} {
		_, err := policy.ParseProfile("bad.yaml", []byte(bad))
		if err == nil || !strings.Contains(err.Error(), "propagate_trace") || !strings.Contains(err.Error(), "every server") {
			t.Errorf("a wildcard opting in: %v", err)
		}
	}
}
