package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/server"
)

// uploadJS uploads examples/hello-js, its main.js replaced by main when
// main is not empty.
func uploadJS(t *testing.T, ts *testServer, key, main string) {
	t.Helper()
	var extra map[string][]byte
	if main != "" {
		extra = map[string][]byte{"main.js": []byte(main)}
	}
	if r := ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, "hello-js", extra), "Content-Type", "application/gzip"); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
}

func invocationOf(t *testing.T, r response) server.InvocationJSON {
	t.Helper()
	var inv server.InvocationJSON
	if err := json.Unmarshal(r.body, &inv); err != nil {
		t.Fatalf("%d %s: not an invocation envelope: %v", r.status, r.body, err)
	}
	return inv
}

// TestInvokeLogs: ?logs=true answers with the output and the guest's own
// log records of that invocation (hello-js logs "greeting" with the
// name), at any level the server's log leaves out; without it the answer
// is the raw output; another value is a 400 naming the field.
func TestInvokeLogs(t *testing.T) {
	ts := start(t, "", func(c *server.Config) { c.Log.Level = "error" })
	key := ts.key(t, "acme", "ann", "admin")
	uploadJS(t, ts, key, "")

	r := ts.do(t, "POST", "/v1/modules/hello-js/actions/greet?logs=true", key, strings.NewReader("Wanda"))
	inv := invocationOf(t, r)
	if r.status != http.StatusOK || inv.Output != "Hello, Wanda! (call #1)" || inv.Encoding != "" || inv.CorrelationID == "" {
		t.Fatalf("?logs=true: %d %s", r.status, r.body)
	}
	if len(inv.Logs) != 1 || inv.Logs[0].Message != "greeting" || inv.Logs[0].Level != "INFO" || inv.Logs[0].Fields["name"] != "Wanda" {
		t.Errorf("logs = %+v, want the one greeting record with name Wanda", inv.Logs)
	}
	if got := r.header.Get("Content-Type"); !strings.HasPrefix(got, "application/json") {
		t.Errorf("Content-Type = %q, want JSON", got)
	}

	if r = ts.do(t, "POST", "/v1/modules/hello-js/actions/greet", key, strings.NewReader("Wanda")); r.status != http.StatusOK || string(r.body) != "Hello, Wanda! (call #2)" {
		t.Errorf("without logs: %d %q, want the raw output", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/modules/hello-js/actions/greet?logs=yes", key, strings.NewReader("x")); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "logs=true") {
		t.Errorf("logs=yes: %d %s, want 400 naming logs=true", r.status, r.body)
	}
}

// TestInvokeLogsHostile: a guest that logs without end gets at most the
// response's bounds back (200 records, 64 KiB), the rest counted, however
// generous the operator's budget; a failed invocation carries the records
// logged before it failed; concurrent invocations of one module each get
// only their own records; another organization's key reaches no module
// and no records.
func TestInvokeLogsHostile(t *testing.T) {
	ts := start(t, "", func(c *server.Config) {
		c.Limits.Budget.LogRecords = 100000
		c.Limits.Budget.LogBytes = 64 << 20
	})
	key := ts.key(t, "acme", "ann", "admin")
	uploadJS(t, ts, key, `import * as moat from "./moat.js";
const arg = (std.in.readAsString() ?? "").trim();
const [mode, n] = arg.split(" ");
for (let i = 0; i < Number(n); i++) moat.log.info(mode + " " + i + " " + "x".repeat(mode === "big" ? 8000 : 10), { i });
if (mode === "fail") throw new Error("failed after logging");
print(mode);
`)
	for _, tc := range []struct {
		mode string
		n    int
	}{{"small", 5000}, {"big", 500}} {
		r := ts.do(t, "POST", "/v1/modules/hello-js/actions/greet?logs=true", key, strings.NewReader(fmt.Sprintf("%s %d", tc.mode, tc.n)))
		inv := invocationOf(t, r)
		if r.status != http.StatusOK || inv.Output != tc.mode {
			t.Fatalf("%s: %d %.300s", tc.mode, r.status, r.body)
		}
		if len(inv.Logs) == 0 || len(inv.Logs) > 200 || len(r.body) > 80<<10 || len(inv.Logs)+inv.LogsDropped != tc.n {
			t.Errorf("%s: %d records kept, %d dropped, %d bytes: want at most 200 records and 64 KiB, the rest counted (%d in all)",
				tc.mode, len(inv.Logs), inv.LogsDropped, len(r.body), tc.n)
		}
		if want := tc.mode + " 0 "; !strings.HasPrefix(inv.Logs[0].Message, want) {
			t.Errorf("%s: first record %q, want the first logged", tc.mode, inv.Logs[0].Message)
		}
	}

	r := ts.do(t, "POST", "/v1/modules/hello-js/actions/greet?logs=true", key, strings.NewReader("fail 3"))
	var p server.Problem
	json.Unmarshal(r.body, &p)
	if r.status < 400 || len(p.Logs) != 3 || p.Logs[2].Message != "fail 2 xxxxxxxxxx" {
		t.Errorf("a failed invocation: %d %s, want a problem with its three records", r.status, r.body)
	}

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mode := fmt.Sprintf("c%d", i)
			r := ts.do(t, "POST", "/v1/modules/hello-js/actions/greet?logs=true", key, strings.NewReader(mode+" 20"))
			inv := invocationOf(t, r)
			for _, l := range inv.Logs {
				if !strings.HasPrefix(l.Message, mode+" ") {
					t.Errorf("invocation %s got another's record %q", mode, l.Message)
				}
			}
			if len(inv.Logs) != 20 {
				t.Errorf("invocation %s: %d records, want its 20", mode, len(inv.Logs))
			}
		}()
	}
	wg.Wait()

	other := ts.key(t, "globex", "gil", "admin")
	if r := ts.do(t, "POST", "/v1/modules/hello-js/actions/greet?logs=true", other, strings.NewReader("small 3")); r.status != http.StatusNotFound || strings.Contains(string(r.body), "small 0") {
		t.Errorf("another organization's key: %d %s, want 404 and no records", r.status, r.body)
	}
}
