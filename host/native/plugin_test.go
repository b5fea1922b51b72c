package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	pysdk "github.com/moat-sandbox/moat/guests/python"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// The plugin tests run real python3 workers on moat.py, confined by every
// native layer, as a native plugin runs in production.

// needPluginTools skips (or, under MOAT_REQUIRE_TOOLS, fails) without
// root (the layers under test: uid per worker, cgroups) or without
// Debian's python3 and numpy.
func needPluginTools(t testing.TB) {
	t.Helper()
	testenv.Root(t, "needs root: each worker's own uid and cgroup are what is tested (CI runs as root)")
	if _, err := os.Stat(python); err != nil {
		testenv.Require(t, fmt.Sprintf("%s is not installed (%v): apt-get install python3", python, err))
	}
	if out, err := exec.Command(python, "-c", "import numpy").CombinedOutput(); err != nil {
		testenv.Require(t, fmt.Sprintf("python3-numpy is not installed (%v: %s): apt-get install python3-numpy (make tools)", err, out))
	}
}

// pluginDir makes a directory every job uid may read, holding the worker
// script (copied from src) and moat.py, and returns it with the worker's
// environment.
func pluginDir(t testing.TB, src string) (string, []string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "moat-plugin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.py"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := pysdk.WriteSDK(filepath.Join(dir, "sdk"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, append([]string{"PATH=" + DefaultPath, "LANG=C.UTF-8"}, env...)
}

// recordingOps runs the real op table on a real store, records every call,
// and denies the ops in deny as the policy gate would (the gate itself is
// the host's, tested end to end there).
type recordingOps struct {
	env  *ops.Env
	deny map[string]bool
	mu   sync.Mutex
	log  []string
}

func newRecordingOps(t testing.TB) *recordingOps {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	env := &ops.Env{Module: "pyworker", Store: st, Logger: slog.New(slog.DiscardHandler), Config: map[string]string{"greeting": "Hi"}}
	env.Begin(context.Background(), "ops", policy.Principal{User: "ann", Org: "acme"}, "c1")
	return &recordingOps{env: env, deny: map[string]bool{abi.OpKVDelete: true}}
}

func (d *recordingOps) Dispatch(ctx context.Context, op, req []byte) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = append(d.log, string(op))
	if d.deny[string(op)] {
		return nil, abi.Errorf(abi.CodeDenied, "op %s: not granted to this module", op)
	}
	o, ok := ops.Lookup(op)
	if !ok {
		return nil, abi.Errorf(abi.CodeUnknownOp, "no op %q", op)
	}
	d.env.Context = ctx
	return ops.Dispatch(d.env, allowAll{}, o, req)
}

func (d *recordingOps) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := slices.Clone(d.log)
	d.log = nil
	return c
}

// events collects a plugin's worker events and denials.
type events struct {
	mu      sync.Mutex
	evs     []WorkerEvent
	denials []string
}

func (e *events) event(ev WorkerEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) denial(d Denial, corr string) {
	e.mu.Lock()
	e.denials = append(e.denials, corr+" "+d.Rule)
	e.mu.Unlock()
}

func (e *events) kinds() []WorkerEventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var k []WorkerEventKind
	for _, ev := range e.evs {
		k = append(k, ev.Kind)
	}
	return k
}

func (e *events) find(kind WorkerEventKind) (WorkerEvent, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Kind == kind {
			return ev, true
		}
	}
	return WorkerEvent{}, false
}

func (e *events) denied() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.denials)
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pyWorker is the test worker (testdata/pyworker/main.py).
func pyWorker(t testing.TB) string {
	return filepath.Join(testwasm.RepoRoot(t), "host", "native", "testdata", "pyworker", "main.py")
}

