package server_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/server/sessions"
)

// TestE2BExecuteStream: E2B's /execute writes each line the code prints
// as it prints it — print, a second's sleep, print: the first stdout line
// comes about a second before end_of_execution — and a flood is cut at
// the run's 16 MiB: no more stdout than that, then the error the code's
// print raised and end_of_execution.
func TestE2BExecuteStream(t *testing.T) {
	testenv.Slow(t, "runs CPython, a second's sleep and a 16 MiB flood")
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	tok := server.E2BAccessToken(ts.Server, id, "acme", "ann")
	type line struct {
		Type, Text, Name, Value string
		at                      time.Duration
	}
	execute := func(code string) []line {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"code": code})
		req, _ := http.NewRequest("POST", ts.URL+"/e2b/sandbox/execute", strings.NewReader(string(body)))
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "49999")
		req.Header.Set("X-Access-Token", tok)
		req.Header.Set("Content-Type", "application/json")
		began := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			r := response{status: res.StatusCode}
			b := new(strings.Builder)
			_, _ = bufio.NewReader(res.Body).WriteTo(b)
			r.body = []byte(b.String())
			requireInterpreter(t, r)
			t.Fatalf("%d %s", res.StatusCode, b)
		}
		var out []line
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%q: %v", sc.Text(), err)
			}
			l.at = time.Since(began)
			out = append(out, l)
		}
		return out
	}
	execute("x = 1") // the context starts
	ls := execute("import time\nprint('one')\ntime.sleep(1)\nprint('two')\nx + 1")
	var types []string
	for _, l := range ls {
		types = append(types, l.Type+":"+l.Text)
	}
	if strings.Join(types, ",") != "stdout:one\n,stdout:two\n,result:2,number_of_executions:,end_of_execution:" {
		t.Fatalf("lines: %q", types)
	}
	if gap := ls[len(ls)-1].at - ls[0].at; gap < 700*time.Millisecond {
		t.Fatalf("the first line came %v before the end: not streamed", gap)
	}

	ls = execute("while True:\n    print('x' * 999)")
	streamed := 0
	var rest []line
	for _, l := range ls {
		if l.Type == "stdout" && len(rest) == 0 {
			streamed += len(l.Text)
		} else {
			rest = append(rest, l)
		}
	}
	if streamed > sessions.MaxRunOutputBytes || streamed < sessions.MaxRunOutputBytes/2 || len(rest) != 3 ||
		rest[0].Type != "error" || !strings.Contains(rest[0].Value, "limit") || rest[2].Type != "end_of_execution" {
		t.Fatalf("a flood: %d bytes (cap %d), then %+v", streamed, sessions.MaxRunOutputBytes, rest)
	}
	if ls = execute("x"); len(ls) < 1 || ls[0].Type != "result" || ls[0].Text != "1" {
		t.Fatalf("the context after the flood: %+v", ls)
	}
}
