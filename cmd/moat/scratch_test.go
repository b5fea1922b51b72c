package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestExecScratchAndSleep: through the built binary, under its default
// confinement, as a user runs it: a Python program sleeps (CPython's
// absolute-clock sleep was Errno 58) and writes a file by a relative name;
// --files-out copies what it wrote; a flood of files meets the scratch
// directory's file cap as ENOSPC and the summary says so; a pattern
// leading out is a usage error naming the flag; and no scratch directory
// is left in the moat process's temporary directory, after a timeout
// too.
func TestExecScratchAndSleep(t *testing.T) {
	testenv.Require(t, langMissing("python"))
	testenv.Timing(t)
	tmp := t.TempDir() // the moat process's TMPDIR: its scratch directories are made there
	out := t.TempDir()
	run := func(t *testing.T, args ...string) result {
		t.Helper()
		cmd := exec.Command(moatBin, append([]string{"--data", filepath.Join(t.TempDir(), "data")}, args...)...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		return runCmd(t, cmd)
	}
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, r result)
	}{
		{"sleep and write", []string{"exec", "--lang", "python", "-e", `import time; time.sleep(0.05); open("out.txt","w").write("hi"); print(open("out.txt").read())`}, func(t *testing.T, r result) {
			if r.code != 0 || r.stdout != "hi\n" {
				t.Fatalf("%+v", r)
			}
		}},
		{"--files-out copies what it wrote", []string{"exec", "--lang", "python", "--files-out", out, "--files-match", "*.txt", "--files-match", "plots/*",
			"-e", `import os; os.mkdir("plots"); open("plots/a.svg","w").write("<svg/>"); open("r.txt","w").write("result"); open("skip.log","w").write("x")`}, func(t *testing.T, r result) {
			if r.code != 0 {
				t.Fatalf("%+v", r)
			}
			for name, want := range map[string]string{"r.txt": "result", "plots/a.svg": "<svg/>"} {
				if b, err := os.ReadFile(filepath.Join(out, name)); err != nil || string(b) != want {
					t.Errorf("%s: %q %v, want %q", name, b, err, want)
				}
			}
			if _, err := os.Stat(filepath.Join(out, "skip.log")); err == nil {
				t.Error("skip.log was copied, though no pattern names it")
			}
		}},
		{"--json returns files_out", []string{"exec", "--lang", "python", "--json", "--files-out", out, "-e", `open("j.txt","w").write("json")`}, func(t *testing.T, r result) {
			var res struct {
				Status   string
				FilesOut []struct{ Name, Content, Encoding string } `json:"files_out"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 || res.Status != "ok" || len(res.FilesOut) != 1 || res.FilesOut[0].Content != "json" {
				t.Fatalf("%v %+v", err, r)
			}
		}},
		{"a flood of files meets the cap", []string{"exec", "--lang", "python", "-e", `import errno
n = 0
try:
    while True:
        open("f%d" % n, "w").close()
        n += 1
except OSError as e:
    print(errno.errorcode[e.errno], n)`}, func(t *testing.T, r result) {
			if r.code != 0 || r.stdout != "ENOSPC 1024\n" || !strings.Contains(r.stderr, "scratch_full=files") {
				t.Fatalf("%+v", r)
			}
		}},
		{"--disk-mib bounds its bytes", []string{"exec", "--lang", "python", "--disk-mib", "1", "-e", `import errno
try:
    open("big.bin", "wb").write(b"x" * (2 << 20))
except OSError as e:
    print(errno.errorcode[e.errno])`}, func(t *testing.T, r result) {
			if r.code != 0 || r.stdout != "ENOSPC\n" || !strings.Contains(r.stderr, "scratch_full=bytes") {
				t.Fatalf("%+v", r)
			}
		}},
		{"a pattern leading out", []string{"exec", "--lang", "python", "--files-out", out, "--files-match", "../../etc/passwd", "-e", "print(1)"}, func(t *testing.T, r result) {
			if r.code != 2 || !strings.Contains(r.stderr, `--files-match: the pattern "../../etc/passwd" has a ".." element`) {
				t.Fatalf("%+v", r)
			}
		}},
		{"a directory shown at / is refused", []string{"exec", "--lang", "python", "--dir", out + ":/", "-e", "print(1)"}, func(t *testing.T, r result) {
			if r.code != 2 || !strings.Contains(r.stderr, "/ is the run's working directory, its own scratch directory; show the directory elsewhere, e.g. --dir "+out+":/data") {
				t.Fatalf("%+v", r)
			}
		}},
		{"a timeout leaves nothing behind", []string{"exec", "--lang", "python", "--timeout", "1s", "-e", `open("x.txt","w").write("x" * 1000)
import time
time.sleep(3600)`}, func(t *testing.T, r result) {
			if r.code != 124 || !strings.Contains(r.stderr, "status=timeout") {
				t.Fatalf("%+v", r)
			}
		}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, run(t, tt.args...))
			left, _ := filepath.Glob(filepath.Join(tmp, "moat-scratch-*"))
			if len(left) > 0 {
				t.Fatalf("scratch directories left behind: %v", left)
			}
		})
	}
}

// TestServeRunsFilesOut: POST /v1/runs to the built `moat serve`, which
// confines itself once its port is bound: a Python run sleeps, writes in
// its scratch directory and gets the file back through files_out; a
// pattern leading out is a 400 naming the field; nothing is left in the
// server's temporary directory.
func TestServeRunsFilesOut(t *testing.T) {
	testenv.Require(t, langMissing("python"))
	data, tmp := t.TempDir(), t.TempDir()
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	cmd := exec.Command(moatBin, "serve", "--data", data, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	base := startServeCmd(t, cmd, io.Discard)
	post := func(body string) (int, string) {
		r, _ := http.NewRequest("POST", base+"/v1/runs", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	cases := []struct {
		name, body string
		status     int
		want       []string
	}{
		{"a file back", `{"language":"python","files":[{"name":"main.py","content":"import time\ntime.sleep(0.05)\nopen('out.txt','w').write('hi from serve')\nprint('ok')"}],"files_out":["*.txt"]}`,
			200, []string{`"status":"ok"`, `"files_out":[{"name":"out.txt","size":13,"encoding":"utf-8","content":"hi from serve"}]`}},
		{"a pattern leading out", `{"language":"python","files":[{"name":"main.py","content":"print(1)"}],"files_out":["../../etc/passwd"]}`,
			400, []string{`files_out: the pattern \"../../etc/passwd\" has a \"..\" element`}},
		{"a native language", `{"language":"bash","files":[{"name":"main.sh","content":"echo hi > out.txt"}],"files_out":["*.txt"]}`,
			200, []string{`"status":"invalid"`, `files_out is for WASM runs`}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			code, out := post(tt.body)
			if code != tt.status {
				t.Fatalf("%d %s, want %d", code, out, tt.status)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("%s\nwant %s", out, w)
				}
			}
			// The server moves its TMPDIR into a directory of its own
			// (moat-serve-PID-*), where its runs' scratch directories are.
			if serveTmp, _ := filepath.Glob(filepath.Join(tmp, "moat-serve-*")); len(serveTmp) != 1 {
				t.Fatalf("the server's temporary directory: %v, want one in %s", serveTmp, tmp)
			}
			if left, _ := filepath.Glob(filepath.Join(tmp, "moat-serve-*", "moat-scratch-*")); len(left) > 0 {
				t.Fatalf("scratch directories left behind: %v", left)
			}
		})
	}
}