// startPlugin starts a confined python plugin on src with base's limits.
func startPlugin(t testing.TB, src string, size int, base Spec, tune func(*WorkerSpec)) (*PluginPool, *events, string) {
	t.Helper()
	needPluginTools(t)
	dir, env := pluginDir(t, src)
	base.ReadOnly = append(base.ReadOnly, dir)
	base.WorkDir = dir
	ev := &events{}
	ws := WorkerSpec{Name: "pyworker", Command: []string{"python3", "main.py"}, Env: env, Launch: ConfinedLauncher(base),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnEvent: ev.event, OnDenial: ev.denial}
	if tune != nil {
		tune(&ws)
	}
	start := time.Now()
	p, err := StartPlugin(context.Background(), PluginSpec{Worker: ws, Size: size})
	if err != nil {
		t.Fatalf("StartPlugin: %v", err)
	}
	t.Logf("first confined python worker ready in %s", time.Since(start))
	t.Cleanup(func() { p.Close() })
	return p, ev, dir
}

func invoke(t testing.TB, p *PluginPool, d transport.Dispatcher, action, input string, timeout time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := p.Invoke(ctx, d, action, []byte(input), "corr-"+action)
	return string(out), err
}

type whoami struct {
	UID           int    `json:"uid"`
	Home          string `json:"home"`
	Cwd           string `json:"cwd"`
	Transport     string `json:"transport"`
	CorrelationID string `json:"correlation_id"`
}

func ask(t testing.TB, p *PluginPool, d transport.Dispatcher) whoami {
	t.Helper()
	out, err := invoke(t, p, d, "whoami", "", 5*time.Second)
	if err != nil {
		t.Fatalf("whoami: %v", err)
	}
	var w whoami
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		t.Fatalf("whoami %q: %v", out, err)
	}
	return w
}

// TestPluginPython: a confined python3 worker on moat.py says which actions
// it serves, round-trips op calls through the dispatcher, and reports each
// failure with its own code, serving on after it.
func TestPluginPython(t *testing.T) {
	p, ev, dir := startPlugin(t, pyWorker(t), 2, Spec{MemoryBytes: 256 << 20}, nil)
	d := newRecordingOps(t)
	want := []string{"echo", "whoami", "ops", "call", "denied", "invalid", "boom", "crash", "sleep", "hang", "spin", "probe", "hog", "numpy"}
	if got := p.Actions(); !slices.Equal(got, want) {
		t.Fatalf("actions %q, want %q", got, want)
	}
	if k := ev.kinds(); !slices.Equal(k, []WorkerEventKind{EventStarted}) {
		t.Fatalf("events %v, want [started]", k)
	}
	me := ask(t, p, d)
	if !isJobUID(me.UID) || me.Cwd != dir || !strings.HasPrefix(me.Home, JobsDir()+"/job-") || me.Transport != "pipe" || me.CorrelationID != "corr-whoami" {
		t.Fatalf("the worker: %+v; want a job uid, cwd %s, HOME its job dir, MOAT_TRANSPORT=pipe, the correlation id", me, dir)
	}
	// Bytes, all 256 values, both ways.
	var all strings.Builder
	for i := range 256 {
		all.WriteByte(byte(i))
	}
	if out, err := invoke(t, p, d, "echo", all.String(), 5*time.Second); err != nil || out != all.String() {
		t.Fatalf("echo: %q %v", out, err)
	}
	for n := 1; n <= 2; n++ {
		out, err := invoke(t, p, d, "ops", "", 5*time.Second)
		if want := fmt.Sprintf(`{"count":%d,"greeting":"Hi"}`, n); err != nil || out != want {
			t.Fatalf("ops: %q %v, want %s", out, err, want)
		}
		// moat.config asks once per key and keeps it: the configuration
		// is fixed while the module is loaded.
		want := []string{abi.OpLogWrite, abi.OpKVGet, abi.OpKVPut, abi.OpConfigGet}
		if n > 1 {
			want = want[:3]
		}
		if c := d.calls(); !slices.Equal(c, want) {
			t.Fatalf("op calls %q, want %q", c, want)
		}
	}
	if out, err := invoke(t, p, d, "numpy", "1000", 5*time.Second); err != nil || out != "499500" {
		t.Fatalf("numpy: %q %v", out, err)
	}
	tests := []struct {
		action, code, msg string
	}{
		{"denied", "denied", "op kv.delete: not granted to this module"}, // an op's refusal keeps its code through the handler
		{"invalid", "invalid_argument", "the input must be a number"},
		{"boom", "guest_error", "ValueError: deliberate"},
		{"nosuch", "no_such_action", "no action 'nosuch' is registered"},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			_, err := invoke(t, p, d, tt.action, "", 5*time.Second)
			var ae *abi.Error
			if !errors.As(err, &ae) || string(ae.Code) != tt.code || !strings.Contains(ae.Message, tt.msg) {
				t.Fatalf("%s: %v; want %s naming %q", tt.action, err, tt.code, tt.msg)
			}
			// The worker serves on: no restart.
			if k := ev.kinds(); !slices.Equal(k, []WorkerEventKind{EventStarted}) {
				t.Fatalf("events %v after an action's error; want no restart", k)
			}
			if got := ask(t, p, d); got.UID != me.UID {
				t.Fatalf("after %s the call went to uid %d, not the worker %d", tt.action, got.UID, me.UID)
			}
		})
	}
}

