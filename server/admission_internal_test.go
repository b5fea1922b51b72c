package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestAdmissionTurns: a freed slot goes to the organizations in turn. An
// organization with many requests waiting gets every other slot, not all
// of them, while another waits.
func TestAdmissionTurns(t *testing.T) {
	testenv.Timing(t)
	a := newAdmission("invocations", 1, 1, 5*time.Second, 100)
	release, ref := a.acquire(context.Background(), "acme")
	if ref != nil {
		t.Fatal("the first request was refused")
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	arrive := []struct{ org, name string }{{"acme", "a1"}, {"acme", "a2"}, {"acme", "a3"}, {"acme", "a4"}, {"globex", "g1"}, {"acme", "a5"}, {"initech", "i1"}}
	for i, r := range arrive {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, ref := a.acquire(context.Background(), r.org)
			if ref != nil {
				t.Errorf("%s refused", r.name)
				return
			}
			mu.Lock()
			order = append(order, r.name)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			rel()
		}()
		for {
			if _, w := a.stats(); w == i+1 {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	release()
	wg.Wait()
	want := []string{"a1", "g1", "i1", "a2", "a3", "a4", "a5"}
	if len(order) != len(want) {
		t.Fatalf("admitted %v; want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("admitted in the order %v; want %v (organizations in turn)", order, want)
		}
	}
	if r, w := a.stats(); r != 0 || w != 0 || len(a.orgs) != 0 || len(a.turn) != 0 {
		t.Errorf("after all: %d running, %d waiting, %d orgs, turn %v", r, w, len(a.orgs), a.turn)
	}
}

// TestAdmissionRefusals: the organization's bound refuses with 429 after
// the wait, a full queue at once, the server's bound with 503; a
// cancelled wait gives its slot back; nothing is left counted.
func TestAdmissionRefusals(t *testing.T) {
	testenv.Timing(t)
	a := newAdmission("runs", 2, 1, 100*time.Millisecond, 1)
	relA, _ := a.acquire(context.Background(), "acme")
	relG, _ := a.acquire(context.Background(), "globex")

	start := time.Now()
	_, ref := a.acquire(context.Background(), "acme")
	if ref == nil || ref.global || ref.full || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("acme over its bound: %+v after %v", ref, time.Since(start))
	}
	if p := ref.problem(a, "acme"); p.Status != 429 || p.Code != "rate_limited" || p.RetryAfter != 1 || ref.knob(a) != "admission.org_runs" {
		t.Errorf("org bound: %+v, knob %s", p, ref.knob(a))
	}
	_, ref = a.acquire(context.Background(), "initech")
	if p := ref.problem(a, "initech"); ref == nil || !ref.global || p.Status != 503 || p.Code != "unavailable" || ref.knob(a) != "admission.max_runs" {
		t.Errorf("server bound: %+v %+v", ref, p)
	}

	// A full queue refuses at once.
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, ref := a.acquire(context.Background(), "acme"); ref == nil {
			t.Error("the queued request was admitted")
		}
	}()
	for {
		if _, w := a.stats(); w == 1 {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	start = time.Now()
	_, ref = a.acquire(context.Background(), "acme")
	if ref == nil || !ref.full || ref.knob(a) != "admission.queue" || time.Since(start) > 50*time.Millisecond {
		t.Errorf("full queue: %+v after %v", ref, time.Since(start))
	}
	<-done

	// A waiter whose client goes away leaves no trace.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, ref := a.acquire(ctx, "acme"); ref == nil {
		t.Error("a cancelled wait was admitted")
	}
	relA()
	relA() // a second release is a no-op
	relG()
	if r, w := a.stats(); r != 0 || w != 0 || len(a.orgs) != 0 {
		t.Errorf("after all: %d running, %d waiting, %v", r, w, a.orgs)
	}
}

// TestLabelBound: label values from tenants' names are made safe and
// their sets bounded; past the bound, new sets are "other".
func TestLabelBound(t *testing.T) {
	for in, want := range map[string]string{
		"greet":                       "greet",
		"hello-go":                    "hello-go",
		"a\nmoat_x{org=\"b\"} 1":      "a_moat_x_org__b___1",
		"\x1b[31mred\x1b[0m":          "__31mred__0m",
		"\u202egnp.exe":               "___gnp.exe",
		"":                            "_",
		strings.Repeat("a", 100):      strings.Repeat("a", 64),
		"org/mod@v1:x+y.z":            "org/mod@v1:x+y.z",
		"\xff\xfe":                    "__",
		"back\\slash\"quote\ttab\x00": "back_slash_quote_tab_",
	} {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q; want %q", in, got, want)
		}
	}
	b := newLabelBound(3)
	for i := range 10 {
		got := b.values("mod", fmt.Sprint("action", i))
		want := []string{"mod", fmt.Sprint("action", i)}
		if i >= 3 {
			want = []string{"other", "other"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("set %d: %v; want %v", i, got, want)
		}
	}
	if got := b.values("mod", "action1"); !slices.Equal(got, []string{"mod", "action1"}) {
		t.Errorf("a set seen before the bound: %v", got)
	}
}
