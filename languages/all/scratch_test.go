package all_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// The per-language programs of TestSleepAndScratchEveryLanguage: each
// sleeps 50 ms (on a relative clock, and on an absolute one where the
// language has it: CPython's time.sleep is clock_nanosleep(TIMER_ABSTIME),
// which was Errno 58), writes "hi from LANG" to out.txt by a relative
// name, reads it back and prints it.
var scratchPrograms = map[string][2]string{
	"python": {"main.py", `import time
t = time.monotonic()
time.sleep(0.05)
assert time.monotonic() - t >= 0.045, time.monotonic() - t
open("out.txt", "w").write("hi from python")
print(open("out.txt").read())
`},
	"python3-native": {"main.py", `import time
t = time.monotonic()
time.sleep(0.05)
assert time.monotonic() - t >= 0.045
open("out.txt", "w").write("hi from python3-native")
print(open("out.txt").read())
`},
	"javascript": {"main.js", `const t = Date.now();
os.sleep(50);
if (Date.now() - t < 45) throw new Error("slept " + (Date.now() - t) + " ms");
const f = std.open("out.txt", "w");
f.puts("hi from javascript");
f.close();
print(std.loadFile("out.txt"));
`},
	"ruby": {"main.rb", `t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
sleep 0.05
raise "short sleep" if Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < 0.045
File.write("out.txt", "hi from ruby")
puts File.read("out.txt")
`},
	"go": {"main.go", `package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	t := time.Now()
	time.Sleep(50 * time.Millisecond)
	if time.Since(t) < 45*time.Millisecond {
		panic("short sleep")
	}
	if err := os.WriteFile("out.txt", []byte("hi from go"), 0o644); err != nil {
		panic(err)
	}
	b, err := os.ReadFile("out.txt")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
}
`},
	"c": {"main.c", `#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void) {
	double t = now();
	struct timespec rel = {0, 25000000};
	if (nanosleep(&rel, NULL) != 0) { perror("nanosleep"); return 1; }
	struct timespec abs;
	clock_gettime(CLOCK_MONOTONIC, &abs);
	abs.tv_nsec += 25000000;
	if (abs.tv_nsec >= 1000000000) { abs.tv_sec++; abs.tv_nsec -= 1000000000; }
	int e = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &abs, NULL);
	if (e != 0) { printf("clock_nanosleep: %d\n", e); return 1; }
	if (now() - t < 0.045) { puts("short sleep"); return 1; }
	FILE *f = fopen("out.txt", "w");
	if (!f) { perror("fopen"); return 1; }
	fputs("hi from c", f);
	fclose(f);
	char buf[64] = {0};
	f = fopen("out.txt", "r");
	fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	puts(buf);
	return 0;
}
`},
	// wasi-sdk's libc++ has neither threads (this_thread) nor fstream:
	// C++ sleeps and writes through libc.
	"cpp": {"main.cpp", `#include <chrono>
#include <cstdio>
#include <string>
#include <time.h>

int main() {
	auto t = std::chrono::steady_clock::now();
	timespec rel{0, 50000000};
	if (nanosleep(&rel, nullptr) != 0) { std::perror("nanosleep"); return 1; }
	if (std::chrono::steady_clock::now() - t < std::chrono::milliseconds(45)) { std::puts("short sleep"); return 1; }
	std::FILE *f = std::fopen("out.txt", "w");
	if (!f) { std::perror("fopen"); return 1; }
	std::fputs("hi from cpp", f);
	std::fclose(f);
	std::string s(64, '\0');
	f = std::fopen("out.txt", "r");
	s.resize(std::fread(s.data(), 1, s.size(), f));
	std::fclose(f);
	std::puts(s.c_str());
}
`},
	"rust": {"main.rs", `use std::time::{Duration, Instant};

fn main() {
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(50));
    assert!(t.elapsed() >= Duration::from_millis(45));
    std::fs::write("out.txt", "hi from rust").unwrap();
    println!("{}", std::fs::read_to_string("out.txt").unwrap());
}
`},
	"bash": {"main.sh", `sleep 0.05
echo -n "hi from bash" > out.txt
cat out.txt; echo
`},
}