// TestPluginConcurrency: N concurrent calls run on N workers, each a
// confined job of its own (uid, cgroup, mount and network namespaces, job
// dir); call N+1 waits for a free worker.
func TestPluginConcurrency(t *testing.T) {
	testenv.Timing(t)
	const size = 3
	p, ev, _ := startPlugin(t, pyWorker(t), size, Spec{MemoryBytes: 128 << 20}, nil)
	d := newRecordingOps(t)
	type answer struct {
		uid  string
		took time.Duration
		err  error
	}
	answers := make(chan answer, size+1)
	start := time.Now()
	for range size + 1 {
		go func() {
			out, err := invoke(t, p, d, "sleep", "1", 20*time.Second)
			answers <- answer{out, time.Since(start), err}
		}()
	}
	var uids []string
	var late int
	for range size + 1 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("sleep: %v", a.err)
		}
		uids = append(uids, a.uid)
		if a.took > 1900*time.Millisecond {
			late++
		}
	}
	if distinct := len(slices.Compact(slices.Sorted(slices.Values(uids)))); distinct != size {
		t.Fatalf("%d calls ran as uids %v: want %d distinct workers", size+1, uids, size)
	}
	if late != 1 {
		t.Fatalf("%d calls took two sleeps; want exactly the one past Size to wait", late)
	}
	if running, busy := p.Workers(); running != size || busy != 0 {
		t.Fatalf("workers: %d running, %d busy; want %d, 0", running, busy, size)
	}
	if n := len(ev.kinds()); n != size {
		t.Fatalf("events %v; want %d started", ev.kinds(), size)
	}
	// Each worker a job of its own.
	hostNS := map[string]string{}
	for _, ns := range []string{"net", "mnt", "pid"} {
		hostNS[ns], _ = os.Readlink("/proc/self/ns/" + ns)
	}
	seen := map[string]string{}
	p.mu.Lock()
	all := slices.Clone(p.all)
	p.mu.Unlock()
	for _, s := range all {
		pid := s.Pid()
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		_, after, ok := strings.Cut(string(cg), "/moat/job-")
		if !ok {
			t.Fatalf("worker %d is in no job cgroup:\n%s", pid, cg)
		}
		job, _, _ := strings.Cut(after, "\n")
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		_, uidLine, _ := strings.Cut(string(status), "Uid:\t")
		uid, _, _ := strings.Cut(uidLine, "\t")
		keys := map[string]string{"cgroup": job, "uid": uid}
		for ns, host := range hostNS {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
			if err != nil || l == host {
				t.Fatalf("worker %d shares the host's %s namespace (%s, %v)", pid, ns, l, err)
			}
			keys[ns] = l
		}
		for k, v := range keys {
			if other, dup := seen[k+"="+v]; dup {
				t.Fatalf("workers %s and %d share %s %s", other, pid, k, v)
			}
			seen[k+"="+v] = strconv.Itoa(pid)
		}
	}
	// With every worker busy, a call whose deadline comes first fails
	// with timeout, naming the bound.
	var wg sync.WaitGroup
	for range size {
		wg.Add(1)
		go func() { defer wg.Done(); invoke(t, p, d, "sleep", "1", 5*time.Second) }()
	}
	time.Sleep(300 * time.Millisecond)
	_, err := invoke(t, p, d, "echo", "x", 200*time.Millisecond)
	var we *WorkerError
	if !errors.As(err, &we) || we.Code != abi.CodeTimeout || !strings.Contains(err.Error(), "all 3 workers were busy") {
		t.Fatalf("a call with every worker busy: %v; want timeout naming the 3 workers", err)
	}
	wg.Wait()
}

