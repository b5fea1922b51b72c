package all_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
)

// hostileFixture is what the hostile corpus attacks: secrets and doors on
// the host that no job is granted. Each is reachable by file permissions
// alone (world-readable, world-writable), so only the sandbox stands
// between a job and it.
type hostileFixture struct {
	// canary is the content of every planted secret, also set in the
	// test process's environment: it must never appear in any output.
	canary string
	// secretDir is a world-readable directory outside every grant, as
	// moat's data dir or another tenant's files would be; it holds
	// secret.h, secret.rs, secret.ts, secret.txt and a Go module.
	secretDir string
	// buildDir looks like another job's build dir (os.TempDir()/moat-build-*).
	buildDir string
	// rootSecret is a world-readable file planted in /root ("" when the
	// test is not root and cannot plant it).
	rootSecret string
	// writable is a world-writable directory: a job writing into it
	// would leave a file on the host.
	writable string
	// unixSock is a world-writable pathname socket in writable; abstract
	// is the name of an abstract one; tcp a loopback listener. connects
	// counts what reached any of them.
	unixSock, abstract, tcp string
	connects                atomic.Int32
	// hostLines are lines of the host's /etc/passwd and /etc/shadow that
	// must never appear in any output.
	hostLines []string
}

func newHostileFixture(t *testing.T) *hostileFixture {
	t.Helper()
	fx := &hostileFixture{canary: fmt.Sprintf("moat-hostile-canary-%d", time.Now().UnixNano())}
	t.Setenv("MOAT_HOSTILE_CANARY", fx.canary)

	fx.secretDir = worldDir(t, t.TempDir(), 0o755)
	plant(t, fx.secretDir, "secret.h", "static const char leaked[] = \""+fx.canary+"\";\n")
	plant(t, fx.secretDir, "secret.rs", "pub const LEAKED: &str = \""+fx.canary+"\";\n")
	plant(t, fx.secretDir, "secret.ts", "export const leaked: string = \""+fx.canary+"\";\n")
	plant(t, fx.secretDir, "secret.txt", fx.canary+"\n")
	mod := worldDir(t, filepath.Join(fx.secretDir, "mod"), 0o755)
	plant(t, mod, "go.mod", "module secret\n\ngo 1.22\n")
	plant(t, mod, "secret.go", "package secret\n\nconst S = \""+fx.canary+"\"\n")

	b, err := os.MkdirTemp("", "moat-build-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(b) })
	fx.buildDir = worldDir(t, b, 0o755)
	plant(t, fx.buildDir, "secret.h", "static const char leaked[] = \""+fx.canary+"\";\n")

	if os.Geteuid() == 0 {
		f, err := os.CreateTemp("/root", ".moat-hostile-*.h")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(f.Name()) })
		fmt.Fprintf(f, "static const char leaked[] = \"%s\";\n", fx.canary)
		f.Close()
		if err := os.Chmod(f.Name(), 0o644); err != nil {
			t.Fatal(err)
		}
		fx.rootSecret = f.Name()
	}

	fx.writable = worldDir(t, t.TempDir(), 0o777)
	// The socket path must fit sun_path (108 bytes): t.TempDir() may not.
	sd, err := os.MkdirTemp("", "moat-hostile-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sd) })
	worldDir(t, sd, 0o777)
	fx.unixSock = filepath.Join(sd, "s")
	fx.abstract = fmt.Sprintf("moat-hostile-%d", os.Getpid())
	for _, l := range []struct{ network, addr string }{{"unix", fx.unixSock}, {"unix", "@" + fx.abstract}, {"tcp", "127.0.0.1:0"}} {
		ln, err := net.Listen(l.network, l.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		if l.network == "tcp" {
			fx.tcp = ln.Addr().String()
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fx.connects.Add(1)
				c.Close()
			}
		}()
	}
	if err := os.Chmod(fx.unixSock, 0o777); err != nil {
		t.Fatal(err)
	}

	for _, f := range []string{"/etc/passwd", "/etc/shadow"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // not root: /etc/shadow is unreadable to us as well
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "root:") {
				fx.hostLines = append(fx.hostLines, l)
			}
		}
	}
	return fx
}

