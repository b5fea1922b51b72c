package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server/sessions"
)

// TestSessionRunStream: POST /v1/sessions/{id}/run with Accept:
// text/event-stream streams what a context's code prints as it prints it,
// in each language (the REPL writes each line to its real stdout, which
// the host hands to the response): print, a second's wait, print — the
// first line comes about a second before the result, which carries the
// result value and no stdout (it was the events); the variables stay.
func TestSessionRunStream(t *testing.T) {
	testenv.Slow(t, "runs three cold interpreters, each waiting a second")
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	for _, tc := range []struct{ lang, code, result string }{
		{"python", "import time\nprint('one')\ntime.sleep(1)\nprint('two')\nkept = 7\n'done'", "'done'"},
		{"javascript", "console.log('one'); var t0 = Date.now(); while (Date.now() - t0 < 1000) {} console.log('two'); var kept = 7; 'done'", "done"},
		{"ruby", "puts 'one'\nsleep 1\nputs 'two'\n$kept = 7\n'done'", `"done"`},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			if r, _ := sessionRun(t, ts, ann, id, tc.lang, "1"); r.status != http.StatusOK {
				requireInterpreter(t, r)
				t.Fatalf("warm up: %d %s", r.status, r.body)
			}
			evs := postSSE(t, ts.URL+"/v1/sessions/"+id+"/run", ann, `{"language":"`+tc.lang+`","code":`+jsonString(tc.code)+`}`)
			var joined string
			var first time.Duration
			for _, e := range evs[:len(evs)-1] {
				if e.name != "stdout" {
					t.Fatalf("events: %v", evs)
				}
				if joined += e.data["data"].(string); first == 0 {
					first = e.at
				}
			}
			end := evs[len(evs)-1]
			if joined != "one\ntwo\n" || end.name != "result" || end.data["result"] != tc.result || end.data["stdout"] != "" {
				t.Fatalf("events: %v", evs)
			}
			if gap := end.at - first; gap < 700*time.Millisecond {
				t.Fatalf("the first line came %v before the end: not streamed", gap)
			}
			t.Logf("first line after %v, result after %v", first, end.at)
		})
	}
	if r, got := sessionRun(t, ts, ann, id, "python", "kept"); got["result"] != "7" {
		t.Fatalf("the variables after a streamed run: %d %s", r.status, r.body)
	}
}

// TestSessionRunStreamBounds: a context's code printing without end is
// cut at the run's output limit (sessions.MaxRunOutputBytes, each
// stream): the events carry no more, the print past it raises in the
// code, which ends the run with that error, and the context lives on. A
// client that goes away mid-run stops the run: the next one does not wait
// for the abandoned code's 30 s sleep, and finds the context restarted.
func TestSessionRunStreamBounds(t *testing.T) {
	testenv.Slow(t, "floods 16 MiB through a stream")
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	if r, _ := sessionRun(t, ts, ann, id, "python", "x = 1"); r.status != http.StatusOK {
		requireInterpreter(t, r)
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	evs := postSSE(t, ts.URL+"/v1/sessions/"+id+"/run", ann, `{"language":"python","code":"while True:\n    print('x' * 999)"}`)
	streamed := 0
	for _, e := range evs[:len(evs)-1] {
		if e.name != "stdout" {
			t.Fatalf("event %s: %v", e.name, e.data)
		}
		streamed += len(e.data["data"].(string))
	}
	end := evs[len(evs)-1]
	errv, _ := end.data["error"].(map[string]any)
	if streamed > sessions.MaxRunOutputBytes || streamed < sessions.MaxRunOutputBytes/2 || end.name != "result" || errv == nil || !strings.Contains(errv["value"].(string), "limit") {
		t.Fatalf("a flood: %d bytes streamed (cap %d), then %s %v", streamed, sessions.MaxRunOutputBytes, end.name, end.data)
	}
	t.Logf("a flood of %d bytes streamed in %v", streamed, end.at)
	if r, got := sessionRun(t, ts, ann, id, "python", "x"); got["result"] != "1" {
		t.Fatalf("after the flood: %d %s", r.status, r.body)
	}

	// A client that goes away.
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/sessions/"+id+"/run",
		strings.NewReader(`{"language":"python","code":"import time\nprint('a')\ntime.sleep(30)"}`))
	req.Header.Set("Authorization", "Bearer "+ann)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	cancel()
	res.Body.Close()
	began := time.Now()
	r, got := sessionRun(t, ts, ann, id, "python", "'x' in globals()")
	if took := time.Since(began); took > 15*time.Second || got["result"] != "False" || got["restarted"] != true {
		t.Fatalf("the run after a client went away: %v, %d %s", took, r.status, r.body)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
