package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestScriptErrorCodes: a JavaScript or Python plugin that fails with
// MoatError("invalid_argument", ...) reaches the HTTP client as a compiled
// plugin's does (400 invalid_argument, the whole message), through the
// real host and the real interpreters. Hostile: a code only the host gives
// stays guest_error, and a line shaped like the error marker printed as
// ordinary output before another failure claims nothing.
func TestScriptErrorCodes(t *testing.T) {
	ts := start(t, t.TempDir(), nil)
	key := ts.key(t, "acme", "ann", "admin")

	type call struct {
		body        string // the action's script, replacing the example's
		status      int
		code        string
		detail      string // a substring of the problem's detail
		notInDetail string
	}
	cases := []struct {
		name, dir, file string
		call
	}{
		{"js invalid_argument", "hello-js", "main.js", call{
			`import * as moat from "./moat.js";
throw new moat.MoatError("invalid_argument", "want a title: give {\"title\": \"...\"}");`,
			http.StatusBadRequest, "invalid_argument", `want a title: give {"title": "..."}`, "guest_error"}},
		{"js not_found after output", "hello-js", "main.js", call{
			`import * as moat from "./moat.js";
print("partial output");
throw new moat.MoatError("not_found", "no note n1");`,
			http.StatusNotFound, "not_found", "no note n1", ""}},
		{"js multi-line message kept whole", "hello-js", "main.js", call{
			`import * as moat from "./moat.js";
throw new moat.MoatError("invalid_argument", "first line\nsecond line");`,
			http.StatusBadRequest, "invalid_argument", "first line\nsecond line", ""}},
		{"js plain error keeps its message", "hello-js", "main.js", call{
			`function deep() { throw new TypeError("the title is not a string"); }
function outer() { deep(); }
outer();`,
			http.StatusUnprocessableEntity, "guest_error", "TypeError: the title is not a string", ""}},
		{"js host-only code refused", "hello-js", "main.js", call{
			`import * as moat from "./moat.js";
throw new moat.MoatError("rate_limited", "retry later");`,
			http.StatusUnprocessableEntity, "guest_error", "only the host gives", ""}},
		{"js forged marker line", "hello-js", "main.js", call{
			`print("\n{\"code\":\"not_found\",\"message\":\"forged\"}");
throw new Error("real failure");`,
			http.StatusUnprocessableEntity, "guest_error", "real failure", "forged"}},
		{"js forged marker, exit 1", "hello-js", "main.js", call{
			`print("{\"code\":\"not_found\",\"message\":\"forged\"}");
std.exit(1);`,
			http.StatusUnprocessableEntity, "guest_error", "status 1", "forged"}},
		{"python invalid_argument", "hello-python", "main.py", call{
			`import moat
raise moat.MoatError("invalid_argument", "want a title")`,
			http.StatusBadRequest, "invalid_argument", "want a title", "guest_error"}},
		{"python host-only code refused", "hello-python", "main.py", call{
			`import moat
raise moat.MoatError("confirmation_required", "sure?")`,
			http.StatusUnprocessableEntity, "guest_error", "only the host gives", ""}},
		{"python forged marker line", "hello-python", "main.py", call{
			`print('{"code":"not_found","message":"forged"}')
raise ValueError("real failure")`,
			http.StatusUnprocessableEntity, "guest_error", "real failure", "forged"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, tc.dir, map[string][]byte{tc.file: []byte(tc.body)}), "Content-Type", "application/gzip")
			if r.status == http.StatusServiceUnavailable && strings.Contains(string(r.body), "toolchain not provisioned") {
				testenv.Require(t, string(r.body))
			}
			if r.status != http.StatusCreated {
				t.Fatalf("upload: %d %s", r.status, r.body)
			}
			r = ts.do(t, "POST", "/v1/modules/"+tc.dir+"/actions/greet", key, strings.NewReader("x"))
			p := r.json(t)
			detail, _ := p["detail"].(string)
			if r.status != tc.status || p["code"] != tc.code || !strings.Contains(detail, tc.detail) {
				t.Errorf("status %d code %v detail %q; want %d %s with %q", r.status, p["code"], detail, tc.status, tc.code, tc.detail)
			}
			if tc.notInDetail != "" && strings.Contains(detail, tc.notInDetail) {
				t.Errorf("detail %q holds %q", detail, tc.notInDetail)
			}
		})
	}
}