// TestPluginCrashAndHang: a worker that crashes mid-call fails that call
// (unavailable, naming the exit) and is restarted for the next; one that
// hangs past the deadline is killed (timeout, and a denial for the audit)
// and restarted; the OOM killer's kill is memory_limit; nothing of a dead
// worker stays.
func TestPluginCrashAndHang(t *testing.T) {
	testenv.Timing(t)
	p, ev, _ := startPlugin(t, pyWorker(t), 1, Spec{MemoryBytes: 128 << 20}, func(ws *WorkerSpec) { ws.MaxRestarts = 10 })
	d := newRecordingOps(t)
	tests := []struct {
		action   string
		deadline time.Duration
		code     abi.Code
		msg      string
		exit     string // the restarted event's Exit
		denial   string
	}{
		{"crash", 5 * time.Second, abi.CodeUnavailable, "the worker exited during the call (exit status 3)", "exit status 3", ""},
		{"hang", 500 * time.Millisecond, abi.CodeTimeout, "did not answer within the invocation's deadline", "killed by signal killed", "corr-hang supervisor: invocation deadline"},
		{"hog", 20 * time.Second, abi.CodeMemoryLimit, "OOM-killed at its memory limit", "OOM-killed at its memory limit", "corr-hog kernel: cgroup memory limit"},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			before := ask(t, p, d)
			p.mu.Lock()
			old := p.all[0].Pid()
			p.mu.Unlock()
			n := len(ev.kinds())
			start := time.Now()
			_, err := invoke(t, p, d, tt.action, "", tt.deadline)
			took := time.Since(start)
			var we *WorkerError
			if !errors.As(err, &we) || we.Code != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("%s: %v; want %s naming %q", tt.action, err, tt.code, tt.msg)
			}
			if tt.action == "hang" && took > tt.deadline+2*time.Second {
				t.Fatalf("the hung call returned after %s; its deadline was %s", took, tt.deadline)
			}
			after := ask(t, p, d) // waits for the restart
			if after.UID == 0 || after.Home == before.Home {
				t.Fatalf("the next call ran in %+v; want a fresh worker (new job dir)", after)
			}
			eventually(t, "the restarted event", func() bool { return len(ev.kinds()) > n })
			ev.mu.Lock()
			re := ev.evs[n]
			ev.mu.Unlock()
			if re.Kind != EventRestarted || !strings.HasPrefix(re.Exit, tt.exit) || re.Pid == 0 {
				t.Fatalf("event %+v; want restarted with exit %q", re, tt.exit)
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", old)); err == nil {
				t.Fatalf("the old worker %d is still alive", old)
			}
			if _, err := os.Stat(before.Home); err == nil {
				t.Fatalf("the old worker's job dir %s is left behind", before.Home)
			}
			if tt.denial != "" {
				eventually(t, "the denial "+tt.denial, func() bool { return slices.Contains(ev.denied(), tt.denial) })
			}
		})
	}
}

