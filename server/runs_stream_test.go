package server_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestRunsStream: POST /v1/runs with Accept: text/event-stream streams a
// native run's output as the program writes it — the first line about a
// second before the program (print, sleep 1 s, print) ends — then the
// result a JSON answer would be; a refusal comes as an error event.
func TestRunsStream(t *testing.T) {
	t.Parallel()
	ts := start(t, "", withExecutor(t))
	if r := ts.do(t, "GET", "/api/v2/runtimes", "", nil); !strings.Contains(string(r.body), `"language":"bash"`) {
		testenv.Require(t, "bash is not offered here: "+string(r.body))
	}
	key := ts.key(t, "acme", "ann")
	post := func(body string) []struct {
		name string
		data map[string]any
		at   time.Duration
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/runs", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		began := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Content-Type"))
		}
		var out []struct {
			name string
			data map[string]any
			at   time.Duration
		}
		sc := bufio.NewScanner(res.Body)
		var name string
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var d map[string]any
				if err := json.Unmarshal([]byte(v), &d); err != nil {
					t.Fatalf("%q: %v", v, err)
				}
				out = append(out, struct {
					name string
					data map[string]any
					at   time.Duration
				}{name, d, time.Since(began)})
			}
		}
		return out
	}
	evs := post(`{"language":"bash","files":[{"name":"main.sh","content":"echo one; sleep 1; echo two; exit 2"}]}`)
	if len(evs) != 3 || evs[0].name != "stdout" || evs[0].data["data"] != "one\n" || evs[1].data["data"] != "two\n" || evs[2].name != "result" {
		t.Fatalf("events: %v", evs)
	}
	if res := evs[2].data; res["stdout"] != "one\ntwo\n" || res["exit_code"] != 2.0 || res["status"] != "runtime_error" && res["status"] != "runtime-error" {
		t.Fatalf("result: %v", res)
	}
	if gap := evs[2].at - evs[0].at; gap < 700*time.Millisecond {
		t.Fatalf("the first chunk came %v before the end: not streamed", gap)
	}
	evs = post(`{"language":"cobol","files":[{"name":"a","content":"x"}]}`)
	if len(evs) != 1 || evs[0].name != "error" || evs[0].data["status"] != 400.0 {
		t.Fatalf("a refusal: %v", evs)
	}
}