// TestExecScratchSweptAfterKill9: a moat exec killed with SIGKILL cannot
// remove its run's scratch directory; the next moat process to run code
// does, and leaves a live one's alone.
func TestExecScratchSweptAfterKill9(t *testing.T) {
	testenv.Require(t, langMissing("python"))
	tmp := t.TempDir()
	start := func(code string) *exec.Cmd {
		cmd := exec.Command(moatBin, "exec", "--data", filepath.Join(t.TempDir(), "data"), "--lang", "python", "--timeout", "60s", "-e", code)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	waitScratch := func(n int) []string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			dirs, _ := filepath.Glob(filepath.Join(tmp, "moat-scratch-*"))
			if len(dirs) >= n {
				return dirs
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d scratch directories, want %d", len(dirs), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	live := start(`import time; time.sleep(60)`)
	defer func() { live.Process.Kill(); live.Wait() }()
	waitScratch(1)
	killed := start(`open("x.txt", "w").write("x"); import time; time.sleep(60)`)
	waitScratch(2) // its sweep, before its run, left the live one's alone
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "moat-scratch-*")); len(dirs) != 2 {
		t.Fatalf("after the kill: %v, want the killed run's left behind and the live one's", dirs)
	}
	cmd := exec.Command(moatBin, "exec", "--data", filepath.Join(t.TempDir(), "data"), "--lang", "python", "-e", "print(1)")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	if r := runCmd(t, cmd); r.code != 0 {
		t.Fatalf("the next moat exec: %+v", r)
	}
	dirs, _ := filepath.Glob(filepath.Join(tmp, "moat-scratch-*"))
	want := fmt.Sprintf("moat-scratch-job-%d-", live.Process.Pid)
	if len(dirs) != 1 || !strings.HasPrefix(filepath.Base(dirs[0]), want) {
		t.Fatalf("left %v, want only the live run's (%s*)", dirs, want)
	}
}
