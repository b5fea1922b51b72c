package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
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
	post := func(body string) []sseEvent { return postSSE(t, ts.URL+"/v1/runs", key, body) }
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

// sseEvent is one server-sent event a test read, and when it came (from
// the request's start).
type sseEvent struct {
	name string
	data map[string]any
	at   time.Duration
}

// postSSE posts body (JSON) to url asking for server-sent events and
// returns them as they came, with their arrival times.
func postSSE(t *testing.T, url, key, body string) []sseEvent {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
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
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("%d %s: %s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	var out []sseEvent
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 4<<20)
	var name string
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			name = v
		} else if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var d map[string]any
			if err := json.Unmarshal([]byte(v), &d); err != nil {
				t.Fatalf("%q: %v", v, err)
			}
			out = append(out, sseEvent{name, d, time.Since(began)})
		}
	}
	return out
}

// TestRunsStreamWASM: a WASM run of POST /v1/runs streams as a native one
// does, in CPython, QuickJS and CRuby (the Ruby driver's runtime) — the
// host hands its stdout writes on as the guest makes them, so the first
// line (print, wait 1 s, print) comes about a second before the result —
// and a program printing without end is cut at max_output_bytes:
// the events carry no more than the cap, and the run ends output-limit.
func TestRunsStreamWASM(t *testing.T) {
	testenv.Slow(t, "runs CPython, a second's sleep and a flood")
	t.Parallel()
	ts := start(t, "", withExecutor(t))
	if r := ts.do(t, "GET", "/api/v2/runtimes", "", nil); !strings.Contains(string(r.body), `"language":"python"`) {
		testenv.Require(t, "python is not offered here: "+string(r.body))
	}
	key := ts.key(t, "acme", "ann")
	post := func(body string) []sseEvent { return postSSE(t, ts.URL+"/v1/runs", key, body) }
	for _, tc := range []struct{ lang, file, code string }{
		{"python", "main.py", "import time\nprint('one', flush=True)\ntime.sleep(1)\nprint('two')\n"},
		{"javascript", "main.js", "console.log('one'); const t0 = Date.now(); while (Date.now() - t0 < 1000) {} console.log('two');"},
		{"ruby", "main.rb", "puts 'one'\nsleep 1\nputs 'two'\n"},
	} {
		evs := post(`{"language":"` + tc.lang + `","files":[{"name":"` + tc.file + `","content":` + jsonString(tc.code) + `}]}`)
		// The chunks are the guest's writes (CPython's print writes the
		// text, then the newline): joined, they are its output.
		var joined string
		var first time.Duration
		for _, e := range evs[:len(evs)-1] {
			if e.name == "preparing" || e.name == "prepared" {
				continue // a first run's first-time work (TestRunsStreamPreparing)
			}
			if e.name != "stdout" {
				t.Fatalf("%s: events: %v", tc.lang, evs)
			}
			if joined += e.data["data"].(string); first == 0 && strings.HasPrefix(joined, "one\n") {
				first = e.at
			}
		}
		end := evs[len(evs)-1]
		if joined != "one\ntwo\n" || end.name != "result" || end.data["stdout"] != joined || end.data["status"] != "ok" {
			t.Fatalf("%s: events: %v", tc.lang, evs)
		}
		if gap := end.at - first; gap < 700*time.Millisecond {
			t.Fatalf("%s: the first line came %v before the end: not streamed", tc.lang, gap)
		}
	}

	const limit = 64 << 10
	evs := post(fmt.Sprintf(`{"language":"python","limits":{"max_output_bytes":%d},"files":[{"name":"main.py","content":"while True:\n    print('x' * 999, flush=True)\n"}]}`, limit))
	streamed := 0
	for _, e := range evs[:len(evs)-1] {
		switch e.name {
		case "stdout":
			streamed += len(e.data["data"].(string))
		case "stderr": // the write refused past the cap: CPython's traceback
		default:
			t.Fatalf("event %s: %v", e.name, e.data)
		}
	}
	last := evs[len(evs)-1]
	if last.name != "result" || last.data["status"] != "output-limit" || streamed > limit || streamed < limit/2 {
		t.Fatalf("a flood: %d bytes streamed (cap %d), then %s %v", streamed, limit, last.name, last.data)
	}
	if last.at > 8*time.Second {
		t.Fatalf("the flood ran %v: not stopped at the cap", last.at)
	}
}
