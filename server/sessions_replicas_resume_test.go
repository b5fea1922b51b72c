package server_test

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestSessionPauseResumeReplicas: a Python session made on replica A,
// paused there (its image in the shared store), is resumed through
// replica B with its variables and files; B holds it from then on, so a
// call through A is routed to B; another organization cannot resume it;
// and a command's output streams through the other replica as it is
// produced, not when it ends.
func TestSessionPauseResumeReplicas(t *testing.T) {
	testenv.Slow(t, "two servers on PostgreSQL and a Python context: about 10 s")
	a, b := replicaPair(t, nil)
	ann := a.key(t, "acme", "ann")
	eve := a.key(t, "evil", "eve")
	id := newSession(t, a, ann)
	r, got := sessionRun(t, a, ann, id, "python", "x = 41")
	requireInterpreter(t, r)
	if r.status != 200 {
		t.Fatalf("run on A: %d %s (%v)", r.status, r.body, got)
	}
	if r := a.do(t, "PUT", "/v1/sessions/"+id+"/files?path=kept.txt", ann, strings.NewReader("from A")); r.status != http.StatusOK {
		t.Fatalf("PUT on A: %d %s", r.status, r.body)
	}
	if r := a.do(t, "POST", "/v1/sessions/"+id+"/pause", ann, nil); r.status/100 != 2 {
		t.Fatalf("pause on A: %d %s", r.status, r.body)
	}
	// Either replica lists it, paused (the directory's state now, not
	// the state it was made in); another organization does not see it.
	for name, ts := range map[string]*testServer{"A": a, "B": b} {
		if got := sessionStates(t, ts, ann); got[id] != "paused" {
			t.Errorf("ann's list on %s while paused: %v", name, got)
		}
		if got := sessionStates(t, ts, eve); len(got) != 0 {
			t.Errorf("eve's list on %s: %v", name, got)
		}
	}
	if r := b.do(t, "POST", "/v1/sessions/"+id+"/resume", eve, nil); r.status != http.StatusNotFound {
		t.Errorf("eve resumes ann's session through B: %d %s; want 404", r.status, r.body)
	}
	if r := b.do(t, "POST", "/v1/sessions/"+id+"/resume", ann, nil); r.status != http.StatusOK {
		t.Fatalf("resume through B: %d %s", r.status, r.body)
	}
	if r, got := sessionRun(t, b, ann, id, "python", "x + 1"); r.status != http.StatusOK || got["result"] != "42" {
		t.Fatalf("x + 1 on B after resume: %d %s", r.status, r.body)
	}
	if r := b.do(t, "GET", "/v1/sessions/"+id+"/files?path=kept.txt", ann, nil); r.status != http.StatusOK || string(r.body) != "from A" {
		t.Errorf("the file after resume on B: %d %s", r.status, r.body)
	}
	if got := sessionStates(t, a, ann); got[id] != "running" {
		t.Errorf("ann's list on A after B resumed it: %v", got)
	}
	// B holds it now: A routes the call there.
	if r, got := sessionRun(t, a, ann, id, "python", "x"); r.status != http.StatusOK || got["result"] != "41" {
		t.Errorf("a run through A after B resumed it: %d %s", r.status, r.body)
	}

	// A command started through A on B's session: its first line arrives
	// through the proxy a second before the command ends.
	req, _ := http.NewRequest("POST", a.URL+"/v1/sessions/"+id+"/commands", strings.NewReader(`{"cmd":"echo one; sleep 1; echo two"}`))
	req.Header.Set("Authorization", "Bearer "+ann)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	began := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a streamed command through A: %d", res.StatusCode)
	}
	var first, end time.Duration
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "event: stdout" && first == 0:
			first = time.Since(began)
		case line == "event: end":
			end = time.Since(began)
		}
	}
	if first == 0 || end == 0 || end-first < 700*time.Millisecond {
		t.Errorf("through the proxy, the first line came at %v and the end at %v: not as produced", first, end)
	}
}