// TestPluginGivesUp: a plugin that keeps crashing is given up on after
// MaxRestarts, reported once through OnEvent; every later call fails at
// once with ErrGaveUp and the way to recover, and no worker is left.
func TestPluginGivesUp(t *testing.T) {
	testenv.Timing(t)
	p, ev, _ := startPlugin(t, pyWorker(t), 2, Spec{MemoryBytes: 128 << 20}, func(ws *WorkerSpec) { ws.MaxRestarts = 2 })
	d := newRecordingOps(t)
	var err error
	eventually(t, "the plugin to give up", func() bool {
		_, err = invoke(t, p, d, "crash", "", 10*time.Second)
		return errors.Is(err, ErrGaveUp)
	})
	var we *WorkerError
	if !errors.As(err, &we) || we.Code != abi.CodeUnavailable ||
		!strings.Contains(err.Error(), "2 restarts within 1m0s, the last because the worker exited during the call (exit status 3)") ||
		!strings.Contains(err.Error(), "fix the worker, then reload the module") {
		t.Fatalf("%v; want unavailable wrapping ErrGaveUp, naming the crash loop and the recovery", err)
	}
	var gaveUp int
	for _, k := range ev.kinds() {
		if k == EventGaveUp {
			gaveUp++
		}
	}
	if gaveUp != 1 {
		t.Fatalf("events %v; want one gave_up", ev.kinds())
	}
	g, _ := ev.find(EventGaveUp)
	if !strings.Contains(g.Reason, "not restarting it again") || g.Restarts != 2 {
		t.Fatalf("gave_up event %+v", g)
	}
	start := time.Now()
	if _, err := invoke(t, p, d, "echo", "x", 5*time.Second); !errors.Is(err, ErrGaveUp) || time.Since(start) > time.Second {
		t.Fatalf("a call after the give-up: %v after %s; want ErrGaveUp at once", err, time.Since(start))
	}
	p.mu.Lock()
	all := slices.Clone(p.all)
	p.mu.Unlock()
	for _, s := range all {
		eventually(t, "the given-up plugin's workers to stop", func() bool { return s.Pid() == 0 })
	}
}

// TestPluginHostile: a worker's own code meets the native layers: no host
// file, no network, no write outside its job dir, a bounded process count.
func TestPluginHostile(t *testing.T) {
	p, _, dir := startPlugin(t, pyWorker(t), 1, Spec{MemoryBytes: 128 << 20, Pids: 32}, nil)
	d := newRecordingOps(t)
	secret := filepath.Join(t.TempDir(), "secret")
	os.Chmod(filepath.Dir(secret), 0o755)
	if err := os.WriteFile(secret, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	tests := []struct {
		probe []string
		want  string
	}{
		{[]string{"read", "/etc/shadow"}, "ENOENT"}, // not in the job's root at all
		{[]string{"read", secret}, "ENOENT"},
		{[]string{"read", "/proc/1/environ"}, "EACCES"},          // Landlock: /proc is not the job's
		{[]string{"tcp", "127.0.0.1", port}, "EACCES"},           // Landlock's TCP rule, before the empty netns
		{[]string{"udp", "127.0.0.1", port}, "ENETUNREACH"},      // the empty network namespace
		{[]string{"write", "/usr/lib/moat-probe"}, "EROFS"},      // system dirs are read-only binds
		{[]string{"write", filepath.Join(dir, "x.py")}, "EROFS"}, // its own sources too
		{[]string{"write", "/etc/moat-probe"}, "EROFS"},
		{[]string{"write", "./x"}, "EROFS"}, // the working dir is the sources
		{[]string{"write", "/tmp/x"}, "ok"}, // its own scratch tmpfs
		{[]string{"forkbomb"}, "EAGAIN after "},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.probe, "-"), func(t *testing.T) {
			b, _ := json.Marshal(tt.probe)
			out, err := invoke(t, p, d, "probe", string(b), 10*time.Second)
			if err != nil || !strings.HasPrefix(out, tt.want) {
				t.Fatalf("probe %q: %q %v; want %q", tt.probe, out, err, tt.want)
			}
			if tt.probe[0] == "forkbomb" {
				n, _ := strconv.Atoi(strings.TrimPrefix(out, "EAGAIN after "))
				if n <= 0 || n >= 32 {
					t.Fatalf("forked %d children under a pids limit of 32", n)
				}
			}
		})
	}
	select {
	case c := <-acceptOnce(ln):
		t.Fatalf("the worker reached the host's listener: %v", c)
	default:
	}
}

func acceptOnce(ln net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Millisecond))
		if c, err := ln.Accept(); err == nil {
			ch <- c
		}
	}()
	time.Sleep(50 * time.Millisecond)
	return ch
}

