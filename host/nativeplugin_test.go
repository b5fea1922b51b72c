package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	pysdk "github.com/moat-sandbox/moat/guests/python"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy"
)

// nativeReady says why a native plugin cannot run confined here ("" when
// it can).
func nativeReady() string { return testenv.NativePython(false) }

// requireNative skips (fails under MOAT_REQUIRE_TOOLS=1) where a native
// plugin cannot run confined.
func requireNative(t *testing.T) {
	t.Helper()
	testenv.Require(t, nativeReady())
}

// pyPlugin copies host/native's test worker into a directory other uids
// can read, with the Python SDK beside it.
func pyPlugin(t *testing.T) *host.Native {
	t.Helper()
	dir, err := os.MkdirTemp("", "moat-native-plugin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("native/testdata/pyworker/main.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.py"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	sdk := filepath.Join(dir, "sdk")
	env, err := pysdk.WriteSDK(sdk)
	if err != nil {
		t.Fatal(err)
	}
	return &host.Native{Dir: dir, Env: env, Source: src, MaxRestarts: 2, RestartWindow: time.Minute}
}

const nativeManifest = `version: 1.0.0
kind: native
command: [python3, main.py]
actions: [{name: echo}, {name: ops}, {name: crash}, {name: probe}, {name: hang, timeout: 1s}]
`

// TestNativePlugin: a native plugin through the gate, as a user runs it:
// its ops are checked against the grants (a denied op refused and
// audited, an allowed mutation audited), its kernel layers hold, a crash
// restarts the worker (audited), and a caller that keeps crashing it is
// backed off, not the plugin given up for everyone.
func TestNativePlugin(t *testing.T) {
	requireNative(t)
	testenv.Timing(t)
	ctx := context.Background()
	h := policyHost(t, `
name: test
on_ungranted: deny_at_call
default:
  capabilities: {kv: true}
  limits: {memory: 128MiB, concurrency: 2, timeout: 10s}
`)
	load := func(t *testing.T, name, caps string) *host.Module {
		t.Helper()
		mf, err := policy.ParseManifest("moat.yaml", []byte("name: "+name+"\n"+nativeManifest+caps))
		if err != nil {
			t.Fatal(err)
		}
		m, err := h.Load(ctx, nil, host.LoadOptions{Manifest: mf, Native: pyPlugin(t), Config: map[string]string{"greeting": "hi"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(ctx) })
		return m
	}
	call := func(m *host.Module, action, input, cid string) (string, error) {
		res, err := m.Invoke(ctx, host.Request{Action: action, Input: []byte(input), Principal: ann, CorrelationID: cid})
		return string(res.Output), err
	}
	codeOf := func(err error) abi.Code { return abi.CodeOf(err) }

	granted := load(t, "native-granted", "capabilities: {kv: true}\n")
	if info := granted.Info(); info.Kind != host.KindNative || !strings.Contains(strings.Join(info.Actions, ","), "ops") {
		t.Fatalf("info %+v", info)
	}
	for i, want := range []string{`{"count":1,"greeting":"hi"}`, `{"count":2,"greeting":"hi"}`} {
		out, err := call(granted, "ops", "", "native-ops")
		if err != nil || out != want {
			t.Fatalf("ops #%d = %q, %v; want %q", i+1, out, err, want)
		}
	}
	if evs := auditEvents(t, h, audit.Filter{CorrelationID: "native-ops", Kind: audit.KindOp, Decision: audit.Allow}); len(evs) != 2 || evs[0].Op != abi.OpKVPut || evs[0].MutationID == "" {
		t.Errorf("allowed kv.put audit: %+v", evs)
	}

	// The same worker without the kv grant: the op is refused by the gate
	// and the refusal audited; the worker reports the code it was given.
	ungranted := load(t, "native-ungranted", "")
	_, err := call(ungranted, "ops", "", "native-denied")
	if codeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "kv is not among the capabilities the module requests") {
		t.Fatalf("ungranted ops: %v, want denied by the manifest rule", err)
	}
	evs := auditEvents(t, h, audit.Filter{CorrelationID: "native-denied", Kind: audit.KindOp, Decision: audit.Deny})
	if len(evs) != 1 || evs[0].Op != abi.OpKVGet || evs[0].Module != "native-ungranted" || evs[0].Rule != "manifest capabilities" || evs[0].Org != ann.Org {
		t.Fatalf("deny audit: %+v", evs)
	}

	// Kernel layers, inside a worker of the plugin.
	for _, tt := range []struct{ probe, want string }{
		{`["read", "/etc/shadow"]`, "ENOENT"},
		{`["write", "main.py"]`, "EROFS"},
		{`["tcp", "127.0.0.1", "5432"]`, "EACCES"},
		{`["udp", "1.1.1.1", "53"]`, "ENETUNREACH"},
	} {
		if out, err := call(granted, "probe", tt.probe, "native-probe"); err != nil || out != tt.want {
			t.Errorf("probe %s = %q, %v; want %s", tt.probe, out, err, tt.want)
		}
	}

	// The action's deadline ends a hung worker, which is replaced.
	start := time.Now()
	if _, err := call(granted, "hang", "", "native-hang"); codeOf(err) != abi.CodeTimeout || time.Since(start) > 5*time.Second {
		t.Fatalf("hang: %v after %s, want timeout after about 1s", err, time.Since(start))
	}
	if out, err := call(granted, "echo", "after the hang", "native-echo"); err != nil || out != "after the hang" {
		t.Fatalf("echo after the hang: %q, %v", out, err)
	}

	// A crash fails its call and restarts the worker (audited).
	if _, err := call(granted, "crash", "", "native-crash"); codeOf(err) != abi.CodeUnavailable || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("crash: %v, want unavailable naming exit status 3", err)
	}
	if out, err := call(granted, "echo", "again", "native-echo"); err != nil || out != "again" {
		t.Fatalf("echo after the crash: %q, %v", out, err)
	}
	worker := func(rule string) []audit.Event {
		var out []audit.Event
		for _, e := range auditEvents(t, h, audit.Filter{Module: "native-granted", Kind: audit.KindWorker}) {
			if e.Rule == rule {
				out = append(out, e)
			}
		}
		return out
	}
	if evs := worker("restarted"); len(evs) < 2 || !strings.Contains(evs[len(evs)-1].Attrs["exit"], "exit status 3") {
		t.Fatalf("restart events: %+v", evs)
	}

	// Issue 27 (10): one caller with no role that keeps crashing the
	// worker is backed off (rate_limited, saying for how long); the
	// plugin is not given up for its organization (MaxRestarts is 2, so
	// the crashes once gave it up until it was uploaded again): another
	// caller's calls go on being served, and no gave_up is recorded.
	eve := policy.Principal{User: "eve", Org: ann.Org}
	callAs := func(who policy.Principal, action, cid string) (string, error) {
		res, err := granted.Invoke(ctx, host.Request{Action: action, Principal: who, CorrelationID: cid})
		return string(res.Output), err
	}
	for i := range 3 {
		if _, err := callAs(eve, "crash", "native-loop"); codeOf(err) != abi.CodeUnavailable || !strings.Contains(err.Error(), "exit status 3") {
			t.Fatalf("eve's crash #%d: %v, want unavailable naming exit status 3", i+1, err)
		}
		if out, err := call(granted, "echo", "still", "native-others"); err != nil || out != "still" {
			t.Fatalf("ann's call after eve's crash #%d: %q, %v; want it served", i+1, out, err)
		}
	}
	start = time.Now()
	_, err = callAs(eve, "crash", "native-backed-off")
	var he *host.Error
	if !errors.As(err, &he) || he.Code != abi.CodeRateLimited || !strings.Contains(he.Reason, "calls from you are refused for") ||
		!strings.Contains(he.Reason, "3 times") || time.Since(start) > time.Second {
		t.Fatalf("eve after 3 crashes: %v after %s; want rate_limited at once, saying for how long", err, time.Since(start))
	}
	if _, err := callAs(eve, "echo", "native-backed-off"); abi.CodeOf(err) != abi.CodeRateLimited {
		t.Fatalf("eve's echo while backed off: %v, want rate_limited", err)
	}
	if out, err := call(granted, "echo", "served", "native-others"); err != nil || out != "served" {
		t.Fatalf("ann's call while eve is backed off: %q, %v", out, err)
	}
	if evs := auditEvents(t, h, audit.Filter{CorrelationID: "native-backed-off"}); len(evs) == 0 {
		t.Errorf("eve's refused calls are not audited")
	}
	time.Sleep(200 * time.Millisecond)
	if gaveUp := worker("gave_up"); len(gaveUp) != 0 {
		t.Fatalf("the plugin was given up by one caller's crashes: %+v", gaveUp)
	}
}

