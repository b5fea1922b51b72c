package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestRunBodiesReadOnce: a /v1/runs or Piston body that two JSON parsers
// would read differently is refused before anything runs: a key given
// twice (in any case), a second value after the first, a batch key late
// in the object.
func TestRunBodiesReadOnce(t *testing.T) {
	ts := start(t, "", withExecutor(t))
	key := ts.key(t, "acme", "ann", "admin")
	job := `{"name":"main.sh","content":"echo hi"}`
	cases := []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"duplicate language", "/v1/runs", `{"language":"bash","language":"python","files":[` + job + `]}`, 400, `the key \"language\" is given twice in the body`},
		{"duplicate by case", "/v1/runs", `{"language":"bash","Language":"python","files":[` + job + `]}`, 400, `the key \"Language\" is given twice`},
		{"duplicate file name key", "/v1/runs", `{"language":"bash","files":[{"name":"main.sh","name":"x.sh","content":"echo"}]}`, 400, `given twice in the body's files`},
		{"two values", "/v1/runs", `{"language":"bash","files":[` + job + `]}{"language":"python"}`, 400, "more than one JSON value"},
		{"runs late in a batch", "/v1/runs", `{"x":"` + strings.Repeat("y", 80) + `","runs":[]}`, 400, `unknown field \"x\"`},
		{"piston duplicate", "/api/v2/execute", `{"language":"bash","language":"python","version":"*","files":[` + job + `]}`, 400, `the key \"language\" is given twice`},
		{"piston two values", "/api/v2/execute", `{"language":"bash","version":"*","files":[` + job + `]} {"language":"c"}`, 400, "more than one JSON value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := key
			if strings.HasPrefix(c.path, "/api/") {
				k = ""
			}
			r := ts.do(t, "POST", c.path, k, strings.NewReader(c.body), "Content-Type", "application/json")
			if r.status != c.status || !strings.Contains(string(r.body), c.want) {
				t.Fatalf("status %d body %s; want %d with %q", r.status, r.body, c.status, c.want)
			}
			if c.status == http.StatusBadRequest && strings.Contains(string(r.body), `"stdout"`) {
				t.Fatalf("something ran: %s", r.body)
			}
		})
	}
}
