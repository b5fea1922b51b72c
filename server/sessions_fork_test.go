package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/server"
)

// forkSession forks id into count sessions and returns their ids.
func forkSession(t testing.TB, ts *testServer, key, id string, count int) (response, []string) {
	t.Helper()
	r := ts.do(t, "POST", "/v1/sessions/"+id+"/fork", key, strings.NewReader(fmt.Sprintf(`{"count": %d}`, count)), "Content-Type", "application/json")
	if r.status != http.StatusCreated {
		return r, nil
	}
	var ids []string
	for _, s := range r.json(t)["sessions"].([]any) {
		ids = append(ids, s.(map[string]any)["id"].(string))
	}
	return r, ids
}

// TestSessionFork: a fork's copies start with the parent's variables and
// files, and each goes on apart (x += 1 in a copy leaves the parent's x
// at 1, and a file written in one is not in another); the count is
// bounded (1 to 100) and must fit the organization's limit all at once;
// another organization's key gets 404; a context holding an open file is
// not copied, and says why.
func TestSessionFork(t *testing.T) {
	ts := start(t, "", func(c *server.Config) { c.Sessions.MaxPerOrg = 4 })
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	id := newSession(t, ts, ann)
	r, _ := sessionRun(t, ts, ann, id, "python", "x = 1\nbig = list(range(1000))\nopen('/home/user/a.txt', 'w').write('from the parent')")
	requireInterpreter(t, r)
	if r.status != http.StatusOK {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	if r, _ := forkSession(t, ts, eve, id, 1); r.status != http.StatusNotFound {
		t.Fatalf("another org's fork: %d %s", r.status, r.body)
	}
	for _, n := range []int{0, -1, 101} {
		if r, _ := forkSession(t, ts, ann, id, n); r.status != http.StatusBadRequest {
			t.Errorf("count %d: %d %s, want 400", n, r.status, r.body)
		}
	}
	if r, _ := forkSession(t, ts, ann, id, 4); r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "max_per_org") {
		t.Fatalf("4 more past a limit of 4: %d %s", r.status, r.body)
	}
	if got := strings.Count(string(ts.do(t, "GET", "/v1/sessions", ann, nil).body), `"id"`); got != 1 {
		t.Fatalf("a refused fork left %d sessions, want the parent alone", got)
	}
	r, kids := forkSession(t, ts, ann, id, 2)
	if r.status != http.StatusCreated || len(kids) != 2 {
		t.Fatalf("fork 2: %d %s", r.status, r.body)
	}
	run := func(sid, code string) map[string]any {
		t.Helper()
		r, got := sessionRun(t, ts, ann, sid, "python", code)
		if r.status != http.StatusOK || got["error"] != nil {
			t.Fatalf("%s in %s: %d %s", code, sid, r.status, r.body)
		}
		return got
	}
	if got := run(kids[0], "x += 1\nopen('b.txt', 'w').write('kid')\nx, len(big), open('a.txt').read()"); got["result"] != "(2, 1000, 'from the parent')" {
		t.Fatalf("the copy's state: %v", got["result"])
	}
	if got := run(id, "x"); got["result"] != "1" {
		t.Fatalf("the parent's x after the copy's x += 1: %v", got["result"])
	}
	if got := run(kids[1], "import os\nx, sorted(os.listdir('.'))"); got["result"] != "(1, ['a.txt'])" {
		t.Fatalf("the second copy: %v", got["result"])
	}
	if r := ts.do(t, "GET", "/v1/sessions/"+kids[0]+"/files?path=b.txt", ann, nil); r.status != http.StatusOK || string(r.body) != "kid" {
		t.Fatalf("the copy's file through the files API: %d %s", r.status, r.body)
	}
	// A copy of a copy, and one from the copy's context that ran.
	if r, grand := forkSession(t, ts, ann, kids[0], 1); r.status != http.StatusCreated {
		t.Fatalf("fork of a fork: %d %s", r.status, r.body)
	} else if got := run(grand[0], "x"); got["result"] != "2" {
		t.Fatalf("the copy of the copy: %v", got["result"])
	} else if r := ts.do(t, "DELETE", "/v1/sessions/"+grand[0], ann, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d", r.status)
	}
	// An open file cannot be carried into a copy.
	run(kids[1], "f = open('held.txt', 'w')")
	if r, _ := forkSession(t, ts, ann, kids[1], 1); r.status != http.StatusConflict || !strings.Contains(string(r.body), "close it") {
		t.Fatalf("fork with an open file: %d %s", r.status, r.body)
	}
	if got := run(kids[1], "f.close()\nx"); got["result"] != "1" {
		t.Fatalf("the context after a refused fork: %v", got["result"])
	}
}

