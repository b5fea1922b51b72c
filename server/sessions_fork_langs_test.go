package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server/sessions"
)

// TestSessionForkRuby: a Ruby context's copies start with its local
// variables, methods and globals, and each goes on apart (x += 1 in a
// copy leaves the parent's x at 1); a copy of a copy too; another
// organization's fork gets 404; a context holding an open file is not
// copied, and says why.
func TestSessionForkRuby(t *testing.T) {
	testenv.Slow(t, "a Ruby context and five copies of it: about 10 s")
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	id := newSession(t, ts, ann)
	r, _ := sessionRun(t, ts, ann, id, "ruby", "x = 1\ndef twice(n) = n * 2\n$g = 'global'\nFile.write('a.txt', 'from the parent')\nnil")
	requireInterpreter(t, r)
	if r.status != http.StatusOK {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	run := func(sid, code string) map[string]any {
		t.Helper()
		r, got := sessionRun(t, ts, ann, sid, "ruby", code)
		if r.status != http.StatusOK || got["error"] != nil {
			t.Fatalf("%s in %s: %d %s", code, sid, r.status, r.body)
		}
		return got
	}
	if r, _ := forkSession(t, ts, eve, id, 1); r.status != http.StatusNotFound {
		t.Fatalf("another org's fork: %d %s", r.status, r.body)
	}
	r, kids := forkSession(t, ts, ann, id, 2)
	if r.status != http.StatusCreated || len(kids) != 2 {
		t.Fatalf("fork 2: %d %s", r.status, r.body)
	}
	if got := run(kids[0], "x += 1\nFile.write('b.txt', 'kid')\n[x, twice(x), $g, File.read('a.txt'), ENV['GREETING']]"); got["result"] != `[2, 4, "global", "from the parent", "hi"]` {
		t.Fatalf("the copy's state: %v", got["result"])
	}
	if got := run(id, "[x, File.exist?('b.txt')]"); got["result"] != "[1, false]" {
		t.Fatalf("the parent after the copy's x += 1: %v", got["result"])
	}
	if got := run(kids[1], "[x, Dir.children('.').sort]"); got["result"] != `[1, ["a.txt"]]` {
		t.Fatalf("the second copy: %v", got["result"])
	}
	if r, grand := forkSession(t, ts, ann, kids[0], 1); r.status != http.StatusCreated {
		t.Fatalf("fork of a fork: %d %s", r.status, r.body)
	} else if got := run(grand[0], "x * 10"); got["result"] != "20" {
		t.Fatalf("the copy of the copy: %v", got["result"])
	}
	// An open file cannot be carried into a copy.
	run(kids[1], "$f = File.open('held.txt', 'w')\nnil")
	if r, _ := forkSession(t, ts, ann, kids[1], 1); r.status != http.StatusConflict || !strings.Contains(string(r.body), "close it") {
		t.Fatalf("fork with an open file: %d %s", r.status, r.body)
	}
	if got := run(kids[1], "$f.close\nx"); got["result"] != "1" {
		t.Fatalf("the context after a refused fork: %v", got["result"])
	}
	if r, _ := forkSession(t, ts, ann, kids[1], 1); r.status != http.StatusCreated {
		t.Fatalf("fork once the file is closed: %d %s", r.status, r.body)
	}
}

// TestSessionPauseResumeRuby: a paused Ruby context resumes with its
// variables and methods, on the same server and then on another one
// started on the same directory (a new interpreter compiled, the image
// read from the store); another organization can neither pause nor
// resume it; a run, a pause and a resume again nest once more and still
// hold.
func TestSessionPauseResumeRuby(t *testing.T) {
	testenv.Slow(t, "a Ruby context paused and resumed on two servers: about 10 s")
	dir := t.TempDir()
	ts := start(t, dir, nil)
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	id := newSession(t, ts, ann)
	r, _ := sessionRun(t, ts, ann, id, "ruby", "x = 41\ndef twice(n) = n * 2\nnil")
	requireInterpreter(t, r)
	if r.status != http.StatusOK {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	for _, op := range []string{"pause", "resume"} {
		if r := ts.do(t, "POST", "/v1/sessions/"+id+"/"+op, eve, nil); r.status != http.StatusNotFound {
			t.Fatalf("another org's %s: %d %s", op, r.status, r.body)
		}
	}
	pauseResume := func(ts *testServer, key string) {
		t.Helper()
		if r := ts.do(t, "POST", "/v1/sessions/"+id+"/pause", key, nil); r.status != http.StatusNoContent {
			t.Fatalf("pause: %d %s", r.status, r.body)
		}
		if r := ts.do(t, "POST", "/v1/sessions/"+id+"/resume", eve, nil); r.status != http.StatusNotFound {
			t.Fatalf("another org's resume: %d %s", r.status, r.body)
		}
		if r := ts.do(t, "POST", "/v1/sessions/"+id+"/resume", key, nil); r.status != http.StatusOK {
			t.Fatalf("resume: %d %s", r.status, r.body)
		}
	}
	pauseResume(ts, ann)
	if r, got := sessionRun(t, ts, ann, id, "ruby", "x += 1\n[x, twice(x)]"); got == nil || got["result"] != "[42, 84]" {
		t.Fatalf("after resume: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "POST", "/v1/sessions/"+id+"/pause", ann, nil); r.status != http.StatusNoContent {
		t.Fatalf("pause before the server stops: %d %s", r.status, r.body)
	}
	ts.stop(t)
	ts2 := start(t, dir, nil)
	if r := ts2.do(t, "POST", "/v1/sessions/"+id+"/resume", ann, nil); r.status != http.StatusOK {
		t.Fatalf("resume on a second server: %d %s", r.status, r.body)
	}
	if r, got := sessionRun(t, ts2, ann, id, "ruby", "[x, twice(x), ENV['GREETING']]"); got == nil || got["result"] != `[42, 84, "hi"]` {
		t.Fatalf("on the second server: %d %s", r.status, r.body)
	}
}

// TestSessionForkJavaScript: a JavaScript context's copies start with its
// globals (var, functions, objects) and go on apart; a copy of a copy
// too; pause and resume keep them; a promise behaves in a copy as in the
// original; another organization's fork gets 404.
func TestSessionForkJavaScript(t *testing.T) {
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	id := newSession(t, ts, ann)
	r, _ := sessionRun(t, ts, ann, id, "javascript", "var x = 1; function twice(n) { return n * 2; } var o = {list: [1, 2, 3]};")
	requireInterpreter(t, r)
	if r.status != http.StatusOK {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	run := func(sid, code string) map[string]any {
		t.Helper()
		r, got := sessionRun(t, ts, ann, sid, "javascript", code)
		if r.status != http.StatusOK || got["error"] != nil {
			t.Fatalf("%s in %s: %d %s", code, sid, r.status, r.body)
		}
		return got
	}
	if r, _ := forkSession(t, ts, eve, id, 1); r.status != http.StatusNotFound {
		t.Fatalf("another org's fork: %d %s", r.status, r.body)
	}
	r, kids := forkSession(t, ts, ann, id, 2)
	if r.status != http.StatusCreated || len(kids) != 2 {
		t.Fatalf("fork 2: %d %s", r.status, r.body)
	}
	if got := run(kids[0], "x += 1; o.list.push(4); [x, twice(x), o.list.length]"); got["result"] != "[2,4,4]" {
		t.Fatalf("the copy's state: %v", got["result"])
	}
	if got := run(id, "[x, o.list.length]"); got["result"] != "[1,3]" {
		t.Fatalf("the parent after the copy's x += 1: %v", got["result"])
	}
	if got := run(kids[1], "x"); got["result"] != "1" {
		t.Fatalf("the second copy: %v", got["result"])
	}
	if r, grand := forkSession(t, ts, ann, kids[0], 1); r.status != http.StatusCreated {
		t.Fatalf("fork of a fork: %d %s", r.status, r.body)
	} else if got := run(grand[0], "x * 10"); got["result"] != "20" {
		t.Fatalf("the copy of the copy: %v", got["result"])
	}
	if r := ts.do(t, "POST", "/v1/sessions/"+kids[1]+"/pause", ann, nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "POST", "/v1/sessions/"+kids[1]+"/resume", ann, nil); r.status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if got := run(kids[1], "[x, twice(21)]"); got["result"] != "[1,42]" {
		t.Fatalf("after resume: %v", got["result"])
	}
	// A promise's callbacks run as they do in the original context (the
	// REPL serves its runs from one job, so they wait in both alike).
	var seen []any
	for _, sid := range []string{id, kids[1]} {
		run(sid, "var seen = 0; Promise.resolve(5).then((v) => { seen = v; }); null")
		seen = append(seen, run(sid, "seen")["result"])
	}
	if seen[0] != seen[1] {
		t.Errorf("a promise's callback: %v in the parent, %v in the resumed copy", seen[0], seen[1])
	}
}

// TestSessionForkJavaScriptDepth: a JavaScript context's state goes
// through at most sessions.MaxCaptureDepthJavaScript generations that
// ran (each nests on qjs's small shadow stack); past them a fork is
// refused by name, and the last copy still runs.
func TestSessionForkJavaScriptDepth(t *testing.T) {
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	r, _ := sessionRun(t, ts, ann, id, "javascript", "var x = 0; function deep(n) { return n == 0 ? 0 : 1 + deep(n - 1); }")
	requireInterpreter(t, r)
	for i := 1; i <= sessions.MaxCaptureDepthJavaScript; i++ {
		r, kids := forkSession(t, ts, ann, id, 1)
		if r.status != http.StatusCreated {
			t.Fatalf("generation %d: %d %s", i, r.status, r.body)
		}
		ts.do(t, "DELETE", "/v1/sessions/"+id, ann, nil)
		id = kids[0]
		if r, got := sessionRun(t, ts, ann, id, "javascript", "x += 1; [x, deep(100)]"); got["result"] != fmt.Sprintf("[%d,100]", i) {
			t.Fatalf("generation %d: %d %s", i, r.status, r.body)
		}
	}
	if r, _ := forkSession(t, ts, ann, id, 1); r.status != http.StatusConflict || !strings.Contains(string(r.body), "copy of a copy") {
		t.Fatalf("past the bound: %d %s", r.status, r.body)
	}
}
