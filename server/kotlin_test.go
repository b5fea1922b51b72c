package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// TestKotlinRunsPistonJudge0 runs Kotlin through /v1/runs, Piston's
// execute and Judge0's id 78 (Kotlin 1.3.70 there), as their clients
// send it. Piston's compile limit is raised: its default, 10 s, is under
// a cold kotlinc on a loaded machine (6-8 CPU-seconds).
func TestKotlinRunsPistonJudge0(t *testing.T) {
	testenv.Slow(t, "three kotlinc runs")
	j0 := withJudge0(t)
	ts := start(t, "", func(c *server.Config) {
		j0(c)
		c.Piston.Limits.CompileTimeout = policy.Duration(2 * time.Minute)
	})
	if r := ts.do(t, "GET", "/api/v2/runtimes", "", nil); !strings.Contains(string(r.body), `"language":"kotlin"`) {
		testenv.Require(t, fmt.Sprintf("the kotlin language is not available (make toolchains): %s", r.body))
	}
	key := ts.key(t, "acme", "ann", "admin")
	const main = "fun main(args: Array<String>) {\n    println(readln() + \" \" + args[0])\n}\n"
	body, _ := json.Marshal(map[string]any{"language": "kotlin", "files": []map[string]string{{"name": "main.kt", "content": main}}, "stdin": "hi\n", "args": []string{"x"}})
	r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(string(body)), "Content-Type", "application/json")
	if m := r.json(t); r.status != 200 || m["status"] != "ok" || m["stdout"] != "hi x\n" {
		t.Fatalf("/v1/runs: %d %s", r.status, r.body)
	}

	// Piston: the same program under another file name, found by alias.
	body, _ = json.Marshal(map[string]any{"language": "kt", "version": "*", "files": []map[string]string{{"name": "solution.kt", "content": main}}, "stdin": "yo\n", "args": []string{"p"}})
	r = ts.do(t, "POST", "/api/v2/execute", "", strings.NewReader(string(body)), "Content-Type", "application/json")
	var res struct {
		Language string
		Run      *struct {
			Stdout string
			Code   *int
		}
	}
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != http.StatusOK || res.Language != "kotlin" || res.Run == nil || res.Run.Stdout != "yo p\n" || res.Run.Code == nil || *res.Run.Code != 0 {
		t.Fatalf("piston execute: %d %s", r.status, r.body)
	}

	// Judge0: id 78, judged against expected_output.
	judge0Langs(t, ts, key, 78)
	b, _ := json.Marshal(map[string]any{"language_id": 78, "source_code": "fun main() {\n    val (a, b) = readln().split(\" \").map { it.toInt() }\n    println(a * b)\n}\n",
		"stdin": "6 7", "expected_output": "42"})
	r = ts.j0(t, "POST", "/submissions?wait=true&fields=status,stdout,compile_output,language_id", key, string(b))
	var sub struct {
		Status     struct{ ID int }
		Stdout     *string
		LanguageID int `json:"language_id"`
	}
	if err := json.Unmarshal(r.body, &sub); err != nil || r.status != 201 || sub.Status.ID != 3 || sub.Stdout == nil || *sub.Stdout != "42\n" {
		t.Fatalf("judge0 submission: %d %s", r.status, r.body)
	}
}
