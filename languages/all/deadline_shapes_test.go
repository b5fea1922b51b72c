package all_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/hostile"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
)

// rustTree is hostile.CallTreeC in Rust.
func rustTree() string {
	var b strings.Builder
	b.WriteString("use std::sync::atomic::{AtomicU32, Ordering};\nstatic SINK: AtomicU32 = AtomicU32::new(0);\n#[inline(never)] fn f0() { SINK.fetch_add(1, Ordering::Relaxed); }\n")
	for i := 1; i <= 60; i++ {
		fmt.Fprintf(&b, "#[inline(never)] fn f%d() { f%d(); f%d(); }\n", i, i-1, i-1)
	}
	return b.String() + "fn main() { f60(); }\n"
}

// TestCodeShapesPastDeadline (issue 27): code that runs long without a
// loop (a call tree) or with few iterations that each do much (a bulk
// fill or copy of 64 MiB, which the interpreters do with memory.fill or
// memory.copy) ends at its deadline in every language, and nothing of it
// runs on once the run has its answer.
func TestCodeShapesPastDeadline(t *testing.T) {
	testenv.Timing(t)
	e := newExecutor(t, "")
	tests := []struct {
		name, lang, file, code string
		overhead               time.Duration // run time outside the deadline (loading the interpreter)
	}{
		{"call tree", "c", "main.c", hostile.CallTreeC(60), 0},
		{"call tree", "cpp", "main.cpp", hostile.CallTreeC(60), 0},
		{"call tree", "rust", "main.rs", rustTree(), 0},
		{"memset of 64 MiB in a loop", "c", "main.c", "#include <string.h>\n#include <stdlib.h>\nvoid *(*volatile fill)(void *, int, size_t) = memset;\nint main(void){ char *p = malloc(64<<20); for (int i = 0; i < 1000000; i++) fill(p, i, 64<<20); return p[5]; }\n", 0},
		{"TypedArray.fill of 64 MiB in a loop", "javascript", "main.js", "const a = new Uint8Array(64 << 20);\nfor (let i = 0; i < 1000000; i++) a.fill(i & 255);\n", 0},
		{"a recursive tree", "javascript", "main.js", "function f(n) { if (n === 0) return 0; return f(n - 1) + f(n - 1); }\nf(60);\n", 0},
		{"bytearray of 64 MiB in a loop", "python", "main.py", "for i in range(1000000):\n    b = bytearray(64 << 20)\n    b[5] = i & 255\n", 0},
		{"bytes copied 64 MiB at a time", "python", "main.py", "b = bytes(64 << 20)\nfor i in range(1000000):\n    c = bytearray(b)\n", 0},
		{"a string of 64 MiB in a loop", "ruby", "main.rb", "1_000_000.times { |i| s = 'x' * (64 << 20) }\n", 1500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.lang+"/"+tc.name, func(t *testing.T) {
			needLanguage(t, tc.lang)
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tc.lang,
				Source: languages.Source{Files: []languages.File{{Name: tc.file, Content: []byte(tc.code)}}},
				Limits: languages.ExecLimits{Timeout: time.Second, CompileTimeout: 5 * time.Minute, MemoryBytes: 256 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != languages.StatusTimeout {
				t.Fatalf("status %s (%q), want timeout; stdout %q stderr %q compile %q", res.Status, res.Message, res.Stdout, res.Stderr, res.CompileOutput)
			}
			if res.RunTime > 1500*time.Millisecond+tc.overhead {
				t.Errorf("the run took %s under a 1s limit", res.RunTime)
			}
			cpu0 := hostile.ProcessCPU()
			time.Sleep(300 * time.Millisecond)
			if used := hostile.ProcessCPU() - cpu0; used > 150*time.Millisecond {
				t.Errorf("%s of CPU in the 300 ms after the run ended", used)
			}
		})
	}
}
