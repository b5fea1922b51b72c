package host_test

import (
	"context"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/proctest"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// Soak bounds: after a warm-up, 10 000 more invokes may leave the Go heap
// at most soakHeapGrowth larger and the process's resident set at most
// soakRSSGrowth larger. A leak of one small object per invoke (a
// request's buffer, a pending reply, an audit record, a context) is 1-10
// MiB over the run; an instance, a compiled module or a kv reply kept per
// invoke, far more.
const (
	soakWarmup     = 1000
	soakInvokes    = 10000
	soakHeapGrowth = 2 << 20
	soakRSSGrowth  = 16 << 20
)

// TestSoakInvoke runs the Go SDK plugin 10 000 times through
// Module.Invoke, each a kv op (put, get, list, delete over 64 keys, so the
// store holds the same data throughout) on the pooled instances, with
// auditing on, and checks that neither the heap nor the resident set
// grows.
func TestSoakInvoke(t *testing.T) {
	testenv.Slow(t, "a soak")
	h := newHost(t, nil)
	m := loadGoGuest(t, h, "soak")
	ctx := context.Background()
	invokeKV := func(i int) {
		key := "k" + strconv.Itoa(i/4%64) // one key per round of four
		var in, want string
		switch i % 4 {
		case 0:
			in, want = "put "+key+" v"+strconv.Itoa(i), "ok"
		case 1:
			in, want = "get "+key, "v"+strconv.Itoa(i-1)
		case 2:
			in = "list k"
		case 3:
			in, want = "del "+key, "deleted"
		}
		res, err := m.Invoke(ctx, host.Request{Action: "kv", Input: []byte(in), Principal: ann, CorrelationID: "soak-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("invoke %d (%s): %v", i, in, err)
		}
		if i%4 == 2 {
			// the key just put and read is listed; at most the 64 keys
			if got := strings.Split(string(res.Output), "\n"); len(got) == 0 || len(got) > 64 {
				t.Fatalf("invoke %d (%s) = %d keys", i, in, len(got))
			}
			return
		}
		if string(res.Output) != want {
			t.Fatalf("invoke %d (%s) = %q, want %q", i, in, res.Output, want)
		}
	}
	start := time.Now()
	for i := range soakWarmup {
		invokeKV(i)
	}
	heap0, rss0 := settledMemory(t)
	for i := soakWarmup; i < soakWarmup+soakInvokes; i++ {
		invokeKV(i)
	}
	heap1, rss1 := settledMemory(t)
	took := time.Since(start)
	t.Logf("%d invokes after %d warm-up in %v (%v each): heap %d → %d KiB (%+d), RSS %d → %d KiB (%+d)",
		soakInvokes, soakWarmup, took.Round(time.Millisecond), (took / (soakWarmup + soakInvokes)).Round(time.Microsecond),
		heap0>>10, heap1>>10, (int64(heap1)-int64(heap0))>>10, rss0>>10, rss1>>10, (int64(rss1)-int64(rss0))>>10)
	if heap1 > heap0+soakHeapGrowth {
		t.Errorf("the heap grew by %d KiB over %d invokes; the bound is %d KiB", (heap1-heap0)>>10, soakInvokes, soakHeapGrowth>>10)
	}
	if rss1 > rss0+soakRSSGrowth {
		t.Errorf("the resident set grew by %d KiB over %d invokes; the bound is %d KiB", (rss1-rss0)>>10, soakInvokes, soakRSSGrowth>>10)
	}
}

// settledMemory is the live heap and the resident set after a full
// collection that returns freed memory to the system.
func settledMemory(t *testing.T) (heap, rss uint64) {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, proctest.ResidentBytes(t)
}