// TestSessionPauseResume: a paused session answers 404 until resumed,
// then has its variables and files; another organization's key cannot
// pause or resume it; a damaged image is refused cleanly, and so is one
// cut short.
func TestSessionPauseResume(t *testing.T) {
	var dir string
	ts := start(t, "", func(c *server.Config) { dir = c.DataDir + "-sessions" })
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	id := newSession(t, ts, ann)
	r, _ := sessionRun(t, ts, ann, id, "python", "x = 41\nopen('/home/user/keep.txt', 'w').write('kept')")
	requireInterpreter(t, r)
	if r.status != http.StatusOK {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	for _, op := range []string{"pause", "resume"} {
		if r := ts.do(t, "POST", "/v1/sessions/"+id+"/"+op, eve, nil); r.status != http.StatusNotFound {
			t.Fatalf("another org's %s: %d %s", op, r.status, r.body)
		}
	}
	pauseResume := func() response {
		t.Helper()
		if r := ts.do(t, "POST", "/v1/sessions/"+id+"/pause", ann, nil); r.status != http.StatusNoContent {
			t.Fatalf("pause: %d %s", r.status, r.body)
		}
		if r := ts.do(t, "GET", "/v1/sessions/"+id, ann, nil); r.status != http.StatusNotFound {
			t.Fatalf("a paused session's GET: %d", r.status)
		}
		// Listed, paused, to its owner alone (a single server: the
		// images in a directory, no database).
		if got := sessionStates(t, ts, ann); got[id] != "paused" {
			t.Fatalf("the owner's list while paused: %v", got)
		}
		if got := sessionStates(t, ts, eve); len(got) != 0 {
			t.Fatalf("another org's list: %v", got)
		}
		return ts.do(t, "POST", "/v1/sessions/"+id+"/resume", ann, nil)
	}
	if r := pauseResume(); r.status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if got := sessionStates(t, ts, ann); got[id] != "running" || len(got) != 1 {
		t.Fatalf("the owner's list after resume: %v", got)
	}
	if r, got := sessionRun(t, ts, ann, id, "python", "x += 1\nx, open('keep.txt').read()"); got == nil || got["result"] != "(42, 'kept')" {
		t.Fatalf("after resume: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "POST", "/v1/sessions/"+id+"/pause", ann, nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	images, _ := filepath.Glob(filepath.Join(dir, ".images", "*", "*.img"))
	if len(images) != 1 {
		t.Fatalf("images: %v", images)
	}
	good, err := os.ReadFile(images[0])
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"flipped": func() []byte { b := slices.Clone(good); b[len(b)/2] ^= 1; return b }(),
		"cut":     good[:len(good)-100],
		"empty":   {},
	} {
		if err := os.WriteFile(images[0], bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if r := ts.do(t, "POST", "/v1/sessions/"+id+"/resume", ann, nil); r.status != http.StatusConflict || !strings.Contains(string(r.body), "damaged") {
			t.Fatalf("a %s image: %d %s", name, r.status, r.body)
		}
	}
	if err := os.WriteFile(images[0], good, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := ts.do(t, "POST", "/v1/sessions/"+id+"/resume", ann, nil); r.status != http.StatusOK {
		t.Fatalf("resume of the image restored: %d %s", r.status, r.body)
	}
	if r, got := sessionRun(t, ts, ann, id, "python", "x"); got == nil || got["result"] != "42" {
		t.Fatalf("after the second resume: %d %s", r.status, r.body)
	}
}

// sessionStates is GET /v1/sessions as key sees it: each session's state
// by id.
func sessionStates(t testing.TB, ts *testServer, key string) map[string]string {
	t.Helper()
	r := ts.do(t, "GET", "/v1/sessions", key, nil)
	var got struct {
		Sessions []struct{ ID, State string }
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("GET /v1/sessions: %d %s", r.status, r.body)
	}
	out := map[string]string{}
	for _, s := range got.Sessions {
		out[s.ID] = s.State
	}
	return out
}
