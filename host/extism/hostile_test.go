package extism_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

// deadlineSlack is how long past its deadline a call may end: wazero
// and the host end it within a scheduler tick (about 10 ms when the
// machine is idle), and the rest is room for a loaded 2-core CI machine.
const deadlineSlack = 400 * time.Millisecond

func wasmFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../testdata/" + name)
	if err != nil {
		t.Fatalf("%v (run `make fixtures`)", err)
	}
	return b
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// TestHostileExtism: an Extism plug-in loads through its own path (the
// go-sdk's runtime), and must meet the same table cap and deadlines as a
// moat plugin.
func TestHostileExtism(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, nil, nil)
	ann := policy.Principal{User: "ann", Org: "acme"}

	_, err := h.Load(ctx, wasmFixture(t, "hostile_extismtable.wasm"), host.LoadOptions{Name: "bigtable"})
	if host.CodeOf(err) != abi.CodeMemoryLimit || !strings.Contains(err.Error(),
		"table 0 declares 100000000 elements at its minimum; a module's tables may hold at most 1048576 elements") {
		t.Fatalf("big table: %v", err)
	}

	m, err := h.Load(ctx, wasmFixture(t, "hostile_extism.wasm"), host.LoadOptions{Name: "hostile-extism",
		Limits: host.Limits{Timeout: time.Second, MemoryLimitPages: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if m.Kind() != host.KindExtism {
		t.Fatalf("kind %s", m.Kind())
	}
	tests := []struct {
		action string
		code   abi.Code
		reason string
		within time.Duration
	}{
		// table.grow of 2^26 returns -1: the function returns 0 (ok).
		{action: "tablegrow", within: time.Second},
		{action: "sleep", code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{action: "spin", code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{action: "tablegrow", within: time.Second}, // again, on a pooled instance
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			heap0 := heapInUse()
			start := time.Now()
			_, err := m.Invoke(ctx, host.Request{Action: tt.action, Principal: ann})
			took := time.Since(start)
			switch {
			case tt.code == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.code != "" && (host.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.reason)):
				t.Fatalf("err %v, want %s containing %q", err, tt.code, tt.reason)
			}
			if took > tt.within {
				t.Errorf("took %s, want at most %s", took, tt.within)
			}
			if d := heapInUse() - heap0; d > 64<<20 {
				t.Errorf("the host's heap grew by %d MiB", d>>20)
			}
		})
	}
}
