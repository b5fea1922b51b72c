package policy

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/policy/egress"
)

// Headers a grant injects. A profile's http grant may carry headers,
//
//	http: [{url: "https://api.github.com:443/", headers: {Authorization: "Bearer ${secret:github}"}}]
//
// which the host adds to every request the target covers, on every hop of
// a redirect that target covers and no other. ${secret:NAME} stands for
// the operator's secret NAME of the organization the module was called
// for, read when the request is sent; the module never sees the value
// (the host scrubs it from what comes back). Only the operator writes
// them: a manifest asks for URLs only.

// Bounds of what a grant injects.
const (
	maxInjectedHeaders    = 16
	maxInjectedValueBytes = 1024
)

// HeaderInjection is one header a granted target adds to the requests it
// covers.
type HeaderInjection struct {
	Name   string // canonical header name
	Target string // the granted target that injects it, as written
	parts  []templatePart
}

// templatePart is a literal, or (secret set) a secret's name.
type templatePart struct {
	text   string
	secret bool
}

// Secrets lists the names of the secrets the header's value holds.
func (h HeaderInjection) Secrets() []string {
	var out []string
	for _, p := range h.parts {
		if p.secret && !slices.Contains(out, p.text) {
			out = append(out, p.text)
		}
	}
	return out
}

// Expand builds the header's value, reading each secret with secret. It
// returns the value and the secret values it used (for the caller to
// scrub from what comes back). The error of secret is returned wrapped.
func (h HeaderInjection) Expand(secret func(name string) ([]byte, error)) (value string, used [][]byte, err error) {
	var b strings.Builder
	for _, p := range h.parts {
		if !p.secret {
			b.WriteString(p.text)
			continue
		}
		v, err := secret(p.text)
		if err != nil {
			return "", used, fmt.Errorf("header %s of the grant %s: secret %s: %w", h.Name, h.Target, p.text, err)
		}
		used = append(used, v)
		b.Write(v)
	}
	return b.String(), used, nil
}

// describe is the header as a report shows it: its name and the secrets
// it holds, never a value.
func (h HeaderInjection) describe() string {
	s := h.Secrets()
	if len(s) == 0 {
		return h.Name
	}
	return h.Name + " (secret " + strings.Join(s, ", secret ") + ")"
}

// parseTemplate reads a header value: literal text and ${secret:NAME}
// placeholders. Any other "${" is refused, so that a typo is not sent as
// text.
func parseTemplate(v string) ([]templatePart, error) {
	var parts []templatePart
	for v != "" {
		i := strings.Index(v, "${")
		if i < 0 {
			parts = append(parts, templatePart{text: v})
			break
		}
		if i > 0 {
			parts = append(parts, templatePart{text: v[:i]})
		}
		rest := v[i+2:]
		name, ok := strings.CutPrefix(rest, "secret:")
		end := strings.IndexByte(name, '}')
		if !ok || end < 0 {
			return nil, fmt.Errorf("%q: a ${ starts a placeholder, and the only one is ${secret:NAME}", clipText(v[i:]))
		}
		if err := abi.CheckSecretName(name[:end]); err != nil {
			return nil, fmt.Errorf("${secret:%s}: %v", clipText(name[:end]), err)
		}
		parts = append(parts, templatePart{text: name[:end], secret: true})
		v = name[end+1:]
	}
	return parts, nil
}

func clipText(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// checkInjected validates the headers a grant injects (written at path):
// names that are tokens and none of the headers the client sets itself,
// values that a header may carry, placeholders that parse.
func checkInjected(ix *index, path string, headers map[string]string) error {
	if len(headers) > maxInjectedHeaders {
		return ix.Errorf(path, "%d headers; a grant injects at most %d", len(headers), maxInjectedHeaders)
	}
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		p := path + "." + name
		value := headers[name]
		if err := egress.CheckInjectedHeader(name); err != nil {
			return ix.Errorf(p, "%v", err)
		}
		canon := http.CanonicalHeaderKey(name)
		if first, dup := seen[canon]; dup {
			return ix.Errorf(p, "the same header as %s (names differ only in case); keep one", first)
		}
		seen[canon] = name
		if len(value) > maxInjectedValueBytes {
			return ix.Errorf(p, "the value is %d bytes; the limit is %d", len(value), maxInjectedValueBytes)
		}
		if strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return ix.Errorf(p, "the value has a control character (CR, LF or NUL would end the header); write it on one line")
		}
		if _, err := parseTemplate(value); err != nil {
			return ix.Errorf(p, "%v", err)
		}
	}
	return nil
}

