package server_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
)

// command starts a command in a session and returns the response.
func command(t *testing.T, ts *testServer, key, id string, req map[string]any) (response, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(req)
	r := ts.do(t, "POST", "/v1/sessions/"+id+"/commands", key, strings.NewReader(string(body)), "Content-Type", "application/json")
	if r.status == http.StatusOK || r.status == http.StatusCreated {
		return r, r.json(t)
	}
	return r, nil
}

func requireCommands(t *testing.T) {
	t.Helper()
	testenv.Root(t, "a job uid, cgroups and the workspace handed to it")
	if _, err := os.Stat("/usr/bin/bash"); err != nil {
		testenv.Require(t, "/usr/bin/bash")
	}
}

// TestSessionCommands: a command runs bash -c in the workspace
// (/home/user, its cwd and HOME) with the session's variables; its output
// and exit code come back; a file it writes is read through the files API
// and by a Python context, and one uploaded is read by it; a background
// command outlives its request, reads the stdin written to it, and ends
// on SIGTERM (forwarded by its init: 143); another principal gets 404;
// and the session's end kills what still runs, its cgroup gone.
func TestSessionCommands(t *testing.T) {
	requireCommands(t)
	t.Parallel()
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	id := newSession(t, ts, ann)

	r, got := command(t, ts, ann, id, map[string]any{"cmd": `echo out; echo err >&2; pwd; echo "$HOME $GREETING"; exit 3`})
	if r.status != http.StatusOK || got["stdout"] != "out\n/home/user\n/home/user hi\n" || got["stderr"] != "err\n" || got["exit_code"] != 3.0 {
		t.Fatalf("a foreground command: %d %s", r.status, r.body)
	}
	if r, got = command(t, ts, ann, id, map[string]any{"cmd": `mkdir -p sub && echo "from bash" > sub/f.txt && cat in.txt`}); got["exit_code"] != 1.0 {
		t.Logf("(no in.txt yet: %s)", r.body)
	}
	if r = ts.do(t, "GET", "/v1/sessions/"+id+"/files?path=sub/f.txt", ann, nil); r.status != http.StatusOK || string(r.body) != "from bash\n" {
		t.Fatalf("the files API reads what a command wrote: %d %q", r.status, r.body)
	}
	if r = ts.do(t, "PUT", "/v1/sessions/"+id+"/files?path=in.txt", ann, strings.NewReader("uploaded")); r.status != http.StatusOK {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if r, got = command(t, ts, ann, id, map[string]any{"cmd": `cat in.txt; echo more >> in.txt; ls`, "cwd": "/home/user"}); got["stdout"] != "uploadedin.txt\nsub\n" || got["exit_code"] != 0.0 {
		t.Fatalf("a command reads and appends to an upload: %d %s", r.status, r.body)
	}
	if r, got = command(t, ts, ann, id, map[string]any{"cmd": `pwd; cat f.txt`, "cwd": "sub", "envs": map[string]string{"X": "1"}}); got["stdout"] != "/home/user/sub\nfrom bash\n" {
		t.Fatalf("cwd sub: %d %s", r.status, r.body)
	}
	for name, req := range map[string]map[string]any{
		"cwd out by ..":     {"cmd": "true", "cwd": "../.."},
		"cwd elsewhere":     {"cmd": "true", "cwd": "/etc"},
		"cwd not a dir":     {"cmd": "true", "cwd": "in.txt"},
		"a loader variable": {"cmd": "true", "envs": map[string]string{"LD_PRELOAD": "/home/user/x.so"}},
		"HOME":              {"cmd": "true", "envs": map[string]string{"HOME": "/"}},
		"an empty command":  {"cmd": ""},
	} {
		if r, _ := command(t, ts, ann, id, req); r.status/100 != 4 {
			t.Errorf("%s: %d %s, want a refusal", name, r.status, r.body)
		}
	}
	if r, got = sessionRun(t, ts, ann, id, "python", "open('/home/user/sub/f.txt').read()"); r.status == http.StatusOK && got["result"] != `'from bash\n'` {
		t.Fatalf("a Python context reads what a command wrote: %d %s", r.status, r.body)
	}

	// A background command with stdin: it answers what it reads.
	r, got = command(t, ts, ann, id, map[string]any{"cmd": `while read l; do echo "got $l"; done; echo eof`, "stdin": true, "background": true})
	if r.status != http.StatusCreated {
		t.Fatalf("background: %d %s", r.status, r.body)
	}
	cat := strconv.Itoa(int(got["pid"].(float64)))
	if r = ts.do(t, "POST", "/v1/sessions/"+id+"/commands/"+cat+"/input", ann, strings.NewReader("a\nb\n")); r.status != http.StatusNoContent {
		t.Fatalf("input: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/sessions/"+id+"/commands/"+cat+"/input?close=true", ann, nil); r.status != http.StatusNoContent {
		t.Fatalf("close stdin: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "GET", "/v1/sessions/"+id+"/commands/"+cat+"/wait", ann, nil); r.status != http.StatusOK || r.json(t)["stdout"] != "got a\ngot b\neof\n" {
		t.Fatalf("wait: %d %s", r.status, r.body)
	}

	// SIGTERM reaches a sleeping command through its init.
	_, got = command(t, ts, ann, id, map[string]any{"cmd": "sleep 60", "background": true})
	sleeper := strconv.Itoa(int(got["pid"].(float64)))
	time.Sleep(200 * time.Millisecond)
	if r = ts.do(t, "POST", "/v1/sessions/"+id+"/commands/"+sleeper+"/signal", ann, strings.NewReader(`{"signal":"SIGTERM"}`)); r.status != http.StatusNoContent {
		t.Fatalf("signal: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "GET", "/v1/sessions/"+id+"/commands/"+sleeper+"/wait", ann, nil); r.status != http.StatusOK || r.json(t)["exit_code"] != 143.0 {
		t.Fatalf("SIGTERM: %d %s, want exit 143", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/sessions/"+id+"/commands/"+sleeper+"/signal", ann, strings.NewReader(`{"signal":"SIGSEGV"}`)); r.status != http.StatusBadRequest && r.status != http.StatusConflict {
		t.Fatalf("a signal not offered: %d %s", r.status, r.body)
	}

	// Another principal: 404 on every route.
	for _, p := range []string{"/commands", "/commands/" + cat, "/commands/" + cat + "/wait"} {
		if r = ts.do(t, "GET", "/v1/sessions/"+id+p, eve, nil); r.status != http.StatusNotFound {
			t.Errorf("eve GET %s: %d", p, r.status)
		}
	}
	if r, _ = command(t, ts, eve, id, map[string]any{"cmd": "id"}); r.status != http.StatusNotFound {
		t.Errorf("eve starts a command: %d", r.status)
	}

	// A background command outlives its request and dies with the session.
	_, got = command(t, ts, ann, id, map[string]any{"cmd": "sleep 300 & sleep 300; wait", "background": true})
	bg := int(got["pid"].(float64))
	time.Sleep(300 * time.Millisecond)
	sess, err := server.SessionOf(ts.Server, "acme", "ann", id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sess.Command(bg)
	if err != nil || !c.Info().Running {
		t.Fatalf("the background command: %v %+v", err, c)
	}
	cgroups := c.CgroupDirs()
	if len(cgroups) == 0 {
		t.Fatal("the command has no cgroup")
	}
	if r = ts.do(t, "GET", "/v1/sessions/"+id+"/commands", ann, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"running":true`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "DELETE", "/v1/sessions/"+id, ann, nil); r.status != http.StatusNoContent {
		t.Fatalf("end: %d %s", r.status, r.body)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session ended and its command runs on")
	}
	if info := c.Info(); info.Running || info.ExitCode == nil {
		t.Fatalf("after the session's end: %+v", info)
	}
	for _, d := range cgroups {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the command's cgroup %s is left: %v", d, err)
		}
	}
}

// TestSessionCommandStream: with Accept: text/event-stream a command's
// output arrives as it is produced — the first line well before the
// command (print, sleep 1 s, print) ends — then its end with the exit code.
func TestSessionCommandStream(t *testing.T) {
	requireCommands(t)
	t.Parallel()
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	req, _ := http.NewRequest("POST", ts.URL+"/v1/sessions/"+id+"/commands", strings.NewReader(`{"cmd":"echo one; sleep 1; echo two; printf '\\377' >&2; exit 7"}`))
	req.Header.Set("Authorization", "Bearer "+ann)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	began := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("%d %s", res.StatusCode, ct)
	}
	type event struct {
		name string
		data map[string]any
		at   time.Duration
	}
	var events []event
	sc := bufio.NewScanner(res.Body)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[7:]
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(line[6:]), &d); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			events = append(events, event{name, d, time.Since(began)})
		}
	}
	var seq []string
	for _, e := range events {
		seq = append(seq, e.name)
	}
	// stdout and stderr are two pipes: their order between each other is
	// the reader's, not the writer's.
	if len(events) != 5 || seq[0] != "start" || seq[1] != "stdout" || seq[4] != "end" {
		t.Fatalf("events: %v", events)
	}
	later := map[string]any{}
	for _, e := range events[2:4] {
		later[e.name+" "+e.data["data"].(string)] = e.data["encoding"]
	}
	if _, two := later["stdout two\n"]; events[1].data["data"] != "one\n" || !two || later["stderr /w=="] != "base64" {
		t.Fatalf("chunks: %v", events)
	}
	if events[4].data["exit_code"] != 7.0 {
		t.Fatalf("end: %v", events[4].data)
	}
	if gap := events[4].at - events[1].at; gap < 700*time.Millisecond {
		t.Fatalf("the first chunk came %v before the end: it was not streamed", gap)
	}
	t.Logf("first chunk after %v, end after %v", events[1].at, events[4].at)
}

// TestSessionCommandLimits: a session runs at most sessions.max_commands
// commands at once; a fork bomb is held by the pids limit and a
// memory hog by the memory limit, and the session lives on.
func TestSessionCommandLimits(t *testing.T) {
	requireCommands(t)
	testenv.Slow(t, "a fork bomb and a memory hog run to their limits (about 20 s)")
	t.Parallel()
	ts := start(t, "", func(c *server.Config) { c.Sessions.MaxCommands = 2 })
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	for range 2 {
		if r, _ := command(t, ts, ann, id, map[string]any{"cmd": "sleep 30", "background": true}); r.status != http.StatusCreated {
			t.Fatalf("background: %d %s", r.status, r.body)
		}
	}
	if r, _ := command(t, ts, ann, id, map[string]any{"cmd": "true"}); r.status != http.StatusTooManyRequests {
		t.Fatalf("a third command: %d %s, want 429", r.status, r.body)
	}
	for _, pid := range []string{"1", "2"} {
		ts.do(t, "POST", "/v1/sessions/"+id+"/commands/"+pid+"/signal", ann, strings.NewReader(`{"signal":"SIGKILL"}`))
		ts.do(t, "GET", "/v1/sessions/"+id+"/commands/"+pid+"/wait", ann, nil)
	}
	r, got := command(t, ts, ann, id, map[string]any{"cmd": `f() { f | f & }; f; sleep 2; echo alive`, "timeout": 20})
	if r.status != http.StatusOK {
		t.Fatalf("fork bomb: %d %s", r.status, r.body)
	}
	t.Logf("fork bomb: exit %v, status %v, stderr %.200q", got["exit_code"], got["status"], got["stderr"])
	if !strings.Contains(got["stderr"].(string), "fork") && !strings.Contains(got["stderr"].(string), "resource") {
		t.Errorf("the fork bomb was not held by the pids limit: %s", r.body)
	}
	r, got = command(t, ts, ann, id, map[string]any{"cmd": `a=x; while :; do a="$a$a"; done`, "timeout": 20})
	if r.status != http.StatusOK || got["status"] != "memory-limit" && got["exit_code"] == 0.0 {
		t.Fatalf("memory hog: %d %s", r.status, r.body)
	}
	t.Logf("memory hog: exit %v, status %v", got["exit_code"], got["status"])
	if r, got = command(t, ts, ann, id, map[string]any{"cmd": "echo still here"}); got["stdout"] != "still here\n" {
		t.Fatalf("after the limits: %d %s", r.status, r.body)
	}
}

// TestSessionCommandHostile: what a command may not do — make a symlink
// in the workspace (which the files API or a context might follow), run a
// program it wrote there, reach the network, read the host's /etc, see
// moat's own processes, or signal another session's command — and an
// overlong or NUL-bearing command line is refused.
func TestSessionCommandHostile(t *testing.T) {
	requireCommands(t)
	t.Parallel()
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	id, other := newSession(t, ts, ann), newSession(t, ts, ann)
	for name, c := range map[string]struct{ cmd, want string }{
		"a symlink in the workspace":    {`ln -s /etc/passwd link 2>/dev/null && echo made || echo refused`, "refused\n"},
		"a FIFO in the workspace":       {`mkfifo p 2>/dev/null && echo made || echo refused`, "refused\n"},
		"a program it wrote":            {`cp /usr/bin/true mine 2>/dev/null; chmod +x mine 2>/dev/null; ./mine 2>/dev/null && echo ran || echo refused`, "refused\n"},
		"the network":                   {`(exec 3<>/dev/tcp/127.0.0.1/` + strings.TrimPrefix(ts.URL, "http://127.0.0.1:") + `) 2>/dev/null && echo connected || echo refused`, "refused\n"},
		"the host's /etc":               {`cat /etc/shadow /etc/passwd 2>/dev/null | head -c 1 | wc -c`, "0\n"},
		"moat's processes":              {`ls /proc | grep -c '^[0-9]'`, ""},
		"a program not allowed":         {`/usr/bin/id 2>/dev/null && echo ran || echo refused`, "refused\n"},
		"the sessions' directory above": {`ls .. 2>/dev/null | grep -c "^s" || true`, "0\n"},
	} {
		r, got := command(t, ts, ann, id, map[string]any{"cmd": c.cmd})
		if r.status != http.StatusOK {
			t.Errorf("%s: %d %s", name, r.status, r.body)
			continue
		}
		if name == "moat's processes" {
			if n, _ := strconv.Atoi(strings.TrimSpace(got["stdout"].(string))); n > 5 {
				t.Errorf("%s: the command sees %d processes", name, n)
			}
			continue
		}
		if got["stdout"] != c.want {
			t.Errorf("%s: %q (stderr %q), want %q", name, got["stdout"], got["stderr"], c.want)
		}
	}
	if r, _ := command(t, ts, ann, other, map[string]any{"cmd": "sleep 30", "background": true}); r.status != http.StatusCreated {
		t.Fatalf("other session's command: %d", r.status)
	}
	if r, got := command(t, ts, ann, id, map[string]any{"cmd": `pkill -TERM sleep 2>/dev/null; kill -TERM -1 2>/dev/null; echo done`}); got["stdout"] != "done\n" {
		t.Fatalf("kill -1: %d %s", r.status, r.body)
	}
	sess, _ := server.SessionOf(ts.Server, "acme", "ann", other)
	if c, err := sess.Command(1); err != nil || !c.Info().Running {
		t.Errorf("another session's command was reached: %v %+v", err, c.Info())
	}
	for name, cmd := range map[string]string{"a NUL": "echo a\x00b", "a 65 KiB command line": strings.Repeat("x", 65<<10+1)} {
		if r, _ := command(t, ts, ann, id, map[string]any{"cmd": cmd}); r.status/100 != 4 {
			t.Errorf("%s: %d, want a refusal", name, r.status)
		}
	}
}

// TestSessionCommandQuota: a command that fills the workspace past
// sessions.disk_quota_bytes is killed (status disk-quota, audited), and
// the session lives on.
func TestSessionCommandQuota(t *testing.T) {
	requireCommands(t)
	t.Parallel()
	ts := start(t, "", func(c *server.Config) { c.Sessions.DiskQuotaBytes = 1 << 20 })
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	began := time.Now()
	r, got := command(t, ts, ann, id, map[string]any{"cmd": "yes 0123456789abcdef > big", "timeout": 30})
	if r.status != http.StatusOK || got["status"] != "disk-quota" || !strings.Contains(got["reason"].(string), "sessions.disk_quota_bytes") {
		t.Fatalf("a command past the quota: %d %s", r.status, r.body)
	}
	t.Logf("killed after %v", time.Since(began))
	if r, got = command(t, ts, ann, id, map[string]any{"cmd": "rm big; echo ok"}); got["stdout"] != "ok\n" {
		t.Fatalf("after: %d %s", r.status, r.body)
	}
}
