package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
)

// TestRunsTestsCompileOnce: 50 tests of one C++ program through
// /v1/runs, one compile in the audit trail, each test's verdict.
func TestRunsTestsCompileOnce(t *testing.T) {
	testenv.Slow(t, "runs many programs through the executor")
	ts := start(t, "", withExecutor(t))
	key := ts.key(t, "acme", "ann", "admin")
	if r := ts.do(t, "GET", "/v1/languages", key, nil); !strings.Contains(string(r.body), `"name":"cpp"`) || strings.Contains(string(r.body), `"name":"cpp","version":"","aliases":[],"path":"compiled","extensions":[".cpp",".cc",".cxx",".hpp",".h"],"state":"unavailable"`) {
		testenv.Require(t, "cpp is not available: "+string(r.body))
	}
	src := "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<\"\\n\";return 0;}\n"
	var tests []map[string]any
	for i := range 50 {
		want := fmt.Sprint(i + i)
		if i == 7 {
			want = "wrong"
		}
		tests = append(tests, map[string]any{"stdin": fmt.Sprintf("%d %d\n", i, i), "expected_output": want})
	}
	b, _ := json.Marshal(map[string]any{"language": "cpp", "files": []map[string]string{{"name": "main.cpp", "content": src}}, "tests": tests})
	began := time.Now()
	r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(string(b)), "Content-Type", "application/json", server.HeaderRequestID, "grader-50")
	took := time.Since(began)
	var res server.RunResult
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != 200 {
		t.Fatalf("runs: %d %s", r.status, r.body)
	}
	if len(res.Tests) != 50 || res.Passed == nil || *res.Passed != 49 || res.Tests[7].Verdict != server.VerdictWrongAnswer || res.Tests[8].Verdict != server.VerdictAccepted || res.Tests[49].Stdout != "98\n" {
		t.Fatalf("tests: %s", r.body)
	}
	t.Logf("50 tests: %s in all; compile %.0f ms (cached %v), the runs' own time %.0f ms together", took.Round(time.Millisecond), res.CompileTimeMS, res.BuildCached, res.RunTimeMS)
	builds := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		a := ts.do(t, "GET", "/v1/audit?correlation_id=grader-50&limit=1000", key, nil)
		var page struct{ Events []map[string]any }
		if err := json.Unmarshal(a.body, &page); err != nil {
			t.Fatalf("audit: %s", a.body)
		}
		builds = 0
		for _, ev := range page.Events {
			if ev["action"] == "build" && ev["module"] == "lang:cpp" {
				builds++
			}
		}
		if builds > 0 || time.Now().After(deadline) {
			break
		}
	}
	if builds != 1 {
		t.Errorf("%d builds in the audit trail of 50 tests, want 1", builds)
	}
	// stop_on_failure: the tests after the first failure are not run.
	b, _ = json.Marshal(map[string]any{"language": "cpp", "files": []map[string]string{{"name": "main.cpp", "content": src}}, "tests": tests[5:10], "stop_on_failure": true})
	r = ts.do(t, "POST", "/v1/runs", key, strings.NewReader(string(b)))
	res = server.RunResult{}
	if err := json.Unmarshal(r.body, &res); err != nil || len(res.Tests) != 5 || res.Tests[2].Verdict != server.VerdictWrongAnswer || res.Tests[3].Verdict != server.VerdictNotRun || !res.BuildCached {
		t.Errorf("stop_on_failure: %s", r.body)
	}
	// Bounded.
	many := make([]map[string]any, server.MaxRunTests+1)
	for i := range many {
		many[i] = map[string]any{}
	}
	b, _ = json.Marshal(map[string]any{"language": "cpp", "files": []map[string]string{{"name": "main.cpp", "content": src}}, "tests": many})
	if r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(string(b))); r.status != 400 || !strings.Contains(string(r.body), "tests holds 101 tests") {
		t.Errorf("101 tests: %d %s", r.status, r.body)
	}
}
