package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestJavaRunsAndPiston runs Java through /v1/runs and Piston's execute,
// as their clients send it: a Piston client names the file whatever it
// likes ("main.java" holding public class Main) and asks for "java".
func TestJavaRunsAndPiston(t *testing.T) {
	ts := start(t, "", withExecutor(t))
	if r := ts.do(t, "GET", "/api/v2/runtimes", "", nil); !strings.Contains(string(r.body), `"language":"java"`) {
		testenv.Require(t, fmt.Sprintf("the java language is not available (make tools): %s", r.body))
	}
	key := ts.key(t, "acme", "ann", "admin")
	const main = `public class Main { public static void main(String[] a) throws Exception { System.out.println(new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine() + " " + a[0]); } }`
	body, _ := json.Marshal(map[string]any{"language": "java", "files": []map[string]string{{"name": "Main.java", "content": main}}, "stdin": "hi\n", "args": []string{"x"}})
	r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(string(body)), "Content-Type", "application/json")
	if m := r.json(t); r.status != 200 || m["status"] != "ok" || m["stdout"] != "hi x\n" {
		t.Fatalf("/v1/runs: %d %s", r.status, r.body)
	}

	body, _ = json.Marshal(map[string]any{"language": "java", "version": "*", "files": []map[string]string{{"name": "main.java", "content": main}}, "stdin": "yo\n", "args": []string{"p"}})
	r = ts.do(t, "POST", "/api/v2/execute", "", strings.NewReader(string(body)), "Content-Type", "application/json")
	var res struct {
		Language string
		Run      *struct {
			Stdout string
			Code   *int
		}
	}
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != http.StatusOK || res.Language != "java" || res.Run == nil || res.Run.Stdout != "yo p\n" || res.Run.Code == nil || *res.Run.Code != 0 {
		t.Fatalf("piston execute: %d %s", r.status, r.body)
	}
}
