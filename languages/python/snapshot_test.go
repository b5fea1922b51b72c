package python_test

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/interptest"
	"github.com/moat-sandbox/moat/languages/python"
	"github.com/moat-sandbox/moat/policy"
)

// snapRun runs a the way the executor does, from the interpreter's
// snapshot when fromSnapshot, else from _start; extra mounts are added
// after the run's own.
type snapRun struct {
	stdout, stderr string
	code           uint32
	fromSnapshot   bool
}

func runSnap(t *testing.T, m *host.Module, a *languages.Artifact, fromSnapshot bool, stdin string, args []string, env map[string]string, extra ...host.Mount) snapRun {
	t.Helper()
	src := interptest.WriteFiles(t, a)
	all := maps.Clone(a.Env)
	maps.Copy(all, env)
	var stdout, stderr bytes.Buffer
	req := host.RunRequest{
		Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		Args: append(append([]string{}, a.Args...), args...), Env: all,
		Principal: policy.Principal{User: "ann", Org: "acme"},
		Mounts:    append(a.RunMounts(src), extra...),
		Scratch:   &host.Scratch{Dir: t.TempDir()}, // as every exec run has (the image's capture had one)
	}
	if fromSnapshot {
		code, ok := python.Language{}.EntryCode(a, args, all)
		if !ok {
			t.Fatal("EntryCode refused the run")
		}
		req.Entry = code
	}
	res, err := m.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("run: %v (stderr %q)", err, stderr.String())
	}
	return snapRun{stdout.String(), stderr.String(), res.ExitCode, res.FromSnapshot}
}

func loadSnap(t *testing.T, a *languages.Artifact) *host.Module {
	t.Helper()
	snap := python.Language{}.Snapshot(a)
	if snap == nil {
		t.Fatal("no snapshot for the artifact")
	}
	m, err := suite.Host.Load(context.Background(), a.WASM, host.LoadOptions{Name: "py-snap", Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A run started from the snapshot is indistinguishable from one started
// cold: the same output, errors and status, byte for byte.
func TestSnapshotMatchesCold(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		stdin string
		args  []string
		env   map[string]string
	}{
		{name: "stdin args env status", files: []string{"main.py", `import os, sys
print("hello", sys.stdin.readline().strip(), sys.argv, os.environ["GREETING"])
print(sorted(k for k in os.environ if not k.startswith("PYTHON")))
sys.exit(3)`}, stdin: "world\n", args: []string{"a", "-b", "ünï"}, env: map[string]string{"GREETING": "hi"}},
		{name: "the main module", files: []string{"main.py", `import sys
print(__name__, __file__, __spec__, __package__, type(__builtins__).__name__, type(__loader__).__name__)
print(sorted(globals()))
print(sys.path[0], sys.flags.dont_write_bytecode, sys.flags.optimize)`}},
		{name: "a sibling package", files: []string{"main.py", "from lib.util import twice\nprint(twice(21))", "lib/__init__.py", "", "lib/util.py", "def twice(n):\n    return 2 * n\n"}},
		{name: "uncaught exception", files: []string{"main.py", "def f():\n    raise ValueError('boom')\n\ndef g():\n    f()\n\ng()\n"}},
		{name: "syntax error", files: []string{"main.py", "def f(:\n"}},
		{name: "exit with a message", files: []string{"main.py", "import sys\nprint('before')\nsys.exit('bad input')\n"}},
		{name: "exit None and atexit", files: []string{"main.py", "import atexit, sys\natexit.register(print, 'bye')\nprint('hi', flush=False)\nsys.exit(None)\n"}},
		{name: "exception then atexit", files: []string{"main.py", "import atexit\natexit.register(print, 'cleanup')\nraise KeyError('k')\n"}},
		{name: "keyboard interrupt status", files: []string{"main.py", "raise SystemExit(256 + 7)\n"}},
		{name: "stderr and stdout", files: []string{"main.py", "import sys\nsys.stderr.write('warn\\n')\nprint('out')\n"}},
	}
	a0 := build(t, "main.py", "print(1)\n")
	m := loadSnap(t, a0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := build(t, tt.files...)
			cold := runSnap(t, m, a, false, tt.stdin, tt.args, tt.env)
			warm := runSnap(t, m, a, true, tt.stdin, tt.args, tt.env)
			if cold.fromSnapshot || !warm.fromSnapshot {
				t.Fatalf("fromSnapshot: cold %v, warm %v", cold.fromSnapshot, warm.fromSnapshot)
			}
			if cold.stdout != warm.stdout || cold.stderr != warm.stderr || cold.code != warm.code {
				t.Errorf("cold and snapshot runs differ:\ncold: %q %q %d\nsnap: %q %q %d", cold.stdout, cold.stderr, cold.code, warm.stdout, warm.stderr, warm.code)
			}
		})
	}
}

