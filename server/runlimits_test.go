package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/server"
)

// requireBash skips (or fails, with MOAT_REQUIRE_TOOLS) without the bash
// language.
func requireBash(t *testing.T, ts *testServer) {
	t.Helper()
	if r := ts.do(t, "GET", "/api/v2/runtimes", "", nil); !strings.Contains(string(r.body), `"language":"bash"`) {
		testenv.Require(t, fmt.Sprintf("the bash language is not available: %s", r.body))
	}
}

// TestRunLimitsClampedByProfile: every limit a /v1/runs job or a Piston
// execute asks for is bounded by the profile of the caller's
// organization (exec:): above it is a 400 naming the field and the
// maximum, left out it is the maximum, and a job really runs under what
// was resolved. A viewer's run once got timeout: 1h and 64 GiB.
func TestRunLimitsClampedByProfile(t *testing.T) {
	dir := t.TempDir()
	tight := filepath.Join(dir, "tight.yaml")
	if err := os.WriteFile(tight, []byte("name: tight\nexec: {timeout: 1s, compile_timeout: 5s, memory: 64MiB, output: 4KiB, scratch: 1MiB, scratch_files: 8}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exec := withExecutor(t)
	ts := start(t, "", func(c *server.Config) {
		exec(c)
		c.Profiles = map[string]string{"tight-org": tight, "piston": tight}
	})
	requireBash(t, ts)
	viewer := ts.key(t, "acme", "vic", "viewer") // minimal: the defaults
	admin := ts.key(t, "acme", "ann", "admin")
	tightKey := ts.key(t, "tight-org", "tom", "admin")
	job := func(script, limits string) string {
		b, _ := json.Marshal(script)
		if limits == "" {
			return `{"language":"bash","files":[{"name":"main.sh","content":` + string(b) + `}]}`
		}
		return `{"language":"bash","files":[{"name":"main.sh","content":` + string(b) + `}],"limits":` + limits + `}`
	}
	const over = "invalid_argument"
	cases := []struct {
		name   string
		key    string
		body   string
		status int
		detail string           // the problem's detail, exactly
		run    languages.Status // the job's status on 200
		msg    string           // in the job's message
		maxRun time.Duration
		stdout string // the job's stdout, when set
	}{
		{name: "viewer asks for an hour", key: viewer, body: job("echo hi", `{"timeout":"1h"}`), status: 400,
			detail: "limits.timeout: 1h is more than the 10s the profile minimal allows for organization acme (exec.timeout); ask for at most 10s, or leave it out to get 10s"},
		{name: "viewer asks for 64 GiB", key: viewer, body: job("echo hi", `{"memory_bytes":68719476736}`), status: 400,
			detail: "limits.memory_bytes: 68719476736 (64 GiB) is more than the 268435456 (256 MiB) the profile minimal allows for organization acme (exec.memory); ask for at most 268435456 (256 MiB), or leave it out to get 268435456 (256 MiB)"},
		{name: "admin asks for a 10 minute build", key: admin, body: job("echo hi", `{"compile_timeout":"10m"}`), status: 400,
			detail: "limits.compile_timeout: 10m is more than the 1m the profile minimal allows for organization acme (exec.compile_timeout); ask for at most 1m, or leave it out to get 1m"},
		{name: "admin asks for 1 GiB of output", key: admin, body: job("echo hi", `{"max_output_bytes":1073741824}`), status: 400,
			detail: "limits.max_output_bytes: 1073741824 (1 GiB) is more than the 1048576 (1 MiB) the profile minimal allows for organization acme (exec.output); ask for at most 1048576 (1 MiB), or leave it out to get 1048576 (1 MiB)"},
		{name: "one nanosecond over", key: admin, body: job("echo hi", `{"timeout":"10000000001ns"}`), status: 400,
			detail: "limits.timeout: 10.000000001s is more than the 10s the profile minimal allows for organization acme (exec.timeout); ask for at most 10s, or leave it out to get 10s"},
		{name: "one byte over", key: admin, body: job("echo hi", `{"memory_bytes":268435457}`), status: 400,
			detail: "limits.memory_bytes: 268435457 (268435457 B) is more than the 268435456 (256 MiB) the profile minimal allows for organization acme (exec.memory); ask for at most 268435456 (256 MiB), or leave it out to get 268435456 (256 MiB)"},
		{name: "negative memory", key: admin, body: job("echo hi", `{"memory_bytes":-1}`), status: 400,
			detail: "limits.memory_bytes: -1 is negative; give bytes, at most 268435456 (256 MiB), or leave it out"},
		{name: "negative output", key: admin, body: job("echo hi", `{"max_output_bytes":-5}`), status: 400,
			detail: "limits.max_output_bytes: -5 is negative; give bytes, at most 1048576 (1 MiB), or leave it out"},
		{name: "another org's profile is tighter", key: tightKey, body: job("echo hi", `{"timeout":"2s"}`), status: 400,
			detail: "limits.timeout: 2s is more than the 1s the profile tight allows for organization tight-org (exec.timeout); ask for at most 1s, or leave it out to get 1s"},
		{name: "a batch's second job over", key: tightKey, body: `{"runs":[` + job("echo a", "") + `,` + job("echo b", `{"memory_bytes":134217728}`) + `]}`, status: 400,
			detail: "runs[1]: limits.memory_bytes: 134217728 (128 MiB) is more than the 67108864 (64 MiB) the profile tight allows for organization tight-org (exec.memory); ask for at most 67108864 (64 MiB), or leave it out to get 67108864 (64 MiB)"},
		{name: "exactly the maximum runs", key: admin, body: job("echo hi", `{"timeout":"10s","memory_bytes":268435456,"max_output_bytes":1048576,"compile_timeout":"1m"}`), status: 200, run: languages.StatusOK},
		{name: "zero is the maximum", key: admin, body: job("echo hi", `{"timeout":"0s","memory_bytes":0}`), status: 200, run: languages.StatusOK},
		{name: "left out, the timeout is the profile's", key: tightKey, body: job("sleep 5", ""), status: 200,
			run: languages.StatusTimeout, msg: "wall-clock limit 1s passed", maxRun: 3 * time.Second},
		{name: "left out, the output cap is the profile's", key: tightKey, body: job("yes flood", ""), status: 200,
			run: languages.StatusOutputLimit, msg: "the output passed 4096 bytes; the rest was dropped", maxRun: 3 * time.Second},
		{name: "viewer asks for a 1 GiB scratch directory", key: viewer, body: job("echo hi", `{"scratch_bytes":1073741824}`), status: 400,
			detail: "limits.scratch_bytes: 1073741824 (1 GiB) is more than the 67108864 (64 MiB) the profile minimal allows for organization acme (exec.scratch); ask for at most 67108864 (64 MiB), or leave it out to get 67108864 (64 MiB)"},
		{name: "admin asks for 2000 scratch files", key: admin, body: job("echo hi", `{"scratch_files":2000}`), status: 400,
			detail: "limits.scratch_files: 2000 is more than the 1024 the profile minimal allows for organization acme (exec.scratch_files); ask for at most 1024, or leave it out to get 1024"},
		{name: "negative scratch files", key: admin, body: job("echo hi", `{"scratch_files":-1}`), status: 400,
			detail: "limits.scratch_files: -1 is negative; give a number of files, at most 1024, or leave it out"},
		{name: "left out, the scratch files are the profile's", key: tightKey, body: job(`i=0; while : > "f$i" 2>/dev/null; do i=$((i+1)); [ $i -gt 100 ] && break; done; echo "$i files"`, ""), status: 200,
			run: languages.StatusOK, msg: "", stdout: "8 files\n"},
		{name: "left out, the scratch bytes are the profile's", key: tightKey, body: job(`printf '%*s' 2097152 '' > big 2>/dev/null; echo "status $?"`, ""), status: 200,
			run: languages.StatusOK, msg: "", stdout: "status 1\n"},
		{name: "less than the maximum is honoured", key: tightKey, body: job("sleep 5", `{"timeout":"300ms"}`), status: 200,
			run: languages.StatusTimeout, msg: "wall-clock limit 300ms passed", maxRun: 2 * time.Second},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			began := time.Now()
			r := ts.do(t, "POST", "/v1/runs", tt.key, strings.NewReader(tt.body))
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if tt.status != 200 {
				var p server.Problem
				if err := json.Unmarshal(r.body, &p); err != nil || p.Code != over || p.Detail != tt.detail {
					t.Fatalf("problem %s\nwant detail %q", r.body, tt.detail)
				}
				return
			}
			var res server.RunResult
			if err := json.Unmarshal(r.body, &res); err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.run || !strings.Contains(res.Message, tt.msg) {
				t.Fatalf("run status %s %q, want %s %q", res.Status, res.Message, tt.run, tt.msg)
			}
			if tt.stdout != "" && res.Stdout != tt.stdout {
				t.Fatalf("stdout %q, want %q", res.Stdout, tt.stdout)
			}
			if tt.maxRun > 0 && time.Since(began) > tt.maxRun {
				t.Fatalf("took %s", time.Since(began))
			}
		})
	}

	// Piston: the limits are piston.limits lowered to the Piston
	// principal's profile (here tight: 1 s, 5 s, 64 MiB, 4 KiB); Piston's
	// own error shape.
	pcases := []struct {
		name    string
		body    string
		status  int
		message string // Piston's message on 400
		run     string // run.status on 200
		stdout  int    // bytes of run.stdout, -1 not checked
	}{
		{name: "run_timeout over piston.limits", body: `"run_timeout":999999`, status: 400, message: "run_timeout cannot exceed the configured limit of 1000"},
		{name: "run_timeout under piston.limits, over the profile", body: `"run_timeout":2000`, status: 400, message: "run_timeout cannot exceed the configured limit of 1000"},
		{name: "compile_timeout over the profile", body: `"compile_timeout":6000`, status: 400, message: "compile_timeout cannot exceed the configured limit of 5000"},
		{name: "run_memory_limit of 64 GiB", body: `"run_memory_limit":68719476736`, status: 400, message: "run_memory_limit cannot exceed the configured limit of 67108864"},
		{name: "compile_memory_limit over the profile", body: `"compile_memory_limit":67108865`, status: 400, message: "compile_memory_limit cannot exceed the configured limit of 67108864"},
		{name: "left out, the timeout is the profile's", body: `"stdin":""`, status: 200, run: "TO", stdout: -1},
		{name: "the output cap is the profile's", body: `"run_timeout":1000`, status: 200, run: "OL", stdout: 4096},
	}
	for _, tt := range pcases {
		t.Run("piston "+tt.name, func(t *testing.T) {
			script := "sleep 5"
			if tt.run == "OL" {
				script = "yes flood"
			}
			b, _ := json.Marshal(script)
			body := `{"language":"bash","version":"*","files":[{"name":"main.sh","content":` + string(b) + `}],` + tt.body + `}`
			r := ts.do(t, "POST", "/api/v2/execute", "", strings.NewReader(body))
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if tt.status != http.StatusOK {
				var m struct{ Message string }
				if json.Unmarshal(r.body, &m); m.Message != tt.message {
					t.Fatalf("message %q, want %q", m.Message, tt.message)
				}
				return
			}
			var res struct {
				Run struct {
					Status *string
					Stdout string
					Wall   int64 `json:"wall_time"`
				}
			}
			if err := json.Unmarshal(r.body, &res); err != nil || res.Run.Status == nil || *res.Run.Status != tt.run {
				t.Fatalf("run: %s, want status %s", r.body, tt.run)
			}
			if tt.stdout >= 0 && len(res.Run.Stdout) != tt.stdout {
				t.Fatalf("stdout %d bytes, want %d", len(res.Run.Stdout), tt.stdout)
			}
			if tt.run == "TO" && (res.Run.Wall < 900 || res.Run.Wall > 2500) {
				t.Fatalf("wall %d ms, want about the profile's 1000", res.Run.Wall)
			}
		})
	}
}
