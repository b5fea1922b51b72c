package server_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/moat-sandbox/moat/host/extism"

	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// TestConfigBudget: limits.budget.*, limits.max_run_response_bytes and
// limits.max_table_elements parse, default to the host's defaults, and
// each bad value is an error naming the field, its line and the fix.
func TestConfigBudget(t *testing.T) {
	d := server.DefaultConfig().Limits
	if d.Budget.Limits() != budget.DefaultLimits || d.MaxRunResponseBytes != server.MaxRunResponseBytes || d.MaxTableElements != wasmrewrite.DefaultMaxTableElements {
		t.Errorf("defaults: budget %+v, max_run_response_bytes %s, max_table_elements %d", d.Budget, d.MaxRunResponseBytes, d.MaxTableElements)
	}
	c, err := server.ParseConfig("moat-server.yaml", []byte(`
limits:
  max_run_response_bytes: 2MiB
  max_table_elements: 65536
  budget:
    held_bytes: 4MiB
    open_devices: 4
    log_bytes: 64KiB
    log_records: 50
    audit_rows: 200
    http_request_bytes: 1MiB
    http_response_bytes: 2MiB
`))
	if err != nil {
		t.Fatal(err)
	}
	want := budget.Limits{HeldBytes: 4 << 20, OpenDevices: 4, LogBytes: 64 << 10, LogRecords: 50, AuditRows: 200, HTTPRequestBytes: 1 << 20, HTTPResponseBytes: 2 << 20}
	if got := c.Limits.Budget.Limits(); got != want || c.Limits.MaxRunResponseBytes != 2<<20 || c.Limits.MaxTableElements != 65536 {
		t.Errorf("parsed %+v, max_run_response_bytes %s, max_table_elements %d", got, c.Limits.MaxRunResponseBytes, c.Limits.MaxTableElements)
	}
	// A field left out keeps its default.
	c, err = server.ParseConfig("moat-server.yaml", []byte("limits:\n  budget:\n    log_records: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = budget.DefaultLimits
	want.LogRecords = 5
	if got := c.Limits.Budget.Limits(); got != want {
		t.Errorf("one field set: %+v, want %+v", got, want)
	}

	tests := []struct{ yaml, want string }{
		{"limits:\n  budget:\n    held_byte: 1MiB\n", "moat-server.yaml:3: limits.budget.held_byte: unknown field; did you mean held_bytes?"},
		{"limits:\n  budget:\n    held_bytes: 1KiB\n", "moat-server.yaml:3: limits.budget.held_bytes: 1 KiB is outside 64 KiB to 1 GiB"},
		{"limits:\n  budget:\n    held_bytes: 2GiB\n", "moat-server.yaml:3: limits.budget.held_bytes: 2 GiB is outside 64 KiB to 1 GiB"},
		{"limits:\n  budget:\n    held_bytes: lots\n", "moat-server.yaml:3: limits.budget.held_bytes: \"lots\" is not a size"},
		{"limits:\n  budget:\n    open_devices: -1\n", "moat-server.yaml:3: limits.budget.open_devices: -1 is outside 1 to 1024; leave it out for the default"},
		{"limits:\n  budget:\n    open_devices: 5000\n", "moat-server.yaml:3: limits.budget.open_devices: 5000 is outside 1 to 1024"},
		{"limits:\n  budget:\n    log_bytes: 1KiB\n", "moat-server.yaml:3: limits.budget.log_bytes: 1 KiB is outside 32 KiB to 1 GiB (the least holds one log record of the largest size)"},
		{"limits:\n  budget:\n    log_records: 2000000\n", "moat-server.yaml:3: limits.budget.log_records: 2000000 is outside 1 to 1000000"},
		{"limits:\n  budget:\n    audit_rows: -3\n", "moat-server.yaml:3: limits.budget.audit_rows: -3 is outside 1 to 1000000"},
		{"limits:\n  budget:\n    audit_rows: many\n", "moat-server.yaml:3: limits.budget.audit_rows: \"many\" is not a whole number"},
		{"limits:\n  budget:\n    http_request_bytes: 100B\n", "moat-server.yaml:3: limits.budget.http_request_bytes: 100 B is outside 1 KiB to 1 GiB"},
		{"limits:\n  budget:\n    http_response_bytes: 32MiB\n",
			"moat-server.yaml:3: limits.budget.http_response_bytes: 32 MiB is more than held_bytes (16 MiB), which holds every HTTP body in transit, so no body could reach it; raise limits.budget.held_bytes or lower this"},
		{"limits:\n  budget:\n    held_bytes: 1MiB\n    http_request_bytes: 2MiB\n    http_response_bytes: 1MiB\n",
			"moat-server.yaml:4: limits.budget.http_request_bytes: 2 MiB is more than held_bytes (1 MiB)"},
		{"limits:\n  budget: 5\n", "moat-server.yaml:2: limits.budget: expected a mapping of field: value lines"},
		{"limits:\n  max_run_response_bytes: 1KiB\n", "moat-server.yaml:2: limits.max_run_response_bytes: 1 KiB is outside 64KiB to 256MiB: the server holds a whole /v1/runs response in memory; the default is 8 MiB"},
		{"limits:\n  max_run_response_bytes: 1GiB\n", "moat-server.yaml:2: limits.max_run_response_bytes: 1 GiB is outside 64KiB to 256MiB"},
		{"limits:\n  max_table_elements: 200000000\n", "moat-server.yaml:2: limits.max_table_elements: 200000000 is outside 1 to 134217728 (8 bytes of host memory each); leave it out for the default 1048576"},
		{"limits:\n  max_table_elements: -1\n", "moat-server.yaml:2: limits.max_table_elements: -1 is outside 1 to 134217728"},
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

// TestServeBudget: the server's limits.budget and limits.max_table_elements
// reach its hosts, and a guest that exhausts its invocation's budget is a
// 502 problem with code resource_exhausted, counted as a guest failure,
// like memory_limit.
func TestServeBudget(t *testing.T) {
	// A real loopback server answering any request with 1 MiB, no length.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for range 32 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	dir := t.TempDir()
	prof := filepath.Join(dir, "egress.yaml")
	if err := os.WriteFile(prof, []byte(fmt.Sprintf("name: egress\ndefault:\n  capabilities:\n    http: [http://127.0.0.1:%s]\n", u.Port())), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := start(t, "", func(c *server.Config) {
		withMetricsToken(c)
		c.Profile = prof
		c.Limits.MaxTableElements = 100
		c.Limits.Budget = server.BudgetLimits{HeldBytes: 64 << 10, HTTPRequestBytes: 48 << 10, HTTPResponseBytes: 48 << 10}
	})
	key := ts.key(t, "acme", "ann", "admin")
	wasm, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "testdata/hostile_extismbudget.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	mf := fmt.Sprintf("name: budget\nversion: 1.0.0\nkind: extism\nactions: [{name: fetch}]\ncapabilities: {http: [http://127.0.0.1:%s]}\n", u.Port())
	if r := ts.upload(t, key, wasm, []byte(mf)); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	// fetch's input: a body length, a request block length, the request.
	fetch := func(bodyLen uint64) []byte {
		b, _ := json.Marshal(map[string]string{"url": upstream.URL + "/", "method": "POST"})
		return append(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, bodyLen), 0), b...)
	}
	tests := []struct {
		name   string
		body   uint64
		status int
		code   string
		detail string
	}{
		// 40 KiB of request body stay held while the response is read:
		// the response's buffer passes the 64 KiB held in all.
		{name: "the invocation's held bytes", body: 40 << 10, status: http.StatusBadGateway, code: "resource_exhausted",
			detail: "the limit is 65536 (limits.budget.held_bytes)"},
		{name: "a request body over limits.budget.http_request_bytes", body: 50 << 10, status: http.StatusRequestEntityTooLarge, code: "too_large",
			detail: "the request body is 51200 bytes or more; the limit is 49152 (limits.budget.http_request_bytes)"},
		{name: "a response over limits.budget.http_response_bytes", body: 0, status: http.StatusRequestEntityTooLarge, code: "too_large",
			detail: "the limit is 49152 (limits.budget.http_response_bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/modules/budget/actions/fetch", key, bytes.NewReader(fetch(tt.body)))
			p := r.json(t)
			if r.status != tt.status || p["code"] != tt.code || !strings.Contains(fmt.Sprint(p["detail"]), tt.detail) {
				t.Fatalf("%d %s; want %d, code %s, detail containing %q", r.status, r.body, tt.status, tt.code, tt.detail)
			}
		})
	}
	r := ts.do(t, "GET", "/metrics", "", nil, "Authorization", "Bearer "+metricsToken)
	for _, want := range []string{
		`moat_invocation_failures_total{code="resource_exhausted",layer="guest"} 1`,
		`moat_invocations_total{action="fetch",module="budget",org="acme",outcome="resource_exhausted"} 1`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// limits.max_table_elements: a Go module's table (thousands of
	// functions) is over 100, so the upload is refused.
	r = ts.upload(t, key, helloWasm(t), helloManifest(t))
	if r.status == http.StatusCreated || !strings.Contains(string(r.body), "a module's tables may hold at most 100 elements") {
		t.Fatalf("upload under max_table_elements 100: %d %s", r.status, r.body)
	}
}

// TestRunsResponseConfigured: limits.max_run_response_bytes bounds the
// /v1/runs response in place of the default, and the dropped output says
// which setting dropped it.
func TestRunsResponseConfigured(t *testing.T) {
	ts := start(t, "", func(c *server.Config) {
		withExecutor(t)(c)
		c.Limits.MaxRunResponseBytes = 256 << 10
	})
	if r := ts.do(t, "GET", "/api/v2/runtimes", "", nil); !strings.Contains(string(r.body), `"language":"bash"`) {
		testenv.Require(t, fmt.Sprintf("the bash language is not available: %s", r.body))
	}
	key := ts.key(t, "acme", "ann", "admin")
	// Each job prints 64 KiB on stdout: under the default 8 MiB all 16
	// would keep it. Each job's output cap is lowered to half of what is
	// left, so two keep it whole, the next ones are cut, and once the
	// response is spent the rest do not run.
	const jobs = 16
	job := `{"language":"bash","files":[{"name":"main.sh","content":"s=a; for i in $(seq 16); do s=$s$s; done; printf '%s' \"$s\""}]}`
	body := `{"runs":[` + strings.TrimSuffix(strings.Repeat(job+",", jobs), ",") + `]}`
	r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(body))
	if r.status != http.StatusOK {
		t.Fatalf("/v1/runs: %d %.300s", r.status, r.body)
	}
	if len(r.body) > 256<<10+16<<10 {
		t.Fatalf("the response is %d bytes; limits.max_run_response_bytes is 262144", len(r.body))
	}
	var batch struct{ Runs []server.RunResult }
	if err := json.Unmarshal(r.body, &batch); err != nil || len(batch.Runs) != jobs {
		t.Fatalf("batch: %v, %d runs", err, len(batch.Runs))
	}
	whole, notRun := 0, 0
	for i, run := range batch.Runs {
		switch {
		case run.Status == "ok" && len(run.Stdout) == 64<<10:
			whole++
		case run.Status != "output-limit":
			t.Errorf("run %d: %s %q, %d bytes of stdout", i, run.Status, run.Message, len(run.Stdout))
		case strings.Contains(run.Message, "used up the response's 262144 bytes of output (limits.max_run_response_bytes)"):
			notRun++
		}
	}
	if whole != 2 || notRun == 0 {
		t.Errorf("%d jobs kept their whole output and %d did not run; want 2, and some", whole, notRun)
	}
	t.Logf("%d whole, %d not run, response %d bytes", whole, notRun, len(r.body))
}