func worldDir(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func plant(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostileCase is one attack and the exact refusal it must meet.
type hostileCase struct {
	name   string
	lang   string
	files  []languages.File // the first is the entry
	limits languages.ExecLimits
	// root: the row needs root (a cgroup limit, a file planted in /root).
	root bool

	status languages.Status
	exit   int
	signal string
	// rule: the violation an invalid submission gets.
	rule string
	// compile, stderr and message: each string must appear in
	// CompileOutput, Stderr and Message respectively.
	compile, stderr, message []string
	// stdout is the exact standard output, unless floodMax is set: then
	// the output must be all floodUnit repeated and at most floodMax bytes.
	stdout    string
	floodUnit string
	floodMax  int
	// anyStdout: check judges the output.
	anyStdout bool
	// maxRun bounds the run time (a limit that must hold promptly).
	maxRun time.Duration
	// audit: deny rules the audit trail must hold for the run.
	audit []string
	// check runs after the generic checks (the host side of an attack).
	check func(t *testing.T, res *languages.ExecResult)
}

func file(name, content string) []languages.File {
	return []languages.File{{Name: name, Content: []byte(content)}}
}

// hostileCases is the corpus. Every row is an attack a hostile submitter
// would try; none may read a secret, leave a file or a connection on the
// host, or outlast its limit.
func hostileCases(fx *hostileFixture) []hostileCase {
	secretH := filepath.Join(fx.secretDir, "secret.h")
	noFile := func(p string) func(*testing.T, *languages.ExecResult) {
		return func(t *testing.T, _ *languages.ExecResult) {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("the job wrote %s on the host", p)
			}
		}
	}
	noConnect := func(t *testing.T, _ *languages.ExecResult) {
		// Give an accept that raced the result a moment to count.
		time.Sleep(20 * time.Millisecond)
		if n := fx.connects.Load(); n != 0 {
			t.Errorf("%d connection(s) reached a host listener", n)
		}
	}
	cMain := "int main(void){ return leaked[0] == 0; }\n"
	printLeakC := "#include <stdio.h>\nint main(void){ puts(leaked); return 0; }\n"
	goMain := func(embed string) string {
		return "package main\n\nimport _ \"embed\"\n\n//go:embed " + embed + "\nvar s string\n\nfunc main() { print(s) }\n"
	}
	tmpName := fmt.Sprintf("moat-hostile-%d", time.Now().UnixNano())
	return []hostileCase{
		// Compilers reading host files at compile time. The compiler runs
		// in a root of its own: what its grants do not name is absent.
		{name: "c include /etc/shadow", lang: "c", files: file("main.c", "#include \"/etc/shadow\"\n"+cMain),
			status: languages.StatusCompileError, compile: []string{"src/main.c:1:10: fatal error: '/etc/shadow' file not found"}},
		{name: "c include /proc/self/environ", lang: "c", files: file("main.c", "#include \"/proc/self/environ\"\n"+cMain),
			status: languages.StatusCompileError, compile: []string{"src/main.c:1:10: fatal error: cannot open file '/proc/self/environ': Permission denied"}},
		{name: "c include a file in /root", lang: "c", root: true, files: file("main.c", "#include \""+fx.rootSecret+"\"\n"+printLeakC),
			status: languages.StatusCompileError, compile: []string{"src/main.c:1:10: fatal error: '" + fx.rootSecret + "' file not found"}},
		{name: "c include /root/.bashrc", lang: "c", files: file("main.c", "#include \"/root/.bashrc\"\n"+cMain),
			status: languages.StatusCompileError, compile: []string{"src/main.c:1:10: fatal error: '/root/.bashrc' file not found"}},
		{name: "c incbin /etc/passwd in inline asm", lang: "c",
			files:  file("main.c", "__asm__(\".section .data.leak,\\\"\\\",@\\n.incbin \\\"/etc/passwd\\\"\\n\");\n"+"int main(void){ return 0; }\n"),
			status: languages.StatusCompileError, compile: []string{"<inline asm>:2:9: error: Could not find incbin file '/etc/passwd'"}},
		{name: "c include climbing out of the source dir", lang: "c", files: file("main.c", "#include \"../../../../../../../etc/passwd\"\n"+cMain),
			status: languages.StatusCompileError, compile: []string{"fatal error: '../../../../../../../etc/passwd' file not found"}},
		{name: "c include a world-readable file outside the grants", lang: "c", files: file("main.c", "#include \""+secretH+"\"\n"+printLeakC),
			status: languages.StatusCompileError, compile: []string{"src/main.c:1:10: fatal error: '" + secretH + "' file not found"}},
		{name: "c include another job's build dir", lang: "c", files: file("main.c", "#include \""+filepath.Join(fx.buildDir, "secret.h")+"\"\n"+printLeakC),
			status: languages.StatusCompileError, compile: []string{"fatal error: '" + filepath.Join(fx.buildDir, "secret.h") + "' file not found"}},
		{name: "c runtime fopen /etc/passwd", lang: "c",
			files:  file("main.c", "#include <stdio.h>\n#include <errno.h>\n#include <string.h>\nint main(void){ FILE *f = fopen(\"/etc/passwd\", \"r\"); if (!f) { printf(\"%d %s\\n\", errno, strerror(errno)); return 1; } return 0; }\n"),
			status: languages.StatusRuntimeError, exit: 1, stdout: "44 No such file or directory\n"}, // "/" is the run's own empty scratch directory
		{name: "cpp include /etc/shadow", lang: "cpp", files: file("main.cpp", "#include \"/etc/shadow\"\nint main(){}\n"),
			status: languages.StatusCompileError, compile: []string{"src/main.cpp:1:10: fatal error: '/etc/shadow' file not found"}},
		{name: "cpp include a world-readable file outside the grants", lang: "cpp", files: file("main.cpp", "#include <cstdio>\n#include \""+secretH+"\"\nint main(){ std::puts(leaked); }\n"),
			status: languages.StatusCompileError, compile: []string{"src/main.cpp:2:10: fatal error: '" + secretH + "' file not found"}},
		{name: "rust include_str /etc/shadow", lang: "rust", files: file("main.rs", "const S: &str = include_str!(\"/etc/shadow\");\nfn main() { println!(\"{}\", S); }\n"),
			status: languages.StatusCompileError, compile: []string{"error: couldn't read /etc/shadow: No such file or directory (os error 2)"}},
		{name: "rust include_bytes /proc/self/environ", lang: "rust",
			files:  file("main.rs", "const S: &[u8] = include_bytes!(\"/proc/self/environ\");\nfn main() { use std::io::Write; std::io::stdout().write_all(S).unwrap(); }\n"),
			status: languages.StatusCompileError, compile: []string{"error: couldn't read /proc/self/environ: Permission denied (os error 13)"}},
		{name: "rust include_str a world-readable file outside the grants", lang: "rust",
			files:  file("main.rs", "const S: &str = include_str!(\""+filepath.Join(fx.secretDir, "secret.txt")+"\");\nfn main() { print!(\"{}\", S); }\n"),
			status: languages.StatusCompileError, compile: []string{"error: couldn't read " + filepath.Join(fx.secretDir, "secret.txt") + ": No such file or directory (os error 2)"}},
		{name: "rust mod with a #[path] outside the grants", lang: "rust",
			files:  file("main.rs", "#[path = \""+filepath.Join(fx.secretDir, "secret.rs")+"\"]\nmod secret;\nfn main() { println!(\"{}\", secret::LEAKED); }\n"),
			status: languages.StatusCompileError, compile: []string{"error: couldn't read " + filepath.Join(fx.secretDir, "secret.rs") + ": No such file or directory (os error 2)"}},
		// go:embed refuses absolute and ".." patterns itself.
		{name: "go embed an absolute path", lang: "go", files: file("main.go", goMain("/etc/passwd")),
			status: languages.StatusCompileError, compile: []string{"main.go:5:12: pattern /etc/passwd: invalid pattern syntax"}},
		{name: "go embed a dot-dot path", lang: "go", files: file("main.go", goMain("../../../etc/passwd")),
			status: languages.StatusCompileError, compile: []string{"main.go:5:12: pattern ../../../etc/passwd: invalid pattern syntax"}},
		// A submission is names and bytes (languages.File): it cannot carry
		// a symlink. A file whose content is a path is written as a
		// regular file, so go:embed embeds those bytes, not the target.
		{name: "go embed a would-be symlink to /etc/passwd", lang: "go",
			files:  []languages.File{{Name: "main.go", Content: []byte(goMain("link"))}, {Name: "link", Content: []byte("/etc/passwd")}},
			status: languages.StatusOK, stderr: []string{"/etc/passwd"}},
		// Nor can it make a name both a file and a directory, which would
		// fail moat's own write of the sources instead of the submission.
		{name: "a name that is both a file and a directory", lang: "c",
			files:  []languages.File{{Name: "main.c", Content: []byte(cMain)}, {Name: "main.c/x.h", Content: []byte("x")}},
			status: languages.StatusInvalid, rule: languages.RulePath, message: []string{"main.c/x.h", "main.c is also a file"}},
		{name: "go module replaced by a directory outside the grants", lang: "go",
			files: []languages.File{
				{Name: "main.go", Content: []byte("package main\n\nimport \"secret\"\n\nfunc main() { print(secret.S) }\n")},
				{Name: "go.mod", Content: []byte("module main\n\ngo 1.22\n\nrequire secret v0.0.0\n\nreplace secret => " + filepath.Join(fx.secretDir, "mod") + "\n")},
			},
			status: languages.StatusCompileError, compile: []string{"main.go:3:8: secret@v0.0.0: replacement directory " + filepath.Join(fx.secretDir, "mod") + " does not exist"}},
		{name: "assemblyscript import by absolute path", lang: "assemblyscript",
			files:  file("main.ts", "import { leaked } from \""+filepath.Join(fx.secretDir, "secret")+"\";\nconsole.log(leaked);\n"),
			status: languages.StatusCompileError, compile: []string{"ERROR TS6054: File '~lib/" + filepath.Join(fx.secretDir, "secret") + ".ts' not found."}},
		{name: "assemblyscript import climbing out of the project", lang: "assemblyscript",
			files:  file("main.ts", "import { leaked } from \"../../../../../../.."+filepath.Join(fx.secretDir, "secret")+"\";\nconsole.log(leaked);\n"),
			status: languages.StatusCompileError, compile: []string{"' not found.", filepath.Join(fx.secretDir, "secret") + ".ts"}},

		// Interpreted languages on WASM: the interpreter sees its WASI
		// mounts (/src, read-only; CPython's stdlib) and its own scratch
		// directory at "/", empty, and nothing else.
		{name: "javascript std.loadFile /etc/shadow", lang: "javascript", files: file("main.js", "print(String(std.loadFile(\"/etc/shadow\")));\n"),
			status: languages.StatusOK, stdout: "null\n"},
		{name: "javascript std.open /etc/passwd", lang: "javascript",
			files:  file("main.js", "const err = {};\nconst f = std.open(\"/etc/passwd\", \"r\", err);\nprint(String(f), err.errno, std.strerror(err.errno));\n"),
			status: languages.StatusOK, stdout: "null 44 No such file or directory\n"},
		{name: "javascript os.open /etc/passwd", lang: "javascript",
			files:  file("main.js", "const fd = os.open(\"/etc/passwd\", os.O_RDONLY);\nprint(fd, std.strerror(-fd));\n"),
			status: languages.StatusOK, stdout: "-44 No such file or directory\n"},
		{name: "javascript os.readdir /", lang: "javascript", files: file("main.js", "print(JSON.stringify(os.readdir(\"/\")));\n"),
			status: languages.StatusOK, stdout: "[[\".\",\"..\"],0]\n"},
		{name: "javascript has no exec, socket or popen", lang: "javascript", files: file("main.js", "print(typeof os.exec, typeof os.socket, typeof std.popen);\n"),
			status: languages.StatusOK, stdout: "undefined undefined undefined\n"},
		{name: "typescript std.loadFile /etc/shadow", lang: "typescript", files: file("main.ts", "const s: string | null = std.loadFile(\"/etc/shadow\");\nprint(String(s));\n"),
			status: languages.StatusOK, stdout: "null\n"},
		{name: "python open /etc/passwd", lang: "python", files: file("main.py", "print(open('/etc/passwd').read())\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"FileNotFoundError: [Errno 44] No such file or directory: '/etc/passwd'"}},
		{name: "python os.listdir /", lang: "python", files: file("main.py", "import os\nprint(os.listdir('/'))\n"),
			status: languages.StatusOK, stdout: "[]\n"},
		{name: "python import ctypes", lang: "python", files: file("main.py", "import ctypes\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"ModuleNotFoundError: No module named 'ctypes'"}},
		{name: "python socket.socket", lang: "python", files: file("main.py", "import socket\nsocket.socket()\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"OSError: [Errno 58] Not supported"}},
		{name: "python subprocess", lang: "python", files: file("main.py", "import subprocess\nsubprocess.run(['id'])\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"OSError: [Errno 58] wasi does not support processes."}},
		{name: "python write its read-only sources", lang: "python", files: file("main.py", "open('/src/main.py', 'w').write('x')\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"OSError: [Errno 52] Function not implemented: '/src/main.py'"}},
		{name: "ruby File.read /etc/passwd", lang: "ruby", files: file("main.rb", "puts File.read('/etc/passwd')\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"No such file or directory @ rb_sysopen - /etc/passwd (Errno::ENOENT)"}},
		{name: "ruby Dir.entries /", lang: "ruby", files: file("main.rb", "p Dir.entries('/')\n"),
			status: languages.StatusOK, stdout: "[\".\", \"..\"]\n"},
		{name: "ruby backticks", lang: "ruby", files: file("main.rb", "puts \x60id\x60\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"`() function is unimplemented on this machine (NotImplementedError)"}},
		{name: "ruby system", lang: "ruby", files: file("main.rb", "p system('echo ran')\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"system() function is unimplemented on this machine (NotImplementedError)"}},
		{name: "ruby Process.spawn", lang: "ruby", files: file("main.rb", "p Process.spawn('echo ran')\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"spawn() function is unimplemented on this machine (NotImplementedError)"}},
		{name: "ruby IO.popen", lang: "ruby", files: file("main.rb", "p IO.popen('echo ran').read\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"popen() function is unimplemented on this machine (NotImplementedError)"}},
		{name: "ruby require socket", lang: "ruby", files: file("main.rb", "require 'socket'\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"cannot load such file -- socket (LoadError)"}},

		// Native languages: their own root, uid, empty network namespace,
		// noexec writable dirs, cgroup limits.
		{name: "bash cat /etc/shadow", lang: "bash", files: file("main.sh", "cat /etc/shadow\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"cat: /etc/shadow: No such file or directory"}},
		{name: "bash cat a file in /root", lang: "bash", root: true, files: file("main.sh", "cat "+fx.rootSecret+"\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"cat: " + fx.rootSecret + ": No such file or directory"}},
		{name: "bash cat a world-readable file outside the grants", lang: "bash", files: file("main.sh", "cat "+filepath.Join(fx.secretDir, "secret.txt")+"\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"cat: " + filepath.Join(fx.secretDir, "secret.txt") + ": No such file or directory"}},
		{name: "bash write a world-writable host dir", lang: "bash", files: file("main.sh", "echo pwned > "+filepath.Join(fx.writable, "bash")+"\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"main.sh: line 1: " + filepath.Join(fx.writable, "bash") + ": No such file or directory"},
			check: noFile(filepath.Join(fx.writable, "bash"))},
		{name: "bash write /usr", lang: "bash", files: file("main.sh", "echo pwned > /usr/"+tmpName+"\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"main.sh: line 1: /usr/" + tmpName + ": Read-only file system"},
			check: noFile("/usr/" + tmpName)},
		{name: "bash write /tmp lands in its own tmpfs", lang: "bash", files: file("main.sh", "echo pwned > /tmp/"+tmpName+" && cat /tmp/"+tmpName+"\n"),
			status: languages.StatusOK, stdout: "pwned\n", check: noFile(filepath.Join(os.TempDir(), tmpName))},
		{name: "bash curl", lang: "bash", files: file("main.sh", "curl -sS http://1.1.1.1/\n"),
			status: languages.StatusRuntimeError, exit: 126, stderr: []string{"main.sh: line 1: /usr/bin/curl: Permission denied"}},
		{name: "bash /dev/tcp to the internet", lang: "bash", files: file("main.sh", "echo hi > /dev/tcp/1.1.1.1/80\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"main.sh: connect: Permission denied", "main.sh: line 1: /dev/tcp/1.1.1.1/80: Permission denied"}},
		{name: "bash /dev/tcp to a host loopback listener", lang: "bash", files: file("main.sh", "echo hi > /dev/tcp/"+strings.Replace(fx.tcp, ":", "/", 1)+"\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"main.sh: connect: Permission denied"}, check: noConnect},
		{name: "bash exec a binary not allowed", lang: "bash", files: file("main.sh", "/usr/bin/id\n"),
			status: languages.StatusRuntimeError, exit: 126, stderr: []string{"main.sh: line 1: /usr/bin/id: Permission denied"}},
		{name: "bash run a script it wrote in the job dir", lang: "bash",
			files:  file("main.sh", "cp /usr/bin/true x.sh\nprintf '#!/usr/bin/bash\\necho ran\\n' > x.sh\nls -l x.sh | cut -c1-10\n./x.sh\n"),
			status: languages.StatusRuntimeError, exit: 126, stdout: "-rwxr-xr-x\n", stderr: []string{"main.sh: line 4: ./x.sh: Permission denied"}},
		{name: "bash run a copied binary from the job dir, /tmp and /dev/shm", lang: "bash",
			files:  file("main.sh", "cp /usr/bin/cat mycat; ./mycat /dev/null\ncp /usr/bin/cat /tmp/c; /tmp/c /dev/null\ncp /usr/bin/cat /dev/shm/c; /dev/shm/c /dev/null\n"),
			status: languages.StatusRuntimeError, exit: 126,
			stderr: []string{"line 1: ./mycat: Permission denied", "line 2: /tmp/c: Permission denied", "line 3: /dev/shm/c: Permission denied"}},
		{name: "bash fork bomb", lang: "bash", root: true, files: file("main.sh", ":(){ :|:& };:\nSECONDS=0; while ((SECONDS < 5)); do :; done\n"),
			limits: languages.ExecLimits{Timeout: time.Second},
			status: languages.StatusTimeout, exit: -1, signal: "killed", message: []string{"wall-clock limit 1s passed", "(it hit the process limit of 64)"},
			stderr: []string{"fork: retry: Resource temporarily unavailable"}, maxRun: 2 * time.Second,
			audit: []string{"kernel: cgroup pids limit", "kernel: wall-clock timeout"}},
		{name: "bash output flood", lang: "bash", files: file("main.sh", "yes flood\n"), limits: languages.ExecLimits{MaxOutputBytes: 4096},
			status: languages.StatusOutputLimit, exit: -1, signal: "killed", message: []string{"the output passed 4096 bytes; the rest was dropped"},
			floodUnit: "flood\n", floodMax: 4096, maxRun: 2 * time.Second},
		{name: "bash sleep past the deadline", lang: "bash", files: file("main.sh", "sleep 30\n"), limits: languages.ExecLimits{Timeout: 500 * time.Millisecond},
			status: languages.StatusTimeout, exit: -1, signal: "killed", message: []string{"wall-clock limit 500ms passed"},
			maxRun: 1500 * time.Millisecond, audit: []string{"kernel: wall-clock timeout"}},
		{name: "python3-native open /etc/shadow", lang: "python3-native", files: file("main.py", "print(open('/etc/shadow').read())\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"FileNotFoundError: [Errno 2] No such file or directory: '/etc/shadow'"}},
		{name: "python3-native list /", lang: "python3-native", files: file("main.py", "import os\nprint(os.listdir('/'))\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"PermissionError: [Errno 13] Permission denied: '/'"}},
		{name: "python3-native write a world-writable host dir", lang: "python3-native", files: file("main.py", "open('"+filepath.Join(fx.writable, "py")+"', 'w').write('pwned')\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"FileNotFoundError: [Errno 2] No such file or directory: '" + filepath.Join(fx.writable, "py") + "'"},
			check: noFile(filepath.Join(fx.writable, "py"))},
		{name: "python3-native exec a binary not allowed", lang: "python3-native", files: file("main.py", "import os\nos.execv('/usr/bin/id', ['id'])\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"PermissionError: [Errno 13] Permission denied"}},
		{name: "python3-native run a script it wrote", lang: "python3-native",
			files:  file("main.py", "import os, subprocess\nopen('x', 'w').write('#!/usr/bin/python3\\nprint(1)\\n')\nos.chmod('x', 0o755)\nsubprocess.run(['./x'])\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"PermissionError: [Errno 13] Permission denied: './x'"}},
		{name: "python3-native tcp egress", lang: "python3-native", files: file("main.py", "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"PermissionError: [Errno 13] Permission denied"}},
		{name: "python3-native tcp to a host loopback listener", lang: "python3-native",
			files:  file("main.py", "import socket\nsocket.create_connection(('127.0.0.1', "+fx.tcp[strings.LastIndex(fx.tcp, ":")+1:]+"), timeout=2)\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"PermissionError: [Errno 13] Permission denied"}, check: noConnect},
		{name: "python3-native world-writable unix socket on the host", lang: "python3-native",
			files:  file("main.py", "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('"+fx.unixSock+"')\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"FileNotFoundError: [Errno 2] No such file or directory"}, check: noConnect},
		{name: "python3-native abstract unix socket on the host", lang: "python3-native",
			files:  file("main.py", "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0"+fx.abstract+"')\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"ConnectionRefusedError: [Errno 111] Connection refused"}, check: noConnect},
		{name: "python3-native runs as a uid of its own", lang: "python3-native", root: true, files: file("main.py", "import os\nprint(os.getuid(), os.getgid())\n"),
			status: languages.StatusOK, anyStdout: true, check: func(t *testing.T, res *languages.ExecResult) {
				var uid, gid int
				if _, err := fmt.Sscan(string(res.Stdout), &uid, &gid); err != nil {
					t.Fatalf("stdout %q: %v", res.Stdout, err)
				}
				if uid < native.UIDBase || uid >= native.UIDBase+native.UIDCount || gid != uid {
					t.Errorf("uid %d gid %d, want one uid of [%d, %d) and the gid of the same number", uid, gid, native.UIDBase, native.UIDBase+native.UIDCount)
				}
			}},
		{name: "python3-native memory bomb", lang: "python3-native", root: true, files: file("main.py", "b = []\nwhile True: b.append(bytearray(1 << 20))\n"),
			limits: languages.ExecLimits{MemoryBytes: 64 << 20},
			status: languages.StatusMemoryLimit, exit: -1, signal: "killed", message: []string{"memory limit 67108864 bytes: the OOM killer ended a process"},
			maxRun: 3 * time.Second, audit: []string{"kernel: cgroup memory limit"}},

		{name: "perl open /etc/shadow", lang: "perl", files: file("main.pl", "open(my $f, '<', '/etc/shadow') or die \"open: $!\\n\"; print <$f>;\n"),
			status: languages.StatusRuntimeError, exit: 2, stderr: []string{"open: No such file or directory"}},
		{name: "perl read a world-readable file outside the grants", lang: "perl", files: file("main.pl", "open(my $f, '<', '"+filepath.Join(fx.secretDir, "secret.txt")+"') or die \"open: $!\\n\"; print <$f>;\n"),
			status: languages.StatusRuntimeError, exit: 2, stderr: []string{"open: No such file or directory"}},
		{name: "perl system a binary", lang: "perl", files: file("main.pl", "system('/usr/bin/id') == 0 or die \"system: $!\\n\";\n"),
			status: languages.StatusRuntimeError, exit: 13, stderr: []string{"system: Permission denied"}},
		{name: "perl backticks", lang: "perl", files: file("main.pl", "my $o = `id`; die \"exec: $!\\n\" unless defined $o && $? == 0;\n"),
			status: languages.StatusRuntimeError, exit: 13, stderr: []string{"exec: Permission denied"}},
		{name: "perl tcp to a host loopback listener", lang: "perl",
			files:  file("main.pl", "use IO::Socket::INET;\nIO::Socket::INET->new(PeerAddr => '"+fx.tcp+"', Timeout => 2) or die \"connect: $@\\n\";\n"),
			status: languages.StatusRuntimeError, exit: 13, stderr: []string{"connect: IO::Socket::INET: connect: Permission denied"}, check: noConnect},
		{name: "perl write a world-writable host dir", lang: "perl", files: file("main.pl", "open(my $f, '>', '"+filepath.Join(fx.writable, "perl")+"') or die \"open: $!\\n\";\n"),
			status: languages.StatusRuntimeError, exit: 2, stderr: []string{"open: No such file or directory"}, check: noFile(filepath.Join(fx.writable, "perl"))},
		{name: "perl fork bomb", lang: "perl", root: true, files: file("main.pl", "fork while 1;\n"),
			limits: languages.ExecLimits{Timeout: time.Second},
			status: languages.StatusTimeout, exit: -1, signal: "killed", message: []string{"(it hit the process limit of 64)"}, maxRun: 2 * time.Second,
			audit: []string{"kernel: cgroup pids limit"}},

		{name: "lua read /etc/shadow", lang: "lua", files: file("main.lua", "local f, err = io.open('/etc/shadow')\nif not f then io.stderr:write(err, '\\n') os.exit(2) end\nprint(f:read('a'))\n"),
			status: languages.StatusRuntimeError, exit: 2, stderr: []string{"/etc/shadow: No such file or directory"}},
		{name: "lua os.execute", lang: "lua", files: file("main.lua", "print(os.execute('/usr/bin/id'))\n"),
			status: languages.StatusOK, stdout: "nil\tPermission denied\t13\n"}, // /bin/sh may not execute
		{name: "lua io.popen", lang: "lua", files: file("main.lua", "print(io.popen('id'))\n"),
			status: languages.StatusOK, anyStdout: true, check: func(t *testing.T, res *languages.ExecResult) {
				if strings.Contains(string(res.Stdout), "uid=") {
					t.Errorf("io.popen ran id: %q", res.Stdout)
				}
			}},
		{name: "lua memory bomb", lang: "lua", root: true, files: file("main.lua", "local t = {}\nwhile true do t[#t+1] = string.rep('x', 1 << 20) .. #t end\n"),
			limits: languages.ExecLimits{MemoryBytes: 64 << 20},
			status: languages.StatusMemoryLimit, exit: -1, signal: "killed", maxRun: 5 * time.Second, audit: []string{"kernel: cgroup memory limit"}},
		{name: "php read /etc/shadow", lang: "php", files: file("main.php", "<?php\n$s = file_get_contents('/etc/shadow');\nexit($s === false ? 2 : 0);\n"),
			status: languages.StatusRuntimeError, exit: 2, stderr: []string{"file_get_contents(/etc/shadow): Failed to open stream: No such file or directory"}},
		{name: "php shell_exec", lang: "php", files: file("main.php", "<?php\nvar_dump(shell_exec('/usr/bin/id'));\n"),
			status: languages.StatusOK, anyStdout: true, check: func(t *testing.T, res *languages.ExecResult) {
				if strings.Contains(string(res.Stdout), "uid=") {
					t.Errorf("shell_exec ran id: %q", res.Stdout)
				}
			}},
		{name: "php tcp to a host loopback listener", lang: "php",
			files:  file("main.php", "<?php\n$s = @fsockopen('127.0.0.1', "+fx.tcp[strings.LastIndex(fx.tcp, ":")+1:]+", $no, $err, 2);\nfwrite(STDERR, \"$err\\n\");\nexit($s ? 0 : 2);\n"),
			status: languages.StatusRuntimeError, exit: 2, stderr: []string{"Permission denied"}, check: noConnect},
		{name: "php memory past its memory_limit", lang: "php", files: file("main.php", "<?php\n$a = [];\nwhile (true) $a[] = str_repeat('x', 1 << 20);\n"),
			limits: languages.ExecLimits{MemoryBytes: 64 << 20},
			status: languages.StatusMemoryLimit, exit: 255, stderr: []string{"Allowed memory size of 50331648 bytes exhausted"}, maxRun: 5 * time.Second},

		// Java: javac and the JVM under the same layers as every native
		// job; what the JDK adds to read is its own /etc directory.
		{name: "java a submission replacing a class of java.base", lang: "java",
			files: []languages.File{{Name: "Main.java", Content: []byte(javaClass("", `System.exit(0);`))},
				{Name: "java/lang/Runtime.java", Content: []byte("package java.lang;\npublic class Runtime { public void exit(int c) { System.out.println(\"hijacked\"); } }\n")}},
			status: languages.StatusCompileError, compile: []string{"package exists in another module: java.base"}},
		{name: "java read /etc/shadow", lang: "java", files: file("Main.java", javaClass("",
			`System.out.println(new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get("/etc/shadow"))));`)),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.nio.file.NoSuchFileException: /etc/shadow"}},
		{name: "java read a world-readable file outside the grants", lang: "java", files: file("Main.java", javaClass("",
			`System.out.println(new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get("`+filepath.Join(fx.secretDir, "secret.txt")+`"))));`)),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.nio.file.NoSuchFileException: " + filepath.Join(fx.secretDir, "secret.txt")}},
		{name: "java write a world-writable host dir", lang: "java", files: file("Main.java", javaClass("",
			`java.nio.file.Files.writeString(java.nio.file.Paths.get("`+filepath.Join(fx.writable, "java")+`"), "pwned");`)),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.nio.file.NoSuchFileException: " + filepath.Join(fx.writable, "java")},
			check: noFile(filepath.Join(fx.writable, "java"))},
		{name: "java exec a binary", lang: "java", files: file("Main.java", javaClass("", `new ProcessBuilder("/usr/bin/id").inheritIO().start().waitFor();`)),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.io.IOException: Cannot run program \"/usr/bin/id\"", "Permission denied"}},
		{name: "java tcp to a host loopback listener", lang: "java", files: file("Main.java", javaClass("",
			`new java.net.Socket("127.0.0.1", `+fx.tcp[strings.LastIndex(fx.tcp, ":")+1:]+`).close();`)),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.net."}, check: noConnect},
		{name: "java tcp egress", lang: "java", files: file("Main.java", javaClass("", `new java.net.Socket("1.1.1.1", 80).close();`)),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.net."}},
		{name: "java heap bomb", lang: "java", root: true, files: file("Main.java", javaClass("",
			`java.util.List<long[]> b = new java.util.ArrayList<>(); while (true) b.add(new long[1 << 17]);`)),
			limits: languages.ExecLimits{MemoryBytes: 96 << 20},
			status: languages.StatusMemoryLimit, exit: 3, message: []string{"memory limit of 96 MiB"}, stderr: []string{"java.lang.OutOfMemoryError: Java heap space"},
			maxRun: 5 * time.Second},
		{name: "java off-heap bomb", lang: "java", root: true, files: file("Main.java", javaClass("",
			`java.util.List<java.nio.ByteBuffer> b = new java.util.ArrayList<>(); while (true) b.add(java.nio.ByteBuffer.allocateDirect(1 << 20));`)),
			limits: languages.ExecLimits{MemoryBytes: 96 << 20},
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.lang.OutOfMemoryError: Cannot reserve 1048576 bytes of direct buffer memory"}, maxRun: 5 * time.Second},

		// Kotlin: kotlinc and the JVM under the same layers as java's;
		// what Kotlin adds to read is the compiler's lib/ (the standard
		// library), which a program may read but not change.
		{name: "kotlin read a world-readable file outside the grants", lang: "kotlin", files: file("main.kt",
			`fun main() { println(java.io.File("`+filepath.Join(fx.secretDir, "secret.txt")+`").readText()) }`+"\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.io.FileNotFoundException: " + filepath.Join(fx.secretDir, "secret.txt")}},
		{name: "kotlin overwrite the standard library it runs with", lang: "kotlin", files: file("main.kt",
			"fun main() {\n    val jar = java.io.File(Unit::class.java.protectionDomain.codeSource.location.toURI())\n    System.err.println(jar)\n    jar.writeText(\"pwned\")\n}\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"kotlin-stdlib.jar", "java.io.FileNotFoundException"}},
		{name: "kotlin exec a binary", lang: "kotlin", files: file("main.kt", "fun main() { ProcessBuilder(\"/usr/bin/id\").inheritIO().start().waitFor() }\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.io.IOException: Cannot run program \"/usr/bin/id\"", "Permission denied"}},
		{name: "kotlin tcp to a host loopback listener", lang: "kotlin", files: file("main.kt",
			"fun main() { java.net.Socket(\"127.0.0.1\", "+fx.tcp[strings.LastIndex(fx.tcp, ":")+1:]+").close() }\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: []string{"java.net."}, check: noConnect},

		// Resource limits of a WASM language through the executor.
		{name: "python memory growth past the limit", lang: "python", files: file("main.py", "b = bytearray(512 << 20)\n"),
			limits: languages.ExecLimits{MemoryBytes: 64 << 20},
			status: languages.StatusMemoryLimit, message: []string{"the guest tried to grow its memory past the limit of 1024 pages (64 MiB)"},
			stderr: []string{"MemoryError"}},
		{name: "javascript memory growth past the limit", lang: "javascript", files: file("main.js", "const a = [];\nfor (;;) a.push(new Uint8Array(8 << 20));\n"),
			limits: languages.ExecLimits{MemoryBytes: 64 << 20},
			status: languages.StatusMemoryLimit, message: []string{"the guest tried to grow its memory past the limit of 1024 pages (64 MiB)"}},
		{name: "ruby memory growth past the limit", lang: "ruby", files: file("main.rb", "a = []\nloop { a << ('x' * (1 << 20)) }\n"),
			limits: languages.ExecLimits{MemoryBytes: 64 << 20},
			status: languages.StatusMemoryLimit, message: []string{"the script tried to grow its memory past the limit of 64 MiB", "NoMemoryError"}},
		{name: "javascript infinite loop", lang: "javascript", files: file("main.js", "for (;;) {}\n"), limits: languages.ExecLimits{Timeout: 500 * time.Millisecond},
			status: languages.StatusTimeout, message: []string{"did not finish within 500ms"}, maxRun: 1500 * time.Millisecond},
		{name: "python 100 MB of output", lang: "python", files: file("main.py", "import sys\nc = 'x' * (1 << 20)\nfor _ in range(100): sys.stdout.write(c)\n"),
			status: languages.StatusOutputLimit, message: []string{"stdout exceeded 1048576 bytes; the command was stopped"},
			floodUnit: "x", floodMax: 1 << 20, maxRun: 3 * time.Second},
	}
}

// TestHostile runs the corpus through the languages Executor: compilers
// fed source that reads host files at compile time, interpreters on WASM
// asking WASI for what it does not have, native jobs going for the host's
// files, network, executables and limits. Each row asserts the exact
// refusal (status, exit code, the tool's or the kernel's error naming the
// file), that no secret reached any output, and the host side (no file
// written, no connection made, the denial audited).
func TestHostile(t *testing.T) {
	fx := newHostileFixture(t)
	e := newExecutor(t, "") // on testHost, recording to sharedAudit
	for i, tc := range hostileCases(fx) {
		t.Run(tc.name, func(t *testing.T) {
			needLanguage(t, tc.lang)
			if tc.root {
				testenv.Root(t, "needs root: a cgroup limit, a job uid or a file planted in /root")
			}
			if tc.lang == "kotlin" {
				testenv.Slow(t, "kotlinc starts a JVM of its own: 6-8 CPU-s a row")
			}
			fx.connects.Store(0)
			corr := "hostile-" + strconv.Itoa(i)
			lim := tc.limits
			if lim.CompileTimeout == 0 {
				lim.CompileTimeout = 5 * time.Minute
			}
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tc.lang,
				Source: languages.Source{Files: tc.files}, Limits: lim, CorrelationID: corr})
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			dump := fmt.Sprintf("status %s exit %d signal %q message %q\ncompile: %q\nstdout: %.300q\nstderr: %.600q\nviolations: %v",
				res.Status, res.ExitCode, res.Signal, res.Message, res.CompileOutput, res.Stdout, res.Stderr, res.Violations)
			for _, out := range []string{string(res.Stdout), string(res.Stderr), res.CompileOutput, res.Message} {
				if strings.Contains(out, fx.canary) {
					t.Fatalf("a planted secret reached the output:\n%s", dump)
				}
				for _, l := range fx.hostLines {
					if strings.Contains(out, l) {
						t.Fatalf("a line of the host's user database reached the output:\n%s", dump)
					}
				}
			}
			if res.Status != tc.status || res.ExitCode != tc.exit || res.Signal != tc.signal {
				t.Fatalf("want status %s exit %d signal %q; got\n%s", tc.status, tc.exit, tc.signal, dump)
			}
			for _, c := range []struct {
				what, got string
				want      []string
			}{{"compile output", res.CompileOutput, tc.compile}, {"stderr", string(res.Stderr), tc.stderr}, {"message", res.Message, tc.message}} {
				for _, w := range c.want {
					if !strings.Contains(c.got, w) {
						t.Errorf("%s lacks %q:\n%s", c.what, w, dump)
					}
				}
			}
			if tc.rule != "" {
				found := false
				for _, v := range res.Violations {
					found = found || v.Rule == tc.rule
				}
				if !found {
					t.Errorf("no %q violation:\n%s", tc.rule, dump)
				}
			}
			switch {
			case tc.floodMax > 0:
				if len(res.Stdout) == 0 || len(res.Stdout) > tc.floodMax {
					t.Errorf("kept %d bytes of stdout, want some and at most %d", len(res.Stdout), tc.floodMax)
				}
				whole := len(res.Stdout) / len(tc.floodUnit) * len(tc.floodUnit)
				if string(res.Stdout[:whole]) != strings.Repeat(tc.floodUnit, whole/len(tc.floodUnit)) {
					t.Errorf("stdout is not the flood: %.200q", res.Stdout)
				}
			case !tc.anyStdout:
				if string(res.Stdout) != tc.stdout {
					t.Errorf("stdout %q, want %q", res.Stdout, tc.stdout)
				}
			}
			if tc.maxRun > 0 && res.RunTime > tc.maxRun {
				t.Errorf("the run took %s; the limit must end it within %s", res.RunTime, tc.maxRun)
			}
			if len(tc.audit) > 0 {
				checkDenials(t, sharedAudit, corr, tc.audit)
			}
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}

// checkDenials asserts the audit trail holds a deny event with each rule
// under the run's correlation id.
func checkDenials(t *testing.T, a *audit.Log, corr string, rules []string) {
	t.Helper()
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs, err := a.Query(context.Background(), audit.Filter{CorrelationID: corr})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		found := false
		for _, ev := range evs {
			found = found || ev.Decision == audit.Deny && ev.Rule == r
		}
		if !found {
			t.Errorf("no audited denial %q under %s; events: %+v", r, corr, evs)
		}
	}
}
