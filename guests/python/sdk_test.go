package python_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	python "github.com/moat-sandbox/moat/guests/python"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestSDKConstants: moat.py's copies of the wire constants are abi's.
func TestSDKConstants(t *testing.T) {
	for _, c := range []struct{ re, want string }{
		{`(?m)^ABI_VERSION = (\d+)`, fmt.Sprint(abi.Version)},
		{`(?m)^MAX_LINE = 16 << 20`, ""},
		{`(?m)^_PIPE_FROM_HOST, _PIPE_TO_HOST = (\d+), (\d+)`, fmt.Sprintf("%d %d", abi.PipeFromHostFD, abi.PipeToHostFD)},
		{`_os.environ.get\("MOAT_TRANSPORT"\) == "pipe"`, ""},
		{`(?m)^SCRIPT_ERROR_EXIT = (\d+)`, fmt.Sprint(abi.ScriptErrorExit)},
	} {
		m := regexp.MustCompile(c.re).FindSubmatch(python.SDK)
		if m == nil {
			t.Fatalf("moat.py has no %s", c.re)
		}
		if got := string(bytes.Join(m[1:], []byte(" "))); got != c.want {
			t.Fatalf("moat.py %s: %q, want %q", c.re, got, c.want)
		}
	}
	if abi.MaxPipeLine != 16<<20 || abi.PipeEnv != "MOAT_TRANSPORT=pipe" {
		t.Fatal("abi changed: update moat.py's MAX_LINE and transport check")
	}
}

// TestSDKServeOnce: a script plugin's run (the WASI interpreter's way, here
// on Debian's python3 without the op table): serve() runs $MOAT_ACTION on
// stdin once; a handler's failure is exit status abi.ScriptErrorExit with
// the error, its code kept, as the last line of stdout (abi/script.go),
// and a line on stderr for the log; a handler's print goes to stderr.
func TestSDKServeOnce(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		testenv.Require(t, fmt.Sprintf("%s: %v", py, err))
	}
	dir := t.TempDir()
	if _, err := python.WriteSDK(dir); err != nil {
		t.Fatal(err)
	}
	script := `import moat
@moat.action("greet")
def greet(inp):
    print("greeting", inp.text)
    return "Hello, " + inp.text + " (" + inp.action + ")"
moat.action("json", lambda inp: {"got": inp.json()})
moat.action("bytes", lambda inp: bytes(inp) + b"\n")
@moat.action("invalid")
def invalid(inp):
    raise moat.MoatError("invalid_argument", "not a number")
moat.action("boom", lambda inp: 1 / 0)
moat.action("ops", lambda inp: moat.kv.get("k"))
moat.serve()
`
	if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		action, in, out, stderr string
		exit                    int
	}{
		{"greet", "World", "Hello, World (greet)\n", "greeting World", 0},
		{"json", `[1,2]`, `{"got":[1,2]}` + "\n", "", 0},
		{"bytes", "a\x00b", "a\x00b\n\n", "", 0}, // the host drops the one newline serve() adds
		{"invalid", "", "\n" + `{"code":"invalid_argument","message":"not a number"}` + "\n", "invalid_argument: not a number", abi.ScriptErrorExit},
		{"boom", "", "\n" + `{"code":"guest_error","message":"ZeroDivisionError: division by zero"}` + "\n", "guest_error: ZeroDivisionError: division by zero", abi.ScriptErrorExit},
		{"ops", "", "\n" + `{"code":"unavailable","message":"the op table is not enabled for this run ($MOAT_OPS is unset)"}` + "\n", "unavailable: the op table is not enabled for this run", abi.ScriptErrorExit},
		{"nosuch", "", "\n" + `{"code":"no_such_action","message":"no action 'nosuch' is registered (moat.action); registered: ['boom', 'bytes', 'greet', 'invalid', 'json', 'ops']"}` + "\n", "no_such_action: no action 'nosuch' is registered", abi.ScriptErrorExit},
	} {
		t.Run(tt.action, func(t *testing.T) {
			cmd := exec.Command(py, "-B", "main.py")
			cmd.Dir = dir
			cmd.Env = []string{"PATH=/usr/bin:/bin", "MOAT_ACTION=" + tt.action}
			cmd.Stdin = strings.NewReader(tt.in)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != tt.exit || stdout.String() != tt.out || !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("exit %d (%v), stdout %q, stderr %q; want exit %d, %q, %q", code, err, stdout.String(), stderr.String(), tt.exit, tt.out, tt.stderr)
			}
		})
	}
}

// TestSDKPlainScript: a plain script (no serve()) that lets a MoatError
// escape keeps its code when it runs as a plugin's action ($MOAT_ACTION
// set): the same status and stdout line as a handler's failure, after the
// usual traceback. Run as a program of its own (no $MOAT_ACTION), it
// exits 1 like any Python program; any other exception does either way.
func TestSDKPlainScript(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		testenv.Require(t, fmt.Sprintf("%s: %v (apt-get install python3)", py, err))
	}
	dir := t.TempDir()
	if _, err := python.WriteSDK(dir); err != nil {
		t.Fatal(err)
	}
	script := "import sys, moat\nprint('partial output')\nif sys.stdin.read() == 'moat':\n    raise moat.MoatError('denied', 'kv is not granted')\nraise ValueError('plain')\n"
	if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		action, in, out, stderr string
		exit                    int
	}{
		{"greet", "moat", "partial output\n\n" + `{"code":"denied","message":"kv is not granted"}` + "\n", "moat.MoatError: denied: kv is not granted\ndenied: kv is not granted", abi.ScriptErrorExit},
		{"greet", "other", "partial output\n", "ValueError: plain", 1},
		{"", "moat", "partial output\n", "moat.MoatError: denied: kv is not granted", 1},
	} {
		cmd := exec.Command(py, "-B", "main.py")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "MOAT_ACTION=" + tt.action}
		cmd.Stdin = strings.NewReader(tt.in)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != tt.exit || stdout.String() != tt.out || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("MOAT_ACTION=%q stdin %q: exit %d (%v), stdout %q, stderr %q; want exit %d, %q, %q", tt.action, tt.in, code, err, stdout.String(), stderr.String(), tt.exit, tt.out, tt.stderr)
		}
	}
}

func TestWanted(t *testing.T) {
	for _, tt := range []struct {
		language string
		command  []string
		want     bool
	}{
		{"python", []string{"./worker"}, true},
		{"", []string{"python3", "main.py"}, true},
		{"", []string{"/usr/bin/python3.11", "main.py"}, true},
		{"", []string{"python"}, true},
		{"", []string{"./pythonic"}, false},
		{"", []string{"/bin/sh", "-c", "python3 x.py"}, false},
		{"", nil, false},
	} {
		if got := python.Wanted(tt.language, tt.command); got != tt.want {
			t.Errorf("Wanted(%q, %q) = %v, want %v", tt.language, tt.command, got, tt.want)
		}
	}
}

// TestSDKWire runs testdata/wire_test.py with Debian's python3: moat.py's
// http, media and ai wrappers against a fake transport, their requests,
// replies and refusals (TestSDKTransports and examples/polyglot drive
// them through a real host).
func TestSDKWire(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		testenv.Require(t, fmt.Sprintf("%s: %v (apt-get install python3)", py, err))
	}
	dir := t.TempDir()
	if _, err := python.WriteSDK(dir); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("testdata/wire_test.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wire_test.py"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-B", "wire_test.py")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python3 wire_test.py: %v\n%s", err, out)
	}
}