// TestPluginNoLifetimeCPULimit: a worker's CPU seconds add up over its
// calls; no RLIMIT_CPU sized for one run may kill it after a few.
func TestPluginNoLifetimeCPULimit(t *testing.T) {
	testenv.Slow(t, "seconds of CPU by design")
	testenv.Timing(t)
	// Timeout 1s made RLIMIT_CPU 3s for the worker's whole life.
	p, ev, _ := startPlugin(t, pyWorker(t), 1, Spec{MemoryBytes: 128 << 20, Timeout: time.Second}, nil)
	d := newRecordingOps(t)
	for i := range 5 {
		if _, err := invoke(t, p, d, "spin", "0.9", 10*time.Second); err != nil {
			t.Fatalf("spin %d: %v", i, err)
		}
	}
	if k := ev.kinds(); !slices.Equal(k, []WorkerEventKind{EventStarted}) {
		t.Fatalf("events %v: the worker was restarted", k)
	}
}

// TestPluginBadWorkers: a plugin whose worker cannot start, or says ready
// wrongly, fails StartPlugin with the reason and the bound it broke.
func TestPluginBadWorkers(t *testing.T) {
	needPluginTools(t)
	tests := []struct {
		name, script string
		command      []string
		want         string
	}{
		{"no such command", "", []string{"no-such-python"}, "no-such-python: not found in PATH"},
		{"no such script", "", []string{"python3", "missing.py"}, "it exited before saying ready (exit status 2); its stderr ends: python3: can't open file"},
		{"no actions", "import moat\nmoat.serve()\n", nil, "moat.serve(): no actions registered"},
		{"a million actions", "import json, os\nos.write(4, json.dumps({'type': 'ready', 'version': 1, 'actions': ['a%d' % i for i in range(10**6)]}).encode() + b'\\n')\nimport time; time.sleep(60)\n",
			nil, "over 65536 bytes (transport.MaxReadyLine, before its ready message)"},
		{"a bad action name", "import moat\nmoat.action('greet\\nFAKE', lambda i: 1)\nmoat.serve()\n", nil, "byte 0x0a at 5 is not allowed"},
		{"silent", "import time\ntime.sleep(60)\n", nil, "it did not say ready within 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "main.py")
			os.WriteFile(src, []byte(tt.script), 0o644)
			dir, env := pluginDir(t, src)
			cmd := tt.command
			if cmd == nil {
				cmd = []string{"python3", "main.py"}
			}
			// Only the silent worker waits its start timeout out; the others
			// are refused before it, given the seconds a loaded machine's
			// python3 takes to write a million actions.
			start := 30 * time.Second
			if tt.name == "silent" {
				start = 2 * time.Second
			}
			_, err := StartPlugin(context.Background(), PluginSpec{Size: 2, Worker: WorkerSpec{Name: "bad", Command: cmd, Env: env,
				StartTimeout: start, Logger: slog.New(slog.DiscardHandler),
				Launch: ConfinedLauncher(Spec{ReadOnly: []string{dir}, WorkDir: dir})}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("StartPlugin: %v; want %q", err, tt.want)
			}
		})
	}
}

// TestPluginPythonExample runs examples/hello-python-native as moat would:
// numpy in a confined worker, kv and log through the ops, invalid input
// refused with invalid_argument.
func TestPluginPythonExample(t *testing.T) {
	src := filepath.Join(testwasm.RepoRoot(t), "examples", "hello-python-native", "main.py")
	p, _, _ := startPlugin(t, src, 2, Spec{MemoryBytes: 256 << 20}, nil)
	d := newRecordingOps(t)
	if got := p.Actions(); !slices.Equal(got, []string{"greet", "stats"}) {
		t.Fatalf("actions %q", got)
	}
	for n := 1; n <= 2; n++ {
		out, err := invoke(t, p, d, "greet", "World", 5*time.Second)
		if want := fmt.Sprintf("Hi, World! (call #%d, numpy ", n); err != nil || !strings.HasPrefix(out, want) {
			t.Fatalf("greet: %q %v; want %q...", out, err, want)
		}
	}
	out, err := invoke(t, p, d, "stats", "[1, 2, 3, 4]", 5*time.Second)
	if err != nil || out != `{"n":4,"mean":2.5,"std":1.118033988749895,"median":2.5}` {
		t.Fatalf("stats: %q %v", out, err)
	}
	for _, in := range []string{`"abc"`, `[]`, `[[1],[2]]`, `not json`} {
		_, err := invoke(t, p, d, "stats", in, 5*time.Second)
		var ae *abi.Error
		if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
			t.Fatalf("stats %s: %v; want invalid_argument", in, err)
		}
	}
	if c := d.calls(); !slices.Contains(c, abi.OpLogWrite) || !slices.Contains(c, abi.OpKVPut) {
		t.Fatalf("op calls %q", c)
	}
}

