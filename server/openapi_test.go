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
// documented operation is routed, for both Piston settings.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	for _, tt := range []struct {
		name   string
		piston bool
		prefix string
	}{{"piston off", false, ""}, {"piston on", true, "/api/v2"}, {"piston elsewhere", true, "/piston/api/v2"}} {
		t.Run(tt.name, func(t *testing.T) {
			ts := start(t, "", func(c *server.Config) {
				c.Piston.Enabled = tt.piston
				if tt.prefix != "" {
					c.Piston.Prefix = tt.prefix
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