// TestSleepAndScratchEveryLanguage: in every language moat runs, a sleep
// sleeps (not an error, not an early return) and a program writes a file
// by a relative name and reads it back: its working directory is a
// scratch directory of its own. A WASM run returns the file through
// FilesOut, and leaves no scratch directory behind.
func TestSleepAndScratchEveryLanguage(t *testing.T) {
	testenv.Timing(t)
	e := newExecutor(t, persistentDir(t, "build-cache"))
	for name, prog := range scratchPrograms {
		t.Run(name, func(t *testing.T) {
			l := needLanguage(t, name)
			before := scratchDirs(t)
			req := languages.ExecRequest{Language: name, Source: languages.Source{Files: []languages.File{{Name: prog[0], Content: []byte(prog[1])}}},
				Limits: languages.ExecLimits{Timeout: 20 * time.Second, CompileTimeout: 5 * time.Minute}}
			native := l.Info().Path == languages.PathNative
			if !native {
				req.FilesOut = []string{"*.txt"}
			}
			res, err := e.Exec(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			want := "hi from " + name
			if res.Status != languages.StatusOK || strings.TrimSpace(string(res.Stdout)) != want {
				t.Fatalf("status %s (%s), stdout %q, stderr %q, compile %q; want %q", res.Status, res.Message, res.Stdout, res.Stderr, res.CompileOutput, want)
			}
			if !native {
				if len(res.Files) != 1 || res.Files[0].Name != "out.txt" || res.Files[0].Content != want || res.Files[0].Encoding != "utf-8" || res.Files[0].Size != int64(len(want)) {
					t.Fatalf("files %+v, want out.txt holding %q", res.Files, want)
				}
			}
			if left := newScratchDirs(t, before); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

// scratchDirs lists the scratch directories in the temporary directory.
func scratchDirs(t *testing.T) map[string]bool {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(os.TempDir(), "moat-scratch-*"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range ms {
		out[m] = true
	}
	return out
}

// newScratchDirs are the scratch directories made since before and still
// there. Other tests of the package run in parallel only in their own
// processes' directories (the executor's are this process's), so any new
// one is this test's; a directory named for another process (another
// package's test binary, a moat a CLI test started, another checkout's
// tests in the same /tmp) is not.
func newScratchDirs(t *testing.T, before map[string]bool) []string {
	t.Helper()
	var out []string
	others := filepath.Join(os.TempDir(), "moat-scratch-job-")
	mine := others + kernel.OwnJobCgroupTag()
	for m := range scratchDirs(t) {
		if strings.HasPrefix(m, others) && !strings.HasPrefix(m, mine) {
			continue
		}
		if !before[m] {
			out = append(out, m)
		}
	}
	return out
}

// TestScratchAndSleepHostile: what a program can do with its clock and
// its scratch directory ends within its limits: a sleep far past the
// deadline ends at the deadline as a timeout, a negative or overflowing
// one is the language's own error at once, an absolute sleep in the past
// returns at once; a run filling its scratch directory gets ENOSPC, the
// result says so and the trail holds the refusal; and the directory is
// gone after a run that timed out or ran out of memory.
func TestScratchAndSleepHostile(t *testing.T) {
	testenv.Timing(t)
	// A temp dir of its own, as TestInterpretedArtifact's: under go test
	// -p 3 another package's live moat-scratch- directories in the shared
	// one would count as left behind by this test.
	t.Setenv("TMPDIR", t.TempDir())
	e := newExecutor(t, persistentDir(t, "build-cache"))
	cases := []struct {
		name, lang, file, code string
		timeout                time.Duration
		status                 languages.Status
		stdout                 string // a substring of it, when set
		stderr                 string // a substring of it, when set
		max                    time.Duration
		audit                  string // the rule of a denial the trail must hold
	}{
		{"python sleep(1e9) ends at the deadline", "python", "main.py", "import time\nopen('x.txt','w').write('x')\ntime.sleep(1e9)\n",
			500 * time.Millisecond, languages.StatusTimeout, "", "", 5 * time.Second, ""},
		{"javascript setTimeout past the deadline ends at it", "javascript", "main.js", "os.setTimeout(() => print('never'), 1e9);\n",
			500 * time.Millisecond, languages.StatusTimeout, "", "", 5 * time.Second, ""},
		{"ruby sleep past the deadline ends at it", "ruby", "main.rb", "sleep 3600\n",
			500 * time.Millisecond, languages.StatusTimeout, "", "", 5 * time.Second, ""},
		{"go time.Sleep past the deadline ends at it", "go", "main.go", "package main\n\nimport \"time\"\n\nfunc main() { time.Sleep(time.Hour) }\n",
			500 * time.Millisecond, languages.StatusTimeout, "", "", 5 * time.Second, ""},
		{"python sleep(1e18) overflows at once", "python", "main.py", "import time\ntime.sleep(1e18)\n",
			5 * time.Second, languages.StatusRuntimeError, "", "OverflowError", 4 * time.Second, ""},
		{"python sleep(-1) is refused at once", "python", "main.py", "import time\ntime.sleep(-1)\n",
			5 * time.Second, languages.StatusRuntimeError, "", "ValueError", 4 * time.Second, ""},
		{"python sleep(nan) is refused at once", "python", "main.py", "import time\ntime.sleep(float('nan'))\n",
			5 * time.Second, languages.StatusRuntimeError, "", "ValueError", 4 * time.Second, ""},
		{"c absolute sleep in the past returns at once", "c", "main.c", `#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>
int main(void) {
	struct timespec past = {1, 0};
	int a = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &past, NULL);
	int b = clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &past, NULL);
	printf("%d %d\n", a, b);
	return 0;
}
`, 5 * time.Second, languages.StatusOK, "0 0\n", "", 4 * time.Second, ""},
		{"python fills its scratch directory", "python", "main.py", `import errno
try:
    with open("big.bin", "wb") as f:
        while True:
            f.write(b"x" * (1 << 20))
except OSError as e:
    print(errno.errorcode[e.errno])
`, 20 * time.Second, languages.StatusOK, "ENOSPC", "", 20 * time.Second, "scratch quota"},
		{"ruby fills its scratch directory", "ruby", "main.rb", `begin
  File.open("big.bin", "wb") { |f| loop { f.write("x" * (1 << 20)) } }
rescue SystemCallError => e
  puts e.class
end
`, 20 * time.Second, languages.StatusOK, "Errno::ENOSPC", "", 20 * time.Second, ""},
		{"bash meets the file cap of its job dir", "bash", "main.sh", `i=0
while : > "f$i" 2>/dev/null; do i=$((i+1)); [ $i -gt 5000 ] && break; done
echo "$i files"; : > more 2>&1 | head -c 0; touch again 2>&1 | grep -o "No space left on device"
`, 20 * time.Second, languages.StatusOK, "1024 files\nNo space left on device\n", "", 20 * time.Second, ""},
		{"python out of memory after writing", "python", "main.py", "open('x.txt','w').write('x')\nx = bytearray(1 << 30)\n",
			10 * time.Second, languages.StatusMemoryLimit, "", "", 10 * time.Second, ""},
	}
	for i, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			needLanguage(t, tt.lang)
			before := scratchDirs(t)
			corr := fmt.Sprintf("scratch-hostile-%d", i)
			start := time.Now()
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tt.lang, CorrelationID: corr,
				Source: languages.Source{Files: []languages.File{{Name: tt.file, Content: []byte(tt.code)}}},
				Limits: languages.ExecLimits{Timeout: tt.timeout, CompileTimeout: 5 * time.Minute, MemoryBytes: 256 << 20}})
			took := time.Since(start) - res.CompileTime
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.status || !strings.Contains(string(res.Stdout), tt.stdout) || !strings.Contains(string(res.Stderr), tt.stderr) {
				t.Fatalf("status %s (%s), stdout %q, stderr %q; want %s, %q, %q", res.Status, res.Message, res.Stdout, tailOf(res.Stderr), tt.status, tt.stdout, tt.stderr)
			}
			if took > tt.max {
				t.Fatalf("took %s, want at most %s", took, tt.max)
			}
			if tt.audit != "" {
				if res.ScratchFull != "bytes" || !strings.Contains(res.Message, "scratch directory is full") {
					t.Errorf("scratch_full %q, message %q", res.ScratchFull, res.Message)
				}
				evs, err := sharedAudit.Query(context.Background(), audit.Filter{CorrelationID: corr, Decision: audit.Deny})
				found := false
				for _, ev := range evs {
					found = found || ev.Rule == tt.audit && ev.Op == host.OpFileWrite && ev.Code == "no_space"
				}
				if err != nil || !found {
					t.Errorf("no %q denial in the trail: %+v %v", tt.audit, evs, err)
				}
			}
			if left := newScratchDirs(t, before); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

func tailOf(b []byte) string {
	if len(b) > 500 {
		b = b[len(b)-500:]
	}
	return string(b)
}
