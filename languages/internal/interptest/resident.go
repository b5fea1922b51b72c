package interptest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/hostile"
	"github.com/moat-sandbox/moat/policy"
)

// ResidentScripts are one language's scripts for TestResident, each the
// entry file (File) of a plugin.
type ResidentScripts struct {
	File string
	// Main registers echo (the input back), count (a global counter, one
	// more each call, as a string), fail (MoatError invalid_argument "no
	// thanks"), put (kv.put "k" to the input, then kv.get "k"), spin (a
	// loop that never ends), nap (sleeps a minute, or where the
	// interpreter cannot sleep, calls ops for ever: either way it waits in
	// the host, not in a loop of its own) and balloon (allocates without
	// end).
	Main string
	// TopLevelOp calls kv.get at the top level, then registers echo.
	TopLevelOp string
	// Wrong registers only "other".
	Wrong string
	// Classic reads its input and prints it back, registering nothing.
	Classic string
	// ClassicRefused says the language has no per-call scripts (Ruby,
	// whose interpreter is not a WASI command: languages.InterpreterProvider):
	// Classic's load must fail, naming how to register a handler.
	ClassicRefused string
}

// TestResidentBulkPastDeadline (issue 27): a resident handler whose loop
// does much per iteration (main registers "fill", a fill of 32 MiB in a
// loop that never ends, which the interpreter does with memory.fill)
// ends at its 2 s deadline, the process spends no more CPU on the
// discarded instance once the caller has its answer, and the next call
// is served by a new one ("echo").
func (s *Suite) TestResidentBulkPastDeadline(t *testing.T, file, main string) {
	ctx := context.Background()
	p := policy.Principal{User: "ann", Org: "acme"}
	m := s.LoadScript(t, s.residentManifest(t, s.Language+"-fill", "fill", "echo"), file, main)
	start := time.Now()
	if _, err := m.Invoke(ctx, host.Request{Action: "fill", Principal: p}); abi.CodeOf(err) != abi.CodeTimeout {
		t.Fatalf("fill: %v, want timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second+time.Second {
		t.Errorf("fill ended %s after it started; its deadline is 2s", d)
	}
	cpu0 := hostile.ProcessCPU()
	time.Sleep(500 * time.Millisecond)
	if used := hostile.ProcessCPU() - cpu0; used > 250*time.Millisecond {
		t.Errorf("%s of CPU in the 500 ms after the call ended: the discarded instance runs on", used)
	}
	if res, err := m.Invoke(ctx, host.Request{Action: "echo", Input: []byte("after"), Principal: p}); err != nil || string(res.Output) != "after" {
		t.Fatalf("echo after the fill: %q, %v", res.Output, err)
	}
}

// residentManifest declares a plugin of s's language with actions.
func (s *Suite) residentManifest(t testing.TB, name string, actions ...string) *policy.Manifest {
	t.Helper()
	y := fmt.Sprintf("name: %s\nversion: 0.1.0\nlanguage: %s\nkind: moat\ncapabilities: {kv: true}\nlimits: {memory: 64MiB}\nactions:\n", name, s.Language)
	for _, a := range actions {
		// balloon is about the memory limit, not time: filling 64 MiB
		// through an interpreter's allocator and collector takes seconds
		// on a loaded machine (make test runs two packages at once), and
		// a 2 s deadline met first is the wrong error.
		timeout := "2s"
		if a == "balloon" {
			timeout = "30s"
		}
		y += "  - {name: " + a + ", timeout: " + timeout + "}\n"
	}
	mf, err := policy.ParseManifest("moat.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// TestResident holds what a resident plugin promises, in s's language:
// one instance serves many calls (a global rises from call to call); ops
// run inside a handler under the caller's principal; a MoatError keeps its
// code and the instance survives it; a handler that never returns is
// stopped at its deadline, its instance discarded and the next call served
// by a new one (the global starts again); one that balloons meets its
// memory limit, and its instance is discarded too; ops at the top level are refused (top-level code
// runs for no caller) and fail the load, as does a script that registers
// other actions than its manifest's; a script that registers nothing runs
// once per call, as before, or, in a language with no per-call scripts
// (ClassicRefused), fails its load.
func (s *Suite) TestResident(t *testing.T, sc ResidentScripts) {
	ctx := context.Background()
	p := policy.Principal{User: "ann", Org: "acme"}
	m := s.LoadScript(t, s.residentManifest(t, s.Language+"-resident", "echo", "count", "fail", "put", "spin", "nap", "balloon"), sc.File, sc.Main)
	call := func(action, in string) (string, error) {
		res, err := m.Invoke(ctx, host.Request{Action: action, Input: []byte(in), Principal: p})
		return string(res.Output), err
	}
	counts := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			if out, err := call("count", ""); err != nil || out != fmt.Sprint(i) {
				t.Fatalf("count, call %d on this instance: %q, %v", i, out, err)
			}
		}
	}
	if out, err := call("echo", "héllo\n\x00bytes"); err != nil || out != "héllo\n\x00bytes" {
		t.Fatalf("echo: %q, %v", out, err)
	}
	counts(1, 3)
	if got := m.SnapshotBytes() > 0; got != s.Snapshots {
		t.Fatalf("the instance started from a snapshot: %v, want %v (log: %s)", got, s.Snapshots, s.Log.String())
	}
	if _, err := call("fail", ""); abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "no thanks") {
		t.Fatalf("fail: %v, want invalid_argument with the message", err)
	}
	counts(4, 4) // the instance survived the guest's error
	if out, err := call("put", "v1"); err != nil || out != "v1" {
		t.Fatalf("put: %q, %v", out, err)
	}
	// The ops of a call run on the caller's goroutine, the guest and the
	// caller polling for each other a while before they park (host/
	// resident.go); with one processor they park at once.
	prev := runtime.GOMAXPROCS(1)
	out, err := call("put", "v2")
	runtime.GOMAXPROCS(prev)
	if err != nil || out != "v2" {
		t.Fatalf("put with one processor: %q, %v", out, err)
	}
	start := time.Now()
	if _, err := call("spin", ""); abi.CodeOf(err) != abi.CodeTimeout {
		t.Fatalf("spin: %v, want timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("spin took %s to stop; its deadline is 2s", d)
	}
	counts(1, 1) // a new instance: the spinning one was discarded
	start = time.Now()
	if _, err := call("nap", ""); abi.CodeOf(err) != abi.CodeTimeout || time.Since(start) > 10*time.Second {
		t.Fatalf("nap: %v after %s, want timeout at its 2s deadline", err, time.Since(start))
	}
	counts(1, 1)
	// A caller that gives up: canceled, the instance discarded.
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, err := m.Invoke(cctx, host.Request{Action: "spin", Principal: p}); abi.CodeOf(err) != abi.CodeCanceled {
		t.Fatalf("spin canceled by its caller: %v, want canceled", err)
	}
	counts(1, 1)
	// Whether the interpreter dies at the limit or raises its own
	// out-of-memory error (QuickJS's InternalError, Python's MemoryError)
	// and its handler fails with it, the call is memory_limit and the
	// instance, whose memory the host refused to grow, is discarded: the
	// next call starts a new one (the count starts again).
	if _, err = call("balloon", ""); abi.CodeOf(err) != abi.CodeMemoryLimit {
		t.Fatalf("balloon: %v, want memory_limit", err)
	}
	counts(1, 1)
	if m.IdleInstances() != 1 {
		t.Errorf("%d idle instances after calls one at a time, want 1", m.IdleInstances())
	}

	// Calls at once: each instance serves one call at a time, the pool
	// grows to the calls in flight (the profile allows 4), and every call
	// gets its own input back.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				in := fmt.Sprintf("g%d-%d", g, i)
				out, err := call("echo", in)
				if err == nil && out != in {
					err = fmt.Errorf("echo %q answered %q", in, out)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent echo: %v", err)
	}
	if n := m.IdleInstances(); n < 1 || n > 4 {
		t.Errorf("%d idle instances after 6 callers at once under a concurrency of 4", n)
	}

	load := func(name, script string, actions ...string) error {
		l, err := s.load(t, s.residentManifest(t, name, actions...), sc.File, script)
		if err == nil {
			l.Close(ctx)
		}
		return err
	}
	if err := load(s.Language+"-toplevel", sc.TopLevelOp, "echo"); err == nil || !strings.Contains(err.Error(), "only while an action runs") {
		t.Errorf("an op at the top level: %v, want the load refused naming the rule", err)
	}
	if err := load(s.Language+"-wrong", sc.Wrong, "echo"); abi.CodeOf(err) != abi.CodeBadModule || !strings.Contains(err.Error(), `"echo"`) {
		t.Errorf("a script registering other actions: %v, want bad_module naming echo", err)
	}
	if sc.ClassicRefused != "" {
		if err := load(s.Language+"-classic", sc.Classic, "echo"); err == nil || !strings.Contains(err.Error(), sc.ClassicRefused) {
			t.Errorf("a script with no handlers: %v, want its load refused naming %q", err, sc.ClassicRefused)
		}
		return
	}
	classic := s.LoadScript(t, s.residentManifest(t, s.Language+"-classic", "echo"), sc.File, sc.Classic)
	defer classic.Close(ctx)
	if res, err := classic.Invoke(ctx, host.Request{Action: "echo", Input: []byte("per call"), Principal: p}); err != nil || string(res.Output) != "per call" {
		t.Errorf("a script with no handlers: %q, %v", res.Output, err)
	}
}

// BenchPluginCall measures one warm call of an echo action through
// Module.Invoke: a resident plugin (resident: its handler registered with
// moat.action; one instance serves every call) against the same action as
// a per-call script (per-call: the interpreter starts and runs the script
// for each call). A language with no per-call scripts (Ruby) passes ""
// for perCall.
func (s *Suite) BenchPluginCall(b *testing.B, file, resident, perCall string) {
	p := policy.Principal{User: "bench", Org: "acme"}
	for _, tc := range []struct {
		name, script string
		iso          host.Isolation
	}{{"resident", resident, ""}, {"resident-fresh", resident, host.IsolationFresh}, {"per-call", perCall, ""}} {
		if tc.script == "" {
			continue
		}
		b.Run(tc.name, func(b *testing.B) {
			// resident-fresh: isolation fresh, so every call starts an
			// instance (from the snapshot where the language has one)
			// and runs the top level's state afresh.
			m, err := s.loadIsolated(b, s.residentManifest(b, "echo-"+tc.name, "echo"), tc.iso, file, tc.script)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			req := host.Request{Action: "echo", Input: []byte("hello"), Principal: p}
			n := 0
			for b.Loop() {
				n++
				req.Principal.Org = fmt.Sprintf("bench%d", n/50000) // under the profile's calls per minute
				if res, err := m.Invoke(context.Background(), req); err != nil || string(res.Output) != "hello" {
					b.Fatal(string(res.Output), err)
				}
			}
			if tc.name == "resident" {
				// What one idle instance holds: calls one at a time
				// leave one in the pool.
				b.ReportMetric(float64(m.IdleMemoryBytes())/(1<<20), "idle-MiB")
			}
		})
	}
}

// TestHelloPlugin runs examples/<example> (its moat.yaml and entry file)
// through the interpreter with the device file, twice, as moat run loads
// it: the counter in kv goes up and the log has the guest's record, tagged
// with the module, the action and the caller.
func (s *Suite) TestHelloPlugin(t *testing.T, example, entry string) {
	dir := filepath.Join("..", "..", "examples", example)
	mf, err := policy.LoadManifest(filepath.Join(dir, "moat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(dir, entry))
	if err != nil {
		t.Fatal(err)
	}
	m := s.LoadScript(t, mf, entry, string(script))
	for i, want := range []string{"Hello, World! (call #1)", "Hello, World! (call #2)"} {
		res, err := m.Invoke(context.Background(), host.Request{Action: "greet", Input: []byte("World\n"),
			Principal: policy.Principal{User: "carol", Org: "acme"}})
		if err != nil || string(res.Output) != want {
			t.Fatalf("call %d: %q, %v; want %q", i+1, res.Output, err, want)
		}
	}
	v, found, err := s.Store.KVGet(context.Background(), store.Scope{Org: "acme", Module: mf.Name}, "count")
	if err != nil || !found || string(v) != "2" {
		t.Fatalf("kv row count = %q, %v, %v; want 2", v, found, err)
	}
	var record string
	for _, line := range strings.Split(s.Log.String(), "\n") {
		if strings.Contains(line, `"module":"`+mf.Name+`"`) && strings.Contains(line, `"msg":"greeting"`) {
			record = line
		}
	}
	if !strings.Contains(record, `"guest.name":"World"`) || !strings.Contains(record, `"user":"carol"`) || !strings.Contains(record, `"source":"guest"`) ||
		!strings.Contains(record, `"action":"greet"`) {
		t.Fatalf("no guest log record for %s with the name, the action and the caller; log:\n%s", mf.Name, s.Log.String())
	}
}
