package all_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
)

// TestSleepPastDeadline: a program that sleeps 20 s under a 1 s limit ends
// at the limit with a timeout, in every language whose sleep is a WASI
// poll_oneoff (C, C++, Rust and Go through wasi-libc or their runtime,
// CPython, Ruby), not 20 s later: the deadline holds inside host calls,
// not only in guest code.
//
// CPython sleeps with select(): its time.sleep asks wasi-libc for
// clock_nanosleep(TIMER_ABSTIME), a poll_oneoff with an absolute clock,
// which wazero's WASI answers with ENOTSUP (time.sleep raises OSError at
// once; see the report to the lead), while select() polls a relative one.
func TestSleepPastDeadline(t *testing.T) {
	testenv.Timing(t)
	e := newExecutor(t, "")
	tests := []struct {
		lang, file, code string
		overhead         time.Duration // run time outside the deadline (loading the interpreter)
	}{
		{"c", "main.c", "#include <unistd.h>\n#include <stdio.h>\nint main(void){sleep(20); puts(\"woke\"); return 0;}\n", 0},
		{"cpp", "main.cpp", "#include <unistd.h>\n#include <cstdio>\nint main(){usleep(20000000); std::puts(\"woke\");}\n", 0},
		{"python", "main.py", "import select\nselect.select([], [], [], 20)\nprint('woke')\n", 0},
		// The Ruby driver compiles (from the cache) and loads the
		// interpreter before its deadline starts.
		{"ruby", "main.rb", "sleep 20\nputs 'woke'\n", time.Second},
		{"rust", "main.rs", "fn main() { std::thread::sleep(std::time::Duration::from_secs(20)); println!(\"woke\"); }\n", 0},
		{"go", "main.go", "package main\n\nimport (\n\t\"fmt\"\n\t\"time\"\n)\n\nfunc main() {\n\ttime.Sleep(20 * time.Second)\n\tfmt.Println(\"woke\")\n}\n", 0},
	}
	for _, tc := range testenv.ShortLanguages(tests) {
		t.Run(tc.lang, func(t *testing.T) {
			needLanguage(t, tc.lang)
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tc.lang,
				Source: languages.Source{Files: []languages.File{{Name: tc.file, Content: []byte(tc.code)}}},
				Limits: languages.ExecLimits{Timeout: time.Second, CompileTimeout: 5 * time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != languages.StatusTimeout || !strings.Contains(res.Message, "1s") {
				t.Fatalf("status %s (%q), want timeout after 1s; stdout %q stderr %q compile %q", res.Status, res.Message, res.Stdout, res.Stderr, res.CompileOutput)
			}
			if strings.Contains(string(res.Stdout), "woke") {
				t.Errorf("the program woke up: %q", res.Stdout)
			}
			// The run ends soon after its deadline, not 20 s later (the
			// run time includes instantiation and the audit; host's
			// TestHostile bounds the host call itself to 1.2 s). The
			// bound leaves room for a loaded 2-core machine.
			if res.RunTime > 1500*time.Millisecond+tc.overhead {
				t.Errorf("the run took %s under a 1s limit", res.RunTime)
			}
		})
	}
}
