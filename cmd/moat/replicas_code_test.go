package main_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// lockedBuffer is a replica's whole log, written by the goroutine copying
// its stderr and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// line returns the first line of the log holding every one of subs.
func (l *lockedBuffer) line(subs ...string) string {
	for _, ln := range strings.Split(l.String(), "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(ln, s)
		}
		if all {
			return ln
		}
	}
	return ""
}

// serveLogged starts moat serve with env added to the test's environment
// and keeps its whole log (startServe keeps only what follows the
// listening line; a replica loads its modules before it). It returns the
// process, its base URL and when it logged that URL (it is ready then:
// modules are loaded before the server listens).
func serveLogged(t *testing.T, log *lockedBuffer, env []string, args ...string) (*os.Process, string, time.Time) {
	t.Helper()
	cmd := exec.Command(moatBin, append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	urlRe := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+)`)
	lines := bufio.NewReader(stderr)
	for {
		ln, err := lines.ReadString('\n')
		log.Write([]byte(ln))
		if m := urlRe.FindStringSubmatch(ln); m != nil {
			ready := time.Now()
			go io.Copy(log, lines)
			return cmd.Process, m[1], ready
		}
		if err != nil {
			t.Fatalf("moat serve did not log its URL:\n%s", log)
		}
	}
}

// TestReplicasSharedCode: replicas on one PostgreSQL database with one
// code key ($MOAT_CODE_KEY), each with a data directory (and so a compile
// cache) of its own, share compiled machine code:
//   - a module uploaded through a is compiled by a, which stores its
//     machine code; b answers an invoke of it within a second of a's 201,
//     loading a's machine code instead of compiling (measured: the time to
//     b's first successful invoke, polling every 20 ms);
//   - b restarted on an empty data directory loads the module from the
//     shared code at start and serves it at once when ready;
//   - a replica without the key compiles for itself and trusts nothing.
func TestReplicasSharedCode(t *testing.T) {
	testenv.Timing(t)
	noSharedCache(t) // each replica compiles or loads into a cache of its own
	testStart := time.Now()
	dbURL := pgtest.Database(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "moat-server.yaml")
	os.WriteFile(cfg, []byte("database_url: "+dbURL+"\n"+
		"limits: {key_rate: 100000, key_burst: 100000, org_rate: 100000, org_burst: 100000}\n"), 0o644)
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--config", cfg, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	if !strings.HasPrefix(key, "moat_sk_") {
		t.Fatalf("keys create: %q", key)
	}
	codeKey := []string{"MOAT_CODE_KEY=" + strings.Repeat("0123456789abcdef", 4)}
	args := func(name string) []string {
		return []string{"--config", cfg, "--data", filepath.Join(dir, name), "--listen", "127.0.0.1:0"}
	}
	var alog, blog lockedBuffer
	var abase, bbase string
	var wg sync.WaitGroup
	wg.Go(func() { _, abase, _ = serveLogged(t, &alog, codeKey, args("a")...) })
	wg.Go(func() { _, bbase, _ = serveLogged(t, &blog, codeKey, args("b")...) })
	wg.Wait()
	if abase == "" || bbase == "" {
		t.FailNow()
	}
	for _, l := range []*lockedBuffer{&alog, &blog} {
		if l.line("compiled code is shared with the other replicas") == "" {
			t.Fatalf("a replica with a code key does not say it shares compiled code:\n%s", l)
		}
	}

	// Uploaded through a, served by b within a second of a's 201.
	up, ct := storeModule(t, "1.0.0")
	sent := time.Now()
	if code, out, err := api(abase, key, "POST", "/v1/modules", up, ct); code != 201 {
		t.Fatalf("upload through a: %d %s %v\n%s", code, out, err, &alog)
	}
	created := time.Now()
	var last string
	d := within(5*time.Second, func() bool {
		code, out, err := api(bbase, key, "POST", "/v1/modules/store/actions/kv", "put seen-by-b yes", "")
		last = fmt.Sprint(code, " ", out, " ", err)
		return code == 200 && out == "ok"
	})
	if d < 0 {
		t.Fatalf("b does not serve the module uploaded through a after 5 s: last answer %s\na:\n%s\nb:\n%s", last, &alog, &blog)
	}
	t.Logf("upload through a took %s (a compiled the module and stored its machine code); b served it %s after a's 201",
		created.Sub(sent).Round(time.Millisecond), d.Round(time.Millisecond))
	compiled := alog.line("module compiled here", "module=store")
	loaded := blog.line("module loaded from shared compiled code", "module=store")
	t.Logf("a: %s", compiled)
	t.Logf("b: %s", loaded)
	if compiled == "" || !strings.Contains(compiled, "shared_bytes=") {
		t.Errorf("a did not log compiling and sharing the module:\n%s", &alog)
	}
	if loaded == "" || blog.line("module compiled here", "module=store") != "" {
		t.Errorf("b did not load a's machine code (it compiled, or said nothing):\n%s", &blog)
	}
	if d > time.Second {
		t.Errorf("b served the module %s after a's 201, over the second replicas have", d.Round(time.Millisecond))
	}

	// b restarted on an empty data directory: it loads the shared code at
	// start and serves the module as soon as it is ready.
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if u, err := st.CodeUsage(context.Background()); err != nil || u.Artifacts < 1 {
		t.Fatalf("the database holds %+v shared artifacts (%v); want the module's", u, err)
	}
	var b2log lockedBuffer
	begin := time.Now()
	_, b2base, ready := serveLogged(t, &b2log, codeKey, args("b-restarted")...)
	var first time.Duration
	if first = within(5*time.Second, func() bool {
		code, out, _ := api(b2base, key, "POST", "/v1/modules/store/actions/kv", "get seen-by-b", "")
		return code == 200 && out == "yes"
	}); first < 0 {
		t.Fatalf("b restarted on an empty data directory does not serve the module:\n%s", &b2log)
	}
	t.Logf("b restarted on an empty data directory: ready %s after start, first invoke served %s after ready",
		ready.Sub(begin).Round(time.Millisecond), first.Round(time.Millisecond))
	t.Logf("b restarted: %s", b2log.line("module loaded from shared compiled code"))
	if b2log.line("module loaded from shared compiled code", "module=store") == "" || b2log.line("module compiled here", "module=store") != "" {
		t.Errorf("b restarted did not load the module from the shared code:\n%s", &b2log)
	}
	if first > 500*time.Millisecond {
		t.Errorf("b restarted served its first invoke %s after ready; want well under a second", first.Round(time.Millisecond))
	}

	// Without the key: a replica warns, compiles for itself, and fetches
	// nothing.
	var clog lockedBuffer
	cproc, cbase, _ := serveLogged(t, &clog, []string{"MOAT_CODE_KEY="}, args("c")...)
	if code, out, err := api(cbase, key, "POST", "/v1/modules/store/actions/kv", "get seen-by-b", ""); code != 200 || out != "yes" {
		t.Fatalf("c without a key: %d %q %v", code, out, err)
	}
	if clog.line("compiled code is not shared between replicas", "MOAT_CODE_KEY") == "" || clog.line("shared compiled code") != "" {
		t.Errorf("c without a key: want the warning naming the knob and no shared code:\n%s", &clog)
	}
	cproc.Signal(syscall.SIGTERM)
	t.Logf("TestReplicasSharedCode wall time %s", time.Since(testStart).Round(time.Millisecond))
}
