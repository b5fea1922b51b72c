package server_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

func TestParseConfig(t *testing.T) {
	c, err := server.ParseConfig("moat-server.yaml", []byte(`
listen: 0.0.0.0:9000
data_dir: /srv/moat
build_cache_bytes: 512MiB
profile: dev
profiles:
  acme: minimal
limits:
  max_request_bytes: 2MiB
  key_rate: 10
  org_burst: 50
log: {format: json, level: debug}
shutdown_timeout: 5s
piston:
  enabled: true
  principal: {user: judge, org: contest}
  limits: {run_timeout: 2s}
  allow: [10.0.0.0/8, 192.168.1.7]
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "0.0.0.0:9000" || c.DataDir != "/srv/moat" || c.BuildCacheBytes != 512<<20 || c.Profile != "dev" || c.Profiles["acme"] != "minimal" ||
		c.Limits.MaxRequestBytes != 2<<20 || c.Limits.KeyRate != 10 || c.Limits.KeyBurst != 200 || c.Limits.OrgBurst != 50 ||
		c.Log.Format != "json" || c.ShutdownTimeout.Std() != 5*time.Second || !c.Piston.Enabled || c.Piston.Prefix != "/api/v2" ||
		c.Piston.Principal.User != "judge" || c.Piston.Limits.RunTimeout.Std() != 2*time.Second || c.Piston.Limits.CompileTimeout.Std() != 10*time.Second {
		t.Errorf("parsed config = %+v", c)
	}
	if d := server.DefaultConfig(); d.Listen != "127.0.0.1:8080" || d.Profile != "minimal" || d.Piston.Enabled || d.BuildCacheBytes != 2<<30 {
		t.Errorf("DefaultConfig = %+v", d)
	}
}

// TestConfigErrors: each mistake is reported at its line and field, with
// the fix.
func TestConfigErrors(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"lisen: :8080\n", "moat-server.yaml:1: lisen: unknown field; did you mean listen?"},
		{"listen: 8080\n", "moat-server.yaml:1: listen: \"8080\" is not host:port"},
		{"limits:\n  key_rate: fast\n", "moat-server.yaml:2: limits.key_rate: \"fast\" is not a number"},
		{"limits:\n  max_module_bytes: lots\n", "moat-server.yaml:2: limits.max_module_bytes:"},
		{"tls:\n  cert: server.pem\n", "moat-server.yaml:1: tls: give both cert and key"},
		{"profile: strict\n", "moat-server.yaml:1: profile: no built-in profile \"strict\""},
		{"log:\n  format: xml\n", "moat-server.yaml:2: log.format: \"xml\" is not a log format; use text or json"},
		{"piston:\n  enabled: yes please\n", "moat-server.yaml:2: piston.enabled: \"yes please\" is not a boolean"},
		{"piston:\n  allow: [everyone]\n", "moat-server.yaml:2: piston.allow[0]: \"everyone\" is not a network"},
		{"piston:\n  prefix: api\n", "moat-server.yaml:2: piston.prefix: \"api\" must start with /"},
		{"judge0:\n  prefix: /v1/judge0\n", "moat-server.yaml:2: judge0.prefix: \"/v1/judge0\" must start with / and not end with one, outside /v1"},
		{"judge0:\n  concurrency: 1000\n", "moat-server.yaml:2: judge0.concurrency: 1000 is outside 1..256"},
		{"judge0:\n  callbacks: [\"ftp://grader.example.com/\"]\n", "moat-server.yaml:2: judge0.callbacks[0]: \"ftp://grader.example.com/\""},
		{"limits: 5\n", "moat-server.yaml:1: limits: expected a mapping"},
		{"listen: [a\n", "moat-server.yaml:1: YAML syntax"},
	}
	for _, tt := range tests {
		_, err := server.ParseConfig("moat-server.yaml", []byte(tt.yaml))
		var fe *policy.FileError
		if !errors.As(err, &fe) {
			t.Errorf("%q: error %v is not a *policy.FileError", tt.yaml, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant %s...", tt.yaml, err, tt.want)
		}
	}
}

// TestPistonGate: the Piston routes are off by default, answer only the
// allowed networks, and say so in Piston's error shape.
func TestPistonGate(t *testing.T) {
	off := start(t, "", nil)
	if r := off.do(t, "GET", "/api/v2/runtimes", "", nil); r.status != http.StatusNotFound {
		t.Errorf("piston off: %d, want 404", r.status)
	}
	remote := start(t, "", func(c *server.Config) {
		c.Piston.Enabled = true
		c.Piston.Allow = []string{"10.0.0.0/8"}
	})
	r := remote.do(t, "POST", "/api/v2/execute", "", strings.NewReader(`{"language":"python","version":"*","files":[{"content":"print(1)"}]}`), "Content-Type", "text/plain")
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), `"message":`) || !strings.Contains(string(r.body), "piston.allow") {
		t.Errorf("from loopback with allow 10/8: %d %s", r.status, r.body)
	}
	local := start(t, "", func(c *server.Config) { c.Piston.Enabled = true })
	if r := local.do(t, "GET", "/api/v2/runtimes", "", nil); r.status != http.StatusOK || string(r.body) != "[]\n" {
		t.Errorf("runtimes without an executor: %d %q", r.status, r.body)
	}
	if r := local.do(t, "POST", "/api/v2/execute", "", strings.NewReader(`{}`)); r.status != http.StatusNotImplemented {
		t.Errorf("execute without an executor: %d %s", r.status, r.body)
	}
	key := local.key(t, "acme", "ann", "admin")
	if r := local.do(t, "POST", "/v1/runs", key, strings.NewReader(`{}`)); r.status != http.StatusNotImplemented || r.json(t)["code"] != "not_implemented" {
		t.Errorf("/v1/runs without an executor: %d %s", r.status, r.body)
	}
}

func ExampleParseConfig() {
	_, err := server.ParseConfig("moat-server.yaml", []byte("listen: 127.0.0.1:8080\nlimits:\n  key_rat: 10\n"))
	fmt.Println(err)
	// Output:
	// moat-server.yaml:3: limits.key_rat: unknown field; did you mean key_rate? Known fields are max_request_bytes, max_module_bytes, key_rate, key_burst, org_rate, org_burst, invocation_timeout, max_run_response_bytes, max_table_elements, budget, archive, module_quota
}
