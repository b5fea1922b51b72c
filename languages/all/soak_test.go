package all_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/hostile"
	"github.com/moat-sandbox/moat/internal/proctest"
	"github.com/moat-sandbox/moat/languages"
)

// cBomb is a C program whose preprocessing never ends in practice: each
// level expands its argument ten times, five levels deep twice.
const cBomb = "#define A(x) x x x x x x x x x x\n#define B(x) A(A(x))\n#define C(x) B(B(x))\n#define D(x) C(C(x))\n#define E(x) D(D(x))\nint main(void){ E(E(E(int x;))) return 0; }\n"

// TestSoakHostileShapes (make soak; MOAT_SOAK=1) runs the shapes that
// once outran their limits, round after round: a C call tree and a
// JavaScript fill under a 1 s run limit, and a C preprocessor bomb under
// a 3 s compile limit. Every round must end within its limit and a
// bounded margin, and after the last one the process holds no more
// goroutines, no more memory than a bound over the first round, and no
// child process.
func TestSoakHostileShapes(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("MOAT_SOAK"))
	if rounds == 0 {
		t.Skip("a soak: make soak runs it (MOAT_SOAK=ROUNDS)")
	}
	e := newExecutor(t, "")
	shapes := []struct {
		name, lang, file, code string
		limits                 languages.ExecLimits
		status                 languages.Status
		within                 time.Duration
	}{
		{"call tree", "c", "main.c", hostile.CallTreeC(60), languages.ExecLimits{Timeout: time.Second, CompileTimeout: 5 * time.Minute}, languages.StatusTimeout, 2 * time.Second},
		{"fill", "javascript", "main.js", "const a = new Uint8Array(64 << 20);\nfor (;;) a.fill(1);\n", languages.ExecLimits{Timeout: time.Second}, languages.StatusTimeout, 2 * time.Second},
		{"preprocessor bomb", "c", "main.c", cBomb, languages.ExecLimits{Timeout: time.Second, CompileTimeout: 3 * time.Second}, languages.StatusTimeout, 10 * time.Second},
	}
	for _, s := range shapes {
		needLanguage(t, s.lang)
	}
	var goroutines0 int
	var rss0 uint64
	for round := range rounds {
		for _, s := range shapes {
			start := time.Now()
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: s.lang,
				Source: languages.Source{Files: []languages.File{{Name: s.file, Content: []byte(s.code)}}}, Limits: s.limits})
			took := time.Since(start)
			if err != nil {
				t.Fatalf("round %d, %s: %v", round, s.name, err)
			}
			if res.Status != s.status {
				t.Errorf("round %d, %s: status %s (%q), want %s", round, s.name, res.Status, res.Message, s.status)
			}
			if took > s.within {
				t.Errorf("round %d, %s: took %s, more than %s", round, s.name, took, s.within)
			}
		}
		if round == 0 {
			runtime.GC()
			goroutines0, rss0 = runtime.NumGoroutine(), proctest.ResidentBytes(t)
		}
	}
	time.Sleep(time.Second)
	runtime.GC()
	if g := runtime.NumGoroutine(); g > goroutines0+8 {
		t.Errorf("%d goroutines after %d rounds, %d after the first", g, rounds, goroutines0)
	}
	if rss := proctest.ResidentBytes(t); rss > rss0+256<<20 {
		t.Errorf("resident set %d MiB after %d rounds, %d MiB after the first", rss>>20, rounds, rss0>>20)
	}
	if kids := proctest.Children(os.Getpid()); len(kids) > 0 {
		t.Errorf("child processes left: %v", kids)
	}
}
