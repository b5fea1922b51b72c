package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

// TestPathPrefixHostile: a grant of https://api.example.com:443/v1/
// covers /v1 and what lies under it on whole segments, and nothing a
// server could resolve elsewhere: dot segments in every spelling, encoded
// slashes and backslashes, empty segments, matrix parameters, NULs and
// overlong or full-width dots are refused, never cleaned.
func TestPathPrefixHostile(t *testing.T) {
	p, err := policy.ParseProfile("p.yaml", []byte("name: p\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: [https://api.example.com:443/v1/]\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := p.Evaluate(manifest(t, "m", "capabilities:\n  http: [https://api.example.com:443/v1/]\n"), "")
	if len(e.Refusals) != 0 {
		t.Fatal(e.Refusals)
	}
	const api = "https://api.example.com"
	for _, tt := range []struct {
		path string
		want string // "" allowed; else a piece of the reason
	}{
		{"/v1", ""},
		{"/v1/", ""},
		{"/v1/users", ""},
		{"/v1/users/42/", ""},
		{"/v1/users?next=../../admin", ""}, // the query is not the path
		{"/v1/a%20b", ""},
		{"/%76%31/users", ""}, // unreserved characters encoded: the same segment
		{"/v1/..x/y", ""},     // not a dot segment
		{"/v1/x..", ""},
		{"/v10", "is not under the granted prefix"},
		{"/v", "is not under the granted prefix"},
		{"/V1/users", "is not under the granted prefix"},
		{"/", "is not under the granted prefix"},
		{"", "is not under the granted prefix"},
		{"/admin", "is not under the granted prefix"},
		{"/v1/../admin", "dot segment"},
		{"/v1/..", "dot segment"},
		{"/v1/./x", "dot segment"},
		{"/v1/%2e%2e/admin", "dot segment"},
		{"/v1/%2E%2e/admin", "dot segment"},
		{"/v1/.%2e/admin", "dot segment"},
		{"/v1/%2e/admin", "dot segment"},
		{"/v1/..;/admin", "dot segment"},
		{"/v1/..;jsessionid=1/admin", "dot segment"},
		{"/v1/.../admin", "dot segment"},
		{"/v1/..%20/admin", "dot segment"},
		{"/v1/%ef%bc%8e%ef%bc%8e/admin", "dot segment"}, // full-width dots
		{"/v1/..%2fadmin", "encoded / or \\"},
		{"/v1%2f..%2fadmin", "encoded / or \\"},
		{"/v1/x%2F..%2F..%2Fadmin", "encoded / or \\"},
		{"/v1/..%5cadmin", "encoded / or \\"},
		{"/v1//admin", "empty segment"},
		{"//v1/users", "empty segment"},
		{"/v1/%00/x", "control character"},
		{"/v1/..%00", "control character"},
		{"/v1/%c0%ae%c0%ae/admin", "not UTF-8"},
		{"/v1/%zz", "not a URL"},
		// Encoded twice (or more): a server that decodes twice climbs.
		{"/v1/%252e%252e/admin", "encoded % (%25)"},
		{"/v1/%252E%252E/admin", "encoded % (%25)"},
		{"/v1/%25%32%65%25%32%65/admin", "encoded % (%25)"},
		{"/v1/%25252e%25252e/admin", "encoded % (%25)"},
		{"/v1/..%252fadmin", "encoded % (%25)"},
		{"/v1/x%252f..%252f..%252fadmin", "encoded % (%25)"},
		{"/v1/..%255cadmin", "encoded % (%25)"},
		{"/v1/%2500/x", "encoded % (%25)"},
		{"/v1/100%25", "encoded % (%25)"},
	} {
		err := e.CheckOp("http.fetch", api+tt.path)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%q: %v, want allowed", tt.path, err)
			}
			continue
		}
		var d *policy.DeniedError
		if !errors.As(err, &d) || !strings.Contains(d.Reason, tt.want) {
			t.Errorf("%q: %v; want denied with %q", tt.path, err, tt.want)
			continue
		}
		if !strings.Contains(tt.want, "URL") && d.Rule != "grant path prefix" {
			t.Errorf("%q: rule %q, want grant path prefix", tt.path, d.Rule)
		}
	}
	// Another server is not covered at all, whatever its path.
	if err := e.CheckOp("http.fetch", "https://evil.example.com/v1/x"); err == nil {
		t.Error("another host with the granted path was allowed")
	}
	// The guard's targets carry no path: an address grant with a prefix
	// still names the address.
	pa, _ := policy.ParseProfile("p.yaml", []byte("name: p\ndefault:\n  capabilities:\n    http: [http://127.0.0.1:8080/api/]\n"))
	ea := pa.Evaluate(manifest(t, "m", "capabilities:\n  http: [http://127.0.0.1:8080/api/v2/]\n"), "")
	if got := ea.AddressTargets(); len(got) != 1 || got[0] != "http://127.0.0.1:8080" {
		t.Errorf("AddressTargets = %q, want [http://127.0.0.1:8080]", got)
	}
}

// TestEvaluatePathPrefix: the manifest's request must lie within the
// grant: a narrower path is granted as asked, the whole server or another
// path is refused, saying which paths the profile grants.
func TestEvaluatePathPrefix(t *testing.T) {
	p, err := policy.ParseProfile("p.yaml", []byte("name: p\ndefault:\n  capabilities:\n    http: [https://api.example.com:443/v1/, https://open.example.com:443]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		target string
		reason string // "" granted
	}{
		{"https://api.example.com:443/v1/", ""},
		{"https://api.example.com:443/v1", ""},
		{"https://api.example.com:443/v1/users/", ""},
		{"https://api.example.com:443", "the profile grants only the paths under https://api.example.com:443/v1/; ask for one of them"},
		{"https://api.example.com:443/", "the profile grants only the paths under"},
		{"https://api.example.com:443/v2/", "the profile grants only the paths under"},
		{"https://api.example.com:443/v10", "the profile grants only the paths under"},
		{"https://open.example.com:443/any/path/", ""},
		{"https://other.example.com:443/v1/", "no granted target covers it"},
	} {
		e := p.Evaluate(manifest(t, "m", "capabilities:\n  http: [\""+tt.target+"\"]\n"), "")
		if tt.reason == "" {
			if len(e.Refusals) != 0 || len(e.Effective.HTTP.Targets) != 1 {
				t.Errorf("%s: refused %v", tt.target, e.Refusals)
			}
			continue
		}
		if len(e.Refusals) != 1 || !strings.Contains(e.Refusals[0].Reason, tt.reason) {
			t.Errorf("%s: refusals %v; want one saying %q", tt.target, e.Refusals, tt.reason)
		}
	}
	// A module granted the whole server but asking only for /v1/ gets /v1/.
	e := p.Evaluate(manifest(t, "m", "capabilities:\n  http: [https://open.example.com:443/v1/]\n"), "")
	if err := e.CheckOp("http.fetch", "https://open.example.com/v1/x"); err != nil {
		t.Error(err)
	}
	var d *policy.DeniedError
	if err := e.CheckOp("http.fetch", "https://open.example.com/v2/x"); !errors.As(err, &d) || !strings.Contains(d.Reason, "the path /v2/x is not under the granted prefix https://open.example.com:443/v1/") {
		t.Errorf("/v2 under a /v1 request: %v", err)
	}
}

const injectProfile = `name: inject
default:
  capabilities:
    http:
      - url: https://api.github.com:443/
        headers: {Authorization: "Bearer ${secret:github}", X-Client: moat}
      - https://uploads.github.com:443
      - url: "https://*.svc.example.com:443"
        headers: {X-Api-Key: "${secret:svc}"}
modules:
  m:
    capabilities:
      http:
        - url: https://api.github.com:443/repos/
          headers: {authorization: "token ${secret:repo-token}-${secret:github}"}
`

// TestHTTPInjections: the headers the granted targets covering a URL
// inject: the most specific target's value of each header, names in
// canonical form; none for a URL no injecting grant covers.
func TestHTTPInjections(t *testing.T) {
	p, err := policy.ParseProfile("inject.yaml", []byte(injectProfile))
	if err != nil {
		t.Fatal(err)
	}
	e := p.Evaluate(manifest(t, "m", "capabilities:\n  http: [https://api.github.com:443/, https://uploads.github.com:443, \"https://a.svc.example.com:443\"]\n"), "")
	if len(e.Refusals) != 0 {
		t.Fatal(e.Refusals)
	}
	secrets := map[string]string{"github": "GH", "repo-token": "RT", "svc": "SV"}
	lookup := func(name string) ([]byte, error) { return []byte(secrets[name]), nil }
	for _, tt := range []struct {
		url  string
		want string // name=value;...
	}{
		{"https://api.github.com/user", "Authorization=Bearer GH;X-Client=moat"},
		{"https://api.github.com/repos/moat/x", "Authorization=token RT-GH;X-Client=moat"},
		{"https://api.github.com/reposx", "Authorization=Bearer GH;X-Client=moat"},
		{"https://uploads.github.com/x", ""},
		{"https://a.svc.example.com/x", "X-Api-Key=SV"},
		{"https://evil.com/", ""},
		{"http://api.github.com/", ""}, // another scheme is another target
	} {
		hs, err := e.HTTPInjections(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hs {
			v, used, err := h.Expand(lookup)
			if err != nil || len(used) != len(h.Secrets()) {
				t.Fatalf("%s: Expand: %v", h.Name, err)
			}
			got = append(got, h.Name+"="+v)
		}
		if strings.Join(got, ";") != tt.want {
			t.Errorf("%s: %q, want %q", tt.url, strings.Join(got, ";"), tt.want)
		}
	}
	// Without the module's layer, the default's value.
	e2 := p.Evaluate(manifest(t, "n", "capabilities:\n  http: [https://api.github.com:443/]\n"), "")
	hs, _ := e2.HTTPInjections("https://api.github.com/repos/x")
	if len(hs) != 2 || hs[0].Target != "https://api.github.com:443/" {
		t.Errorf("module n: %+v", hs)
	}
	// A failing secret names the header, the grant and the secret.
	_, _, err = hs[0].Expand(func(string) ([]byte, error) { return nil, errors.New("not stored") })
	if err == nil || !strings.Contains(err.Error(), "header Authorization of the grant https://api.github.com:443/: secret github: not stored") {
		t.Errorf("Expand error: %v", err)
	}
	// The report names headers and secrets, never a value.
	mf := manifest(t, "m", "capabilities:\n  http: [https://api.github.com:443/]\n")
	rep := p.Evaluate(mf, "").Report(mf, p)
	if !strings.Contains(rep, "https://api.github.com:443/  ✓ granted; the host injects Authorization (secret github), X-Client, Authorization (secret repo-token, secret github) under https://api.github.com:443/repos/") ||
		strings.Contains(rep, "Bearer") || strings.Contains(rep, "X-Client moat") || strings.Contains(rep, "X-Client: moat") || strings.Contains(rep, "token ") {
		t.Errorf("report:\n%s", rep)
	}
}

// TestInjectedHeaderErrors: what a grant may not inject, and how it is
// told.
func TestInjectedHeaderErrors(t *testing.T) {
	const head = "name: p\ndefault:\n  capabilities:\n    http:\n      - url: https://a.example:443/\n        headers: "
	for _, tt := range []struct {
		name, headers, field, msg string
	}{
		{"Host", `{Host: evil.example}`, "headers.Host", "the client's to set"},
		{"framing", `{Transfer-Encoding: chunked}`, "headers.Transfer-Encoding", "the client's to set"},
		{"not a token", `{"X A": v}`, "headers.X A", "not a token"},
		{"CRLF in a value", `{X-A: "v\r\nX-Evil: 1"}`, "headers.X-A", "control character"},
		{"unknown placeholder", `{X-A: "${env:HOME}"}`, "headers.X-A", "the only one is ${secret:NAME}"},
		{"unclosed placeholder", `{X-A: "${secret:github"}`, "headers.X-A", "the only one is ${secret:NAME}"},
		{"bad secret name", `{X-A: "${secret:../x}"}`, "headers.X-A", "secret name"},
		{"same header twice", `{X-A: a, x-a: b}`, "headers.x-a", "names differ only in case"},
		{"a number", `{X-A: 5}`, "headers.X-A", "quote it"},
		{"too many", "{" + manyHeaderYAML(17) + "}", "headers", "at most 16"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.ParseProfile("p.yaml", []byte(head+tt.headers+"\n"))
			checkFileError(t, err, "p.yaml", 6, "default.capabilities.http[0]."+tt.field, tt.msg)
		})
	}
	_, err := policy.ParseProfile("p.yaml", []byte("name: p\ndefault:\n  capabilities:\n    http:\n      targets:\n        - url: \"*\"\n          headers: {X-A: b}\n      allow_any: true\n"))
	checkFileError(t, err, "p.yaml", 7, "default.capabilities.http.targets[0].headers", "its headers would go to every server")
}

func manyHeaderYAML(n int) string {
	var b []string
	for i := range n {
		b = append(b, "X-H"+strings.Repeat("i", i)+": v")
	}
	return strings.Join(b, ", ")
}