// injecting is a granted target with the headers it injects.
type injecting struct {
	t       httpTarget
	order   int // its place among the granted targets, later layers last
	headers []HeaderInjection
}

// parseInjections reads the headers of the granted targets. Targets and
// values were validated when the profile was parsed; one that does not
// parse (a profile built by hand) injects nothing.
func parseInjections(granted HTTPCaps) []injecting {
	var out []injecting
	for i, s := range granted.Targets {
		hs := granted.Headers[s]
		if len(hs) == 0 {
			continue
		}
		t, err := parseTarget(s)
		if err != nil {
			continue
		}
		in := injecting{t: t, order: i}
		for _, name := range slices.Sorted(maps.Keys(hs)) {
			parts, err := parseTemplate(hs[name])
			if err != nil || egress.CheckInjectedHeader(name) != nil {
				continue
			}
			in.headers = append(in.headers, HeaderInjection{Name: http.CanonicalHeaderKey(name), Target: s, parts: parts})
		}
		out = append(out, in)
	}
	return out
}

// specificity orders targets that cover one URL: a longer path prefix,
// then a named host over a wildcard (a longer suffix over a shorter),
// then a named port over "*".
func (t httpTarget) specificity() [3]int {
	host := 0
	switch {
	case t.any || t.host == "*":
	case strings.HasPrefix(t.host, "*."):
		host = 1 + strings.Count(t.host, ".")
	default:
		host = 1000
	}
	port := 0
	if t.port != "*" {
		port = 1
	}
	return [3]int{len(t.path), host, port}
}

// HTTPInjections returns the headers the granted targets covering rawURL
// inject into a request to it, one per header name. Where two granted
// targets set one header, the more specific target's value is the one
// sent (a longer path prefix, then a named host, then a named port), and
// between equally specific ones the later layer's (default, then
// modules, then keys, then their trusted parts). It does not decide
// whether the request is allowed: CheckOp does.
func (e *Evaluation) HTTPInjections(rawURL string) ([]HeaderInjection, error) {
	if len(e.injections) == 0 {
		return nil, nil
	}
	dest, err := urlTarget(rawURL)
	if err != nil {
		return nil, err
	}
	var hits []injecting
	for _, in := range e.injections {
		if in.t.covers(dest) {
			hits = append(hits, in)
		}
	}
	slices.SortStableFunc(hits, func(a, b injecting) int {
		sa, sb := a.t.specificity(), b.t.specificity()
		for i := range sa {
			if c := cmp.Compare(sb[i], sa[i]); c != 0 {
				return c
			}
		}
		return cmp.Compare(b.order, a.order)
	})
	var out []HeaderInjection
	for _, in := range hits {
		for _, h := range in.headers {
			if !slices.ContainsFunc(out, func(x HeaderInjection) bool { return x.Name == h.Name }) {
				out = append(out, h)
			}
		}
	}
	return out, nil
}

// injectionsFor lists, for a report, the headers injected into requests
// of the requested target r: by the granted targets that cover it or lie
// within it.
func (e *Evaluation) injectionsFor(r httpTarget) []string {
	var out []string
	for _, in := range e.injections {
		if !in.t.covers(r) && !r.covers(in.t) {
			continue
		}
		for _, h := range in.headers {
			d := h.describe()
			if in.t.path != nil && !in.t.covers(r) {
				d += " under " + in.t.String()
			}
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// parsePropagating reads the granted targets that opted in to the trace
// context (propagate_trace). A wildcard is refused when the profile is
// parsed; one in a profile built by hand is skipped here, so that the
// trace context never goes to every server.
func parsePropagating(granted HTTPCaps) []httpTarget {
	var out []httpTarget
	for _, s := range granted.PropagateTrace {
		if !slices.Contains(granted.Targets, s) {
			continue
		}
		if t, err := parseTarget(s); err == nil && !t.wild() {
			out = append(out, t)
		}
	}
	return out
}

// PropagatesTrace reports whether a granted target that opted in to the
// trace context (propagate_trace: true) covers rawURL: the outbound
// client sends traceparent and tracestate on that hop, and on no other.
// Like HTTPInjections, it does not decide whether the request is
// allowed.
func (e *Evaluation) PropagatesTrace(rawURL string) bool {
	if e == nil || len(e.propagating) == 0 {
		return false
	}
	dest, err := urlTarget(rawURL)
	if err != nil {
		return false
	}
	for _, t := range e.propagating {
		if t.covers(dest) {
			return true
		}
	}
	return false
}
