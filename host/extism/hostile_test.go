package extism_test

import (
	"context"
	"encoding/binary"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/hostile"
	"github.com/moat-sandbox/moat/internal/testenv"
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
	testenv.Timing(t)
	ctx := context.Background()
	h := newHost(t, nil, nil)
	ann := policy.Principal{User: "ann", Org: "acme"}

	_, err := h.Load(ctx, wasmFixture(t, "hostile_extismtable.wasm"), host.LoadOptions{Name: "bigtable"})
	if abi.CodeOf(err) != abi.CodeMemoryLimit || !strings.Contains(err.Error(),
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
			case tt.code != "" && (abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.reason)):
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

// extismCallTree is an Extism plug-in (it imports the kernel's
// input_length) whose function tree calls f_60, where f_0 does nothing and
// f_{i+1} calls f_i twice: 2^60 calls and no loop, which wazero's
// CloseOnContextDone (loop headers only) never stops.
func extismCallTree() []byte {
	sec := func(id byte, body []byte) []byte {
		return append(binary.AppendUvarint([]byte{id}, uint64(len(body))), body...)
	}
	vec := func(items ...[]byte) []byte {
		b := binary.AppendUvarint(nil, uint64(len(items)))
		for _, it := range items {
			b = append(b, it...)
		}
		return b
	}
	name := func(s string) []byte { return append(binary.AppendUvarint(nil, uint64(len(s))), s...) }
	const depth = 60
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, sec(1, vec([]byte{0x60, 0, 0}, []byte{0x60, 0, 1, 0x7f}, []byte{0x60, 0, 1, 0x7e}))...)
	m = append(m, sec(2, vec(append(append(name("extism:host/env"), name("input_length")...), 0x00, 0x02)))...)
	funcs := make([][]byte, depth+2)
	for i := range funcs {
		funcs[i] = []byte{0}
	}
	funcs[depth+1] = []byte{1} // tree: () -> i32
	m = append(m, sec(3, vec(funcs...))...)
	m = append(m, sec(5, []byte{1, 0, 1})...)
	m = append(m, sec(7, vec(append(name("tree"), 0x00, depth+2), append(name("memory"), 0x02, 0x00)))...)
	bodies := [][]byte{{2, 0, 0x0b}}
	for i := 1; i <= depth; i++ {
		bodies = append(bodies, []byte{6, 0, 0x10, byte(i), 0x10, byte(i), 0x0b}) // f_i is function i+1 (after the import)
	}
	bodies = append(bodies, []byte{6, 0, 0x10, depth + 1, 0x41, 0, 0x0b})
	return append(m, sec(10, vec(bodies...))...)
}

// TestExtismCallTreeDeadline: an Extism plug-in's call tree ends at its
// deadline, as a moat plugin's does (driver.Spec.Deadline), and the
// process spends no more CPU on it afterwards.
func TestExtismCallTreeDeadline(t *testing.T) {
	testenv.Timing(t)
	ctx := context.Background()
	h := newHost(t, nil, nil)
	m, err := h.Load(ctx, extismCallTree(), host.LoadOptions{Name: "tree", Limits: host.Limits{Timeout: time.Second, MemoryLimitPages: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if m.Kind() != host.KindExtism {
		t.Fatalf("kind %s, want extism", m.Kind())
	}
	for range 2 { // a fresh instance, then after one that ended at its deadline
		start := time.Now()
		_, err = m.Invoke(ctx, host.Request{Action: "tree", Principal: policy.Principal{User: "ann", Org: "acme"}})
		if abi.CodeOf(err) != abi.CodeTimeout || !strings.Contains(err.Error(), "did not finish within 1s") {
			t.Fatalf("err %v, want a timeout", err)
		}
		if took := time.Since(start); took > time.Second+deadlineSlack {
			t.Errorf("took %s", took)
		}
	}
	cpu0 := hostile.ProcessCPU()
	time.Sleep(300 * time.Millisecond)
	if used := hostile.ProcessCPU() - cpu0; used > 150*time.Millisecond {
		t.Errorf("%s of CPU in the 300 ms after the calls ended", used)
	}
}