// BenchmarkPluginInvoke: one echo through a confined python worker on the
// pipe (the per-call round trip), and one call making one op (kv.get).
func BenchmarkPluginInvoke(b *testing.B) {
	p, _, _ := startPlugin(b, pyWorker(b), 1, Spec{MemoryBytes: 128 << 20}, nil)
	d := newRecordingOps(b)
	ctx := context.Background()
	for _, bb := range []struct{ name, action string }{{"echo", "echo"}, {"op-kv", "ops"}} {
		b.Run(bb.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := p.Invoke(ctx, d, bb.action, []byte("x"), "c"); err != nil {
					b.Fatal(err)
				}
				d.calls()
			}
		})
	}
}

// BenchmarkPluginStart: the time to a confined python3 worker's ready.
func BenchmarkPluginStart(b *testing.B) {
	needPluginTools(b)
	dir, env := pluginDir(b, pyWorker(b))
	for b.Loop() {
		p, err := StartPlugin(context.Background(), PluginSpec{Worker: WorkerSpec{Name: "bench", Command: []string{"python3", "main.py"}, Env: env,
			Logger: slog.New(slog.DiscardHandler), Launch: ConfinedLauncher(Spec{ReadOnly: []string{dir}, WorkDir: dir})}})
		if err != nil {
			b.Fatal(err)
		}
		p.Close()
	}
}

// allowAll is a policy gate that allows every op: these tests hold the
// pool and the pipe; the host's gate is tested end to end in package host.
type allowAll struct{}

func (allowAll) AllowOp(*ops.Env, *ops.Op, string) error { return nil }