// What a run does stays in its instance: the next run from the image sees
// none of it, nor the capture's nonce, and draws other random numbers.
func TestSnapshotRunsAreFresh(t *testing.T) {
	a := build(t, "main.py", `import os, sys, random, builtins
print(getattr(builtins, "left_behind", None), os.environ.get("MOAT_SNAPSHOT"), "_moat_leak" in sys.modules, random.random())
builtins.left_behind = "secret"
sys.modules["_moat_leak"] = sys
os.environ["MOAT_SNAPSHOT"] = "mine"
`)
	m := loadSnap(t, a)
	first := runSnap(t, m, a, true, "", nil, nil)
	second := runSnap(t, m, a, true, "", nil, nil)
	if !strings.HasPrefix(first.stdout, "None None False ") || !strings.HasPrefix(second.stdout, "None None False ") {
		t.Fatalf("a run saw another's state: %q then %q (stderr %q)", first.stdout, second.stdout, second.stderr)
	}
	if first.stdout == second.stdout {
		t.Errorf("two runs drew the same random number: %q", first.stdout)
	}
}

// A run the image cannot stand for starts cold, and still works: a
// directory mounted beyond the capture's, an interpreter variable.
func TestSnapshotFallsBackCold(t *testing.T) {
	a := build(t, "main.py", "import os\nprint(os.listdir('/data'))\n")
	m := loadSnap(t, a)
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runSnap(t, m, a, true, "", nil, nil, host.Mount{HostDir: data, GuestPath: "/data", ReadOnly: true})
	if r.fromSnapshot || r.stdout != "['f.txt']\n" || r.code != 0 {
		t.Errorf("with a mount more: %+v", r)
	}
	if _, ok := (python.Language{}).EntryCode(a, nil, map[string]string{"PYTHONPATH": "/x"}); ok {
		t.Error("a run setting PYTHONPATH was given entry code: CPython reads it only as it starts")
	}
	// An environment too large for the entry's place on the guest's
	// stack: cold, and the variable is there.
	big := build(t, "main.py", "import os\nprint(len(os.environ['BIG']))\n")
	r = runSnap(t, m, big, true, "", nil, map[string]string{"BIG": strings.Repeat("x", 70<<10)})
	if r.fromSnapshot || r.stdout != "71680\n" {
		t.Errorf("with a 70 KiB variable: %+v", r)
	}
}

// A plugin's top level that fakes the park (it can read the nonce before
// moat.py pops it) with a bogus address only spoils its own image: the
// probe fails, the host keeps no image, and the plugin's instances start
// cold and serve.
func TestSnapshotFakeParkFailsProbe(t *testing.T) {
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: fake-park\nversion: 0.1.0\nlanguage: python\nkind: moat\nactions:\n  - {name: echo}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := suite.LoadScript(t, mf, "main.py", `import os, sys, time
import moat
nonce = os.environ.get("MOAT_SNAPSHOT")
if nonce:
    os.write(1, (nonce + " 12345678\n").encode())
    time.time()

@moat.action("echo")
def echo(inp):
    return bytes(inp)
`)
	defer m.Close(context.Background())
	res, err := m.Invoke(context.Background(), host.Request{Action: "echo", Input: []byte("still here"), Principal: policy.Principal{User: "ann", Org: "acme"}})
	if err != nil || string(res.Output) != "still here" {
		t.Fatalf("echo: %q, %v", res.Output, err)
	}
	if n := m.SnapshotBytes(); n != 0 {
		t.Errorf("the host kept an image the plugin's top level parked itself (%d bytes)", n)
	}
	if !strings.Contains(suite.Log.String(), "failed its probe") {
		t.Errorf("the failed probe is not in the log")
	}
}
