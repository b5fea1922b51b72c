package host

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
)

// TestCompiledReleased: a module's machine code lives as long as a loaded
// module uses it: two loads of the same bytes share one compilation, and
// closing the last frees it, so a server that replaces modules all day
// does not keep every version it ever compiled.
func TestCompiledReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, err := New(ctx, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	wasm, err := os.ReadFile("../testdata/plugin.wasm")
	if err != nil {
		t.Fatal(err)
	}
	entries := func() (n, refs int) {
		h.compileMu.Lock()
		defer h.compileMu.Unlock()
		for _, c := range h.compiled {
			n++
			refs += c.refs
		}
		return n, refs
	}
	var mods []*Module
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 4 { // concurrent loads of the same bytes: one compilation
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := h.Load(ctx, wasm, LoadOptions{Name: "p" + string(rune('a'+i))})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			mods = append(mods, m)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if n, refs := entries(); n != 1 || refs != 4 {
		t.Fatalf("after 4 loads: %d compilations with %d references, want 1 with 4", n, refs)
	}
	for _, m := range mods[:3] {
		m.Close(ctx)
	}
	if n, refs := entries(); n != 1 || refs != 1 {
		t.Fatalf("after 3 closes: %d compilations with %d references, want 1 with 1", n, refs)
	}
	if _, err := mods[3].Invoke(ctx, Request{Action: "echo", Input: []byte("x"), Principal: policy.Principal{User: "ann", Org: "acme"}}); err != nil {
		t.Fatalf("the module still loaded: %v", err)
	}
	mods[3].Close(ctx)
	mods[3].Close(ctx) // twice is harmless
	if n, refs := entries(); n != 0 || refs != 0 {
		t.Fatalf("after the last close: %d compilations with %d references, want none", n, refs)
	}
	// A load that fails after compiling keeps nothing either.
	if _, err := h.Load(ctx, wasm, LoadOptions{Name: "bad", Isolation: "shared"}); err == nil {
		t.Fatal("isolation shared loaded")
	}
	if n, _ := entries(); n != 0 {
		t.Fatalf("a failed load left %d compilations", n)
	}
	// A load waiting for another's compilation of the same key gives up
	// with its context.
	c := &compiled{key: "k", done: make(chan struct{}), refs: 1}
	h.compileMu.Lock()
	h.compiled["k"] = c
	h.compileMu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := h.compile(wctx, "k", wasm, compileFor{}); err != context.DeadlineExceeded {
		t.Fatalf("waiter: %v, want its deadline", err)
	}
	if c.refs != 1 {
		t.Fatalf("the waiter kept a reference: %d", c.refs)
	}
}
