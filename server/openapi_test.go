package server_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/server"
)

var echoParam = regexp.MustCompile(`:([a-z_]+)`)

// TestOpenAPIMatchesRoutes walks the router's routes and the served
// document: every route is documented with its method, and every
// documented operation is routed, for both Piston settings and both
// Judge0 settings (each API at its configured prefix, or absent).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	for _, tt := range []struct {
		name         string
		piston       bool
		prefix       string
		judge0       bool
		judge0Prefix string
	}{{"piston off", false, "", false, ""}, {"piston on", true, "/api/v2", false, ""}, {"piston elsewhere", true, "/piston/api/v2", false, ""},
		{"judge0 on", false, "", true, ""}, {"judge0 elsewhere", true, "", true, "/grader/j0"}} {
		t.Run(tt.name, func(t *testing.T) {
			ts := start(t, "", func(c *server.Config) {
				c.Piston.Enabled = tt.piston
				if tt.prefix != "" {
					c.Piston.Prefix = tt.prefix
				}
				c.Judge0.Enabled = tt.judge0
				if tt.judge0Prefix != "" {
					c.Judge0.Prefix = tt.judge0Prefix
				}
			})
			routed := map[string]bool{}
			for _, r := range ts.Handler().(*echo.Echo).Routes() {
				path := echoParam.ReplaceAllString(r.Path, "{$1}")
				path = strings.Replace(path, "/*", "/{file}", 1)
				routed[r.Method+" "+path] = true
			}
			res := ts.do(t, "GET", "/v1/openapi.json", "", nil)
			if res.status != http.StatusOK {
				t.Fatalf("GET /v1/openapi.json: %d", res.status)
			}
			var doc struct {
				OpenAPI string                                `json:"openapi"`
				Paths   map[string]map[string]json.RawMessage `json:"paths"`
			}
			if err := json.Unmarshal(res.body, &doc); err != nil {
				t.Fatal(err)
			}
			if doc.OpenAPI != "3.1.0" {
				t.Errorf("openapi = %q", doc.OpenAPI)
			}
			documented := map[string]bool{}
			for path, item := range doc.Paths {
				for method, raw := range item {
					if method == "parameters" {
						continue
					}
					var op map[string]any
					if err := json.Unmarshal(raw, &op); err != nil {
						t.Fatalf("%s %s: %v", method, path, err)
					}
					documented[strings.ToUpper(method)+" "+path] = true
					if op["operationId"] == nil || op["responses"] == nil {
						t.Errorf("%s %s: no operationId or responses", method, path)
					}
				}
			}
			for r := range routed {
				if !documented[r] {
					t.Errorf("route %s is not in openapi.json", r)
				}
			}
			for d := range documented {
				if !routed[d] {
					t.Errorf("openapi.json documents %s, which is not routed", d)
				}
			}
			hasPiston := slices.ContainsFunc(mapKeys(routed), func(k string) bool { return strings.HasSuffix(k, "/execute") })
			if hasPiston != tt.piston {
				t.Errorf("piston routes present = %v, want %v", hasPiston, tt.piston)
			}
			hasJudge0 := slices.ContainsFunc(mapKeys(documented), func(k string) bool { return strings.HasSuffix(k, "/submissions/{token}") })
			if hasJudge0 != tt.judge0 {
				t.Errorf("judge0 routes documented = %v, want %v", hasJudge0, tt.judge0)
			}
			if tt.judge0Prefix != "" && !documented["POST "+tt.judge0Prefix+"/submissions"] {
				t.Errorf("judge0 routes not documented at %s", tt.judge0Prefix)
			}
		})
	}
}

func mapKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