// TestPluginSlots: the workers of every pool sharing WorkerSlots are
// bounded together: a plugin whose first worker finds no slot does not
// start, one at the bound waits for its own workers instead of growing,
// and slots come back when a pool closes or gives up.
func TestPluginSlots(t *testing.T) {
	needPluginTools(t)
	dir, env := pluginDir(t, pyWorker(t))
	slots := NewWorkerSlots(2)
	start := func(size int, tune func(*WorkerSpec)) (*PluginPool, error) {
		ws := WorkerSpec{Name: "pyworker", Command: []string{"python3", "main.py"}, Env: env,
			Launch: ConfinedLauncher(Spec{ReadOnly: []string{dir}, WorkDir: dir}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if tune != nil {
			tune(&ws)
		}
		p, err := StartPlugin(context.Background(), PluginSpec{Worker: ws, Size: size, Slots: slots})
		if err == nil {
			t.Cleanup(func() { p.Close() })
		}
		return p, err
	}
	d := newRecordingOps(t)
	a, err := start(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := start(1, func(ws *WorkerSpec) { ws.MaxRestarts, ws.RestartWindow = 1, time.Minute })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := start(1, nil); !errors.Is(err, ErrNoWorkerSlots) {
		t.Fatalf("a third plugin with 2 slots taken: %v, want ErrNoWorkerSlots", err)
	}
	// a may have 2 workers but only 1 slot is free for it: none. Two
	// calls at once share its one worker.
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := invoke(t, a, d, "sleep", "0.3", 5*time.Second); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if running, _ := a.Workers(); running != 1 {
		t.Fatalf("a runs %d workers with no free slot, want 1", running)
	}
	// b crash-loops and is given up: its slot is free for a.
	for range 3 {
		invoke(t, b, d, "crash", "", 5*time.Second)
	}
	eventually(t, "b given up and its slot back", func() bool { return len(slots.free) == 1 })
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := invoke(t, a, d, "sleep", "0.5", 5*time.Second); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if running, _ := a.Workers(); running != 2 {
		t.Fatalf("a runs %d workers with a slot free, want 2", running)
	}
	a.Close()
	b.Close()
	if n := len(slots.free); n != 2 {
		t.Fatalf("%d slots free after both pools closed, want 2", n)
	}
}

// TestWorkerSlotsWithin: a share takes a slot of its own and one of its
// parent's, gives both back, and cannot take more than its own bound even
// when the parent has room, nor more than the parent has.
func TestWorkerSlotsWithin(t *testing.T) {
	testenv.Timing(t)
	host := NewWorkerSlots(3)
	a, b := host.Within(2), host.Within(2)
	for i, tt := range []struct {
		s    *WorkerSlots
		want bool
	}{{a, true}, {a, true}, {a, false}, {b, true}, {b, false}} {
		if got := tt.s.take(); got != tt.want {
			t.Fatalf("take #%d = %v, want %v", i, got, tt.want)
		}
	}
	if len(host.free) != 0 || len(a.free) != 0 || len(b.free) != 1 {
		t.Fatalf("free: host %d, a %d, b %d", len(host.free), len(a.free), len(b.free))
	}
	a.give(1)
	if !b.take() || len(host.free) != 0 || len(a.free) != 1 {
		t.Fatalf("after a gave one, b took it: host %d, a %d, b %d", len(host.free), len(a.free), len(b.free))
	}
	a.give(1)
	b.give(2)
	if len(host.free) != 3 || len(a.free) != 2 || len(b.free) != 2 {
		t.Fatalf("all given back: host %d, a %d, b %d", len(host.free), len(a.free), len(b.free))
	}
	if got := a.limits(); got != "at most 2 at once for this share, at most 3 at once in all" {
		t.Fatalf("limits: %q", got)
	}
}

// TestPluginRevivesAfterCooldown: a given-up plugin is not given up for
// good (issue 27, 10): calls fail at once with ErrGaveUp for
// GiveUpCooldown, then the next call starts a worker again and is served,
// with a revived event; the caller with the most crashes is backed off
// meanwhile (rate_limited), the others are not.
func TestPluginRevivesAfterCooldown(t *testing.T) {
	p, ev, _ := startPlugin(t, pyWorker(t), 1, Spec{MemoryBytes: 128 << 20}, func(ws *WorkerSpec) {
		ws.MaxRestarts, ws.GiveUpCooldown = 2, 2*time.Second
	})
	d := newRecordingOps(t)
	var err error
	eventually(t, "the plugin to give up", func() bool {
		_, err = invoke(t, p, d, "crash", "", 10*time.Second) // no caller: the plugin's own count
		return errors.Is(err, ErrGaveUp)
	})
	if _, err := invoke(t, p, d, "echo", "x", 5*time.Second); !errors.Is(err, ErrGaveUp) {
		t.Fatalf("a call within the cool-down: %v; want ErrGaveUp", err)
	}
	time.Sleep(2200 * time.Millisecond)
	out, err := invoke(t, p, d, "echo", "back", 20*time.Second)
	if err != nil || out != "back" {
		t.Fatalf("a call after the cool-down: %q, %v; want it served by a new worker", out, err)
	}
	if _, ok := ev.find(EventRevived); !ok {
		t.Errorf("events %v; want revived", ev.kinds())
	}

	// Per caller: eve's crashes back eve off, not the plugin.
	as := func(who, action, input string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := p.InvokeAs(ctx, who, d, action, []byte(input), "corr-"+who)
		return string(out), err
	}
	for i := range callerStrikesMax {
		if _, err := as("acme/eve", "crash", ""); err == nil || errors.Is(err, ErrGaveUp) {
			t.Fatalf("eve's crash #%d: %v; want the worker's crash", i+1, err)
		}
	}
	var we *WorkerError
	if _, err := as("acme/eve", "echo", "x"); !errors.As(err, &we) || we.Code != abi.CodeRateLimited {
		t.Fatalf("eve backed off: %v; want rate_limited", err)
	}
	if out, err := as("acme/ann", "echo", "ann"); err != nil || out != "ann" {
		t.Fatalf("ann while eve is backed off: %q, %v", out, err)
	}
	if p.loop.err() != nil {
		t.Fatalf("the plugin gave up on one caller's crashes: %v", p.loop.err())
	}
}