// TestNativePluginFileGrants: a native worker sees its granted
// directories bound at their paths in its own root: a read-only grant
// cannot be written (EROFS: bound read-only), a read-write one can, but
// no symlink or FIFO may be made there (Landlock: EACCES), and a link
// out of a grant finds nothing (the job's root holds only what it is
// granted). The directory's own permissions decide what the worker's uid
// may write: moat never hands an operator's directory over.
func TestNativePluginFileGrants(t *testing.T) {
	t.Parallel()
	requireNative(t)
	// Not under /tmp (nor /var/tmp, /run, /dev/shm): a native worker's
	// are tmpfs of its own, and a grant there is refused (see the end of
	// the test). Beside the package when the checkout is not under one
	// (a clean clone in /tmp is), else under /var/lib (the test is root's).
	parent, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, scratch := range []string{"/tmp", "/var/tmp", "/run", "/dev/shm"} {
		if parent == scratch || strings.HasPrefix(parent, scratch+"/") {
			parent = "/var/lib"
		}
	}
	base, err := os.MkdirTemp(parent, ".moat-native-files-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(base, 0o755))
	for _, d := range []string{"ro", "rw", "outside"} {
		must(os.Mkdir(filepath.Join(base, d), 0o755))
	}
	must(os.Chmod(filepath.Join(base, "rw"), 0o777))
	must(os.WriteFile(filepath.Join(base, "ro/file.txt"), []byte("hello"), 0o644))
	must(os.WriteFile(filepath.Join(base, "outside/secret"), []byte("s3cret"), 0o644))
	must(os.Symlink("../outside/secret", filepath.Join(base, "ro/link_up")))
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	h := policyHost(t, "name: test\ndefault:\n  capabilities:\n    filesystem: ["+ro+", "+rw+":rw]\n  limits: {memory: 128MiB, timeout: 10s}\n")
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: native-files\n"+nativeManifest+"capabilities:\n  filesystem: ["+ro+", "+rw+":rw]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := h.Load(ctx, nil, host.LoadOptions{Manifest: mf, Native: pyPlugin(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	for _, tt := range []struct{ probe, want string }{
		{`["cat", "` + ro + `/file.txt"]`, "ok hello"},
		{`["write", "` + ro + `/file.txt"]`, "EROFS"},
		{`["write", "` + ro + `/new"]`, "EROFS"},
		{`["cat", "` + ro + `/link_up"]`, "ENOENT"},
		{`["cat", "` + base + `/outside/secret"]`, "ENOENT"},
		{`["write", "` + rw + `/native.txt"]`, "ok"},
		{`["mkdir", "` + rw + `/d"]`, "ok"},
		{`["symlink", "/etc/passwd", "` + rw + `/sl"]`, "EACCES"},
		{`["mkfifo", "` + rw + `/fifo"]`, "EACCES"},
	} {
		res, err := m.Invoke(ctx, host.Request{Action: "probe", Input: []byte(tt.probe), Principal: ann, CorrelationID: "native-files"})
		if err != nil {
			t.Fatalf("%s: %v", tt.probe, err)
		}
		if string(res.Output) != tt.want {
			t.Errorf("%s: %q, want %q", tt.probe, res.Output, tt.want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "native.txt")); string(b) != "x" {
		t.Errorf("native.txt holds %q", b)
	}
	if fi, err := os.Stat(rw); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the granted directory changed owner: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ro, "file.txt")); string(b) != "hello" {
		t.Errorf("ro/file.txt holds %q", b)
	}

	tmp := t.TempDir()
	h = policyHost(t, "name: test\ndefault:\n  capabilities:\n    filesystem: ["+tmp+":rw]\n")
	mf, err = policy.ParseManifest("moat.yaml", []byte("name: native-tmp\n"+nativeManifest+"capabilities:\n  filesystem: ["+tmp+":rw]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Load(ctx, nil, host.LoadOptions{Manifest: mf, Native: pyPlugin(t)}); abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "which a native worker gets fresh") {
		t.Errorf("a grant under /tmp: %v", err)
	}
}
