package host_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
)

// hostileCase is one attack on the host by a WASM guest, and exactly how
// the host must answer it.
type hostileCase struct {
	name string
	// the module: a fixture (testdata/NAME) or bytes built here
	fixture string
	wasm    func(t *testing.T) []byte
	limits  host.Limits // LoadOptions.Limits
	// what to do with it: nothing (a load case), invoke action with input,
	// or run the command with args and stdin
	action      string
	input       string
	run         bool
	args        []string
	stdin       func(t *testing.T) io.Reader
	callLimits  host.Limits   // Request.Limits / RunRequest.Limits
	cancelAfter time.Duration // cancel the caller's context after this
	// the outcome
	code   abi.Code // the error's code; "" for success
	reason string   // a fragment of the error (of Load when code is set and there is nothing to do)
	output string   // hex of the output of a successful invoke
	exit   uint32   // the exit code of a successful run
	within time.Duration
}

// deadlineSlack is how long past its deadline a call may end: wazero
// and the host end it within a scheduler tick (about 10 ms when the
// machine is idle), and the rest is room for a loaded 2-core CI machine.
const deadlineSlack = 400 * time.Millisecond

// le32 is the hex of a little-endian i32: what the hostile plugin's
// actions answer.
func le32(v int32) string {
	return hex.EncodeToString(binary.LittleEndian.AppendUint32(nil, uint32(v)))
}

func hexOf(s string) string { return hex.EncodeToString([]byte(s)) }

// blockingPipe is a stdin that never delivers a byte: an os.Pipe whose
// writer stays open until the test ends.
func blockingPipe(t *testing.T) io.Reader {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); r.Close() })
	return r
}

// blockingReader is a stdin that is not a file and never delivers a byte.
func blockingReader(t *testing.T) io.Reader {
	r, w := io.Pipe()
	t.Cleanup(func() { w.Close(); r.Close() })
	return r
}

func hostileCases() []hostileCase {
	plugin := host.Limits{Timeout: time.Second, MemoryLimitPages: 64}
	cmd := host.Limits{Timeout: time.Second}
	junk := func(b []byte) func(*testing.T) []byte { return func(*testing.T) []byte { return b } }
	truncated := func(t *testing.T) []byte { b := fixture(t, "plugin.wasm"); return b[:len(b)/2] }
	random := func(*testing.T) []byte {
		r := rand.New(rand.NewPCG(12, 34))
		b := []byte("\x00asm\x01\x00\x00\x00")
		for range 4096 {
			b = append(b, byte(r.UintN(256)))
		}
		return b
	}
	initTrap := func(t *testing.T) []byte {
		b := bytes.Clone(fixture(t, "hostile_init.wasm"))
		i := bytes.LastIndex(b, []byte("s"))
		b[i] = 'x' // the data byte that makes _initialize trap
		return b
	}
	return []hostileCase{
		// Junk and truncated modules: refused at load, nothing runs.
		{name: "empty module", wasm: junk(nil), code: abi.CodeBadModule, reason: "the module is empty (0 bytes)"},
		{name: "text format", wasm: junk([]byte("(module)")), code: abi.CodeBadModule, reason: "WebAssembly text (.wat)"},
		{name: "an executable", wasm: junk([]byte("\x7fELF\x02\x01\x01")), code: abi.CodeBadModule, reason: `not a WebAssembly binary: it starts with "\x7fELF"`},
		{name: "magic only", wasm: junk([]byte("\x00asm")), code: abi.CodeBadModule, reason: "shorter than the 8-byte header"},
		{name: "version 2", wasm: junk([]byte("\x00asm\x02\x00\x00\x00")), code: abi.CodeBadModule, reason: "binary format version 2"},
		{name: "truncated module", wasm: truncated, code: abi.CodeBadModule, reason: "past the end of the module"},
		{name: "section size overflows", wasm: junk([]byte("\x00asm\x01\x00\x00\x00\x01\xff\xff\xff\xff\xff")), code: abi.CodeBadModule, reason: "LEB128"},
		{name: "random bytes", wasm: random, code: abi.CodeBadModule, reason: "invalid WebAssembly"},

		// Imports moat lacks: refused at load, naming the import.
		{name: "import of another module", fixture: "badimport.wasm", code: abi.CodeBadModule, reason: "which this host does not provide"},
		{name: "import of a moat function that does not exist", fixture: "hostile_importfunc.wasm", code: abi.CodeBadModule,
			reason: `imports moat.exec, which the "moat" module does not export (it exports: call)`},
		{name: "WASI import with the wrong signature", fixture: "hostile_wasisig.wasm", code: abi.CodeBadModule,
			reason: "imports wasi_snapshot_preview1.fd_write as (i64) -> (i64); the host's is (i32, i32, i32, i32) -> (i32)"},
		{name: "import of a table", fixture: "hostile_importtable.wasm", code: abi.CodeBadModule,
			reason: "imports the table env.table: this host provides functions only"},
		{name: "import of a memory", fixture: "hostile_importmemory.wasm", code: abi.CodeBadModule,
			reason: "imports the memory moat.memory: this host provides functions only"},

		// Huge declarations: refused before the host allocates them.
		{name: "table of 10^8 at its minimum", fixture: "hostile_bigtable.wasm", code: abi.CodeMemoryLimit,
			reason: "table 0 declares 100000000 elements at its minimum; a module's tables may hold at most 1048576 elements (8 MiB of host memory): raise Limits.MaxTableElements"},
		{name: "two tables over the cap together", fixture: "hostile_twotables.wasm", code: abi.CodeMemoryLimit,
			reason: "table 0 (600000) and table 1 (600000) together declare 1200000 elements at its minimum"},
		{name: "a table over a lowered cap", fixture: "hostile_cmd.wasm", limits: host.Limits{MaxTableElements: 1}, run: true, args: []string{"table"},
			code: "", exit: 7},
		{name: "two tables under a raised cap", fixture: "hostile_twotables.wasm", limits: host.Limits{MaxTableElements: 2 << 20}, run: true, exit: 0},
		{name: "4 GiB of initial memory", fixture: "hostile_hugemem.wasm", run: true, code: abi.CodeMemoryLimit,
			reason: "the module declares an initial memory of 65536 pages (4096 MiB), over the limit of 2048 pages (128 MiB)"},

		// Declarations that cost the host far more than their bytes.
		{name: "70000 globals", wasm: manyModule(6, 70000), code: abi.CodeMemoryLimit,
			reason: "the module defines 70000 globals; this host loads at most 65536"},
		{name: "300000 functions", wasm: manyModule(3, 300000), code: abi.CodeMemoryLimit,
			reason: "the module defines 300000 functions; this host loads at most 262144"},
		{name: "70000 element segments", wasm: manyModule(9, 70000), code: abi.CodeMemoryLimit,
			reason: "the module defines 70000 element segments; this host loads at most 65536"},
		{name: "70000 data segments", wasm: manyModule(11, 70000), code: abi.CodeMemoryLimit,
			reason: "the module defines 70000 data segments; this host loads at most 65536"},
		{name: "60000 globals run", wasm: manyModule(6, 60000), run: true, exit: 0},
		{name: "200000 functions run", wasm: manyModule(3, 200000), run: true, exit: 0},

		// Start functions and _initialize: bounded by the deadline at load.
		{name: "start function loops forever", fixture: "hostile_startloop.wasm", limits: host.Limits{Timeout: 300 * time.Millisecond},
			code: abi.CodeTimeout, reason: "instantiation (the start function and _initialize) did not finish within 300ms", within: 600 * time.Millisecond},
		{name: "_initialize sleeps 20 s", fixture: "hostile_init.wasm", limits: host.Limits{Timeout: time.Second},
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "_initialize traps", wasm: initTrap, code: abi.CodeTrap, reason: "instantiation failed: _initialize: wasm error: unreachable"},

		// Tables at run time: table.grow past the cap returns -1 and the guest goes on.
		{name: "table.grow of 2^26", fixture: "hostile_plugin.wasm", limits: plugin, action: "tablegrow", output: le32(-1)},
		{name: "table grown until refused", fixture: "hostile_plugin.wasm", limits: plugin, action: "tablegrowloop", output: le32(1 + 15*65536)},
		{name: "table grown until refused, cap 1000", fixture: "hostile_plugin.wasm", limits: host.Limits{Timeout: time.Second, MaxTableElements: 1000},
			action: "tablegrowloop", output: le32(1)},
		{name: "table.grow of 2^26 in a command", fixture: "hostile_cmd.wasm", limits: cmd, run: true, args: []string{"table"}, exit: 7},
		// A command that survives its refused memory.grow and exits 0 ran: exit 0, not memory_limit.
		{name: "memory.grow refused in a command, survived", fixture: "hostile_cmd.wasm", limits: cmd, run: true, args: []string{"memory"}, exit: 0},

		// Linear memory: growth past the limit or past 4 GiB fails, the guest goes on.
		{name: "memory.grow to 4 GiB and by 0xFFFFFFFF pages", fixture: "hostile_plugin.wasm", limits: plugin, action: "memgrowmax", output: le32(-1) + le32(-1)},
		{name: "memory grown page by page to the limit", fixture: "hostile_plugin.wasm", limits: plugin, action: "memgrowlimit", output: le32(64)},
		{name: "a lower limit gets an instance within it", fixture: "hostile_plugin.wasm", limits: plugin, action: "memgrowlimit",
			callLimits: host.Limits{MemoryLimitPages: 16}, output: le32(16)},

		// Sleeping and blocking host calls end at the deadline.
		{name: "poll_oneoff sleeps 20 s", fixture: "hostile_plugin.wasm", limits: plugin, action: "sleep",
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "poll_oneoff sleeps 20 s then returns at once", fixture: "hostile_plugin.wasm", limits: plugin, action: "sleepthenreturn",
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "1 ms sleeps forever", fixture: "hostile_plugin.wasm", limits: plugin, action: "sleeploop",
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "host calls in a tight loop", fixture: "hostile_plugin.wasm", limits: plugin, action: "opflood",
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "caller cancels a sleep", fixture: "hostile_plugin.wasm", limits: plugin, action: "sleep", cancelAfter: 100 * time.Millisecond,
			code: abi.CodeCanceled, reason: "the caller canceled the invocation", within: 300 * time.Millisecond},
		{name: "command sleeps 20 s", fixture: "hostile_cmd.wasm", limits: cmd, run: true, args: []string{"sleep"},
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "command reads a stdin file that never writes", fixture: "hostile_cmd.wasm", limits: cmd, run: true, args: []string{"read"}, stdin: blockingPipe,
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "command reads a stdin reader that never writes", fixture: "hostile_cmd.wasm", limits: cmd, run: true, args: []string{"read"}, stdin: blockingReader,
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "command polls a silent stdin file for 20 s", fixture: "hostile_cmd.wasm", limits: cmd, run: true, args: []string{"pollstdin"}, stdin: blockingPipe,
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "command polls a silent stdin reader for 20 s", fixture: "hostile_cmd.wasm", limits: cmd, run: true, args: []string{"pollstdin"}, stdin: blockingReader,
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "command polls a ready stdin", fixture: "hostile_cmd.wasm", limits: cmd, run: true, args: []string{"pollstdin"},
			stdin: func(*testing.T) io.Reader { return strings.NewReader("x") }, exit: 0, within: 500 * time.Millisecond},
		{name: "command spins", fixture: "hostile_cmd.wasm", limits: cmd, run: true, args: []string{"x"},
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},

		// The stack: exhaustion is a trap, not a crashed host.
		// The stack's limit ends it, not the clock: a deadline a loaded
		// machine cannot reach first.
		{name: "unbounded recursion", fixture: "hostile_plugin.wasm", limits: host.Limits{Timeout: 10 * time.Second, MemoryLimitPages: 64}, action: "recurse", code: abi.CodeTrap, reason: "stack overflow"},

		// Bad pointers and lengths passed to moat.call.
		{name: "request outside memory", fixture: "hostile_plugin.wasm", limits: plugin, action: "callbadreq",
			code: abi.CodeGuestFault, reason: `guest fault in op "config.get": request [4294967280, +100) is outside guest memory`},
		{name: "op name pointer plus length overflows", fixture: "hostile_plugin.wasm", limits: plugin, action: "calloverflow",
			code: abi.CodeGuestFault, reason: "op name [4294967040, +512) is outside guest memory"},
		{name: "request of 0xFFFFFFFF bytes", fixture: "hostile_plugin.wasm", limits: plugin, action: "calllenmax",
			code: abi.CodeGuestFault, reason: "request [0, +4294967295) is outside guest memory"},
		{name: "reply buffer outside memory", fixture: "hostile_plugin.wasm", limits: plugin, action: "callbadresp",
			code: abi.CodeGuestFault, reason: "reply buffer [4294967040, +4096) is outside guest memory"},
		// A 4 GiB reply buffer: the host writes only the 26-byte reply
		// (and the action returns the raw status as its output pointer 0).
		{name: "reply buffer claiming 4 GiB", fixture: "hostile_plugin.wasm", limits: plugin, action: "callrespcapmax",
			output: hexOf("noop\necho\ntablegrow\ntableg")},

		// Bad outputs.
		{name: "output of 2^31-1 bytes", fixture: "hostile_plugin.wasm", limits: plugin, action: "outlenmax",
			code: abi.CodeOutputTooLarge, reason: "output is 2147483647 bytes; the limit is 1048576"},
		{name: "output pointer plus length overflows", fixture: "hostile_plugin.wasm", limits: plugin, action: "outoverflow",
			code: abi.CodeGuestFault, reason: "moat_invoke returned output [4294967280, +256) outside guest memory"},
		{name: "proc_exit during an action", fixture: "hostile_plugin.wasm", limits: plugin, action: "exit",
			code: abi.CodeTrap, reason: "the guest exited with code 3 during the action"},

		// A moat_alloc that lies.
		{name: "moat_alloc returns 0xFFFFFFFF", fixture: "hostile_plugin.wasm", limits: plugin, action: "echo", input: "x",
			code: abi.CodeGuestFault, reason: "moat_alloc(1) returned 4294967295: the buffer is outside guest memory"},
		{name: "moat_alloc returns the last byte", fixture: "hostile_plugin.wasm", limits: plugin, action: "echo", input: "xy",
			code: abi.CodeGuestFault, reason: "moat_alloc(2) returned 131071: the buffer is outside guest memory (131072 bytes)"},
		{name: "moat_alloc returns its own data", fixture: "hostile_plugin.wasm", limits: plugin, action: "echo", input: "abc", output: hexOf("abc")},
		{name: "moat_alloc traps", fixture: "hostile_plugin.wasm", limits: plugin, action: "echo", input: "abcd",
			code: abi.CodeTrap, reason: "wasm error: unreachable"},
		{name: "moat_alloc loops", fixture: "hostile_plugin.wasm", limits: plugin, action: "echo", input: "abcde",
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
		{name: "moat_alloc sleeps 20 s", fixture: "hostile_plugin.wasm", limits: plugin, action: "echo", input: "abcdef",
			code: abi.CodeTimeout, reason: "did not finish within 1s", within: time.Second + deadlineSlack},
	}
}

// manyModule builds a command (_start is function 0) whose section id
// declares n entries: functions (3), immutable i32 globals (6), passive
// element segments (9) or passive data segments (11).
func manyModule(id byte, n int) func(*testing.T) []byte {
	return func(*testing.T) []byte {
		section := func(id byte, body []byte) []byte {
			return append(binary.AppendUvarint([]byte{id}, uint64(len(body))), body...)
		}
		vec := func(n int, item []byte) []byte {
			b := binary.AppendUvarint(nil, uint64(n))
			for range n {
				b = append(b, item...)
			}
			return b
		}
		funcs := 1
		if id == 3 {
			funcs = n
		}
		m := []byte("\x00asm\x01\x00\x00\x00")
		m = append(m, section(1, []byte{1, 0x60, 0, 0})...) // type 0: () -> ()
		m = append(m, section(3, vec(funcs, []byte{0}))...)
		if id == 11 {
			m = append(m, section(5, []byte{1, 0, 1})...) // memory 1
		}
		if id == 6 {
			m = append(m, section(6, vec(n, []byte{0x7f, 0, 0x41, 0, 0x0b}))...) // i32 const 0
		}
		m = append(m, section(7, []byte{1, 6, '_', 's', 't', 'a', 'r', 't', 0, 0})...)
		if id == 9 {
			m = append(m, section(9, vec(n, []byte{1, 0, 1, 0}))...) // passive, funcref, [func 0]
		}
		if id == 11 {
			m = append(m, section(12, binary.AppendUvarint(nil, uint64(n)))...)
		}
		m = append(m, section(10, vec(funcs, []byte{2, 0, 0x0b}))...) // empty bodies
		if id == 11 {
			m = append(m, section(11, vec(n, []byte{1, 1, 'x'}))...) // passive, "x"
		}
		return m
	}
}

// TestHostile runs the corpus. Each case asserts the exact outcome, that
// it came in time, that the host's heap did not grow past a bound, and
// that the module (and host) still serve a good call afterwards.
func TestHostile(t *testing.T) {
	h := newHost(t, nil)
	ctx := context.Background()
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			var wasm []byte
			if tc.fixture != "" {
				wasm = fixture(t, tc.fixture)
			} else {
				wasm = tc.wasm(t)
			}
			within := tc.within
			if within == 0 {
				within = 5 * time.Second
			}
			heap0, rss0 := heapInUse(), rssBytes(t)
			start := time.Now()
			m, err := h.Load(ctx, wasm, host.LoadOptions{Name: "hostile", Limits: tc.limits})
			loadCase := tc.action == "" && !tc.run
			if loadCase {
				checkOutcome(t, err, tc.code, tc.reason)
				if err == nil {
					t.Fatal("a load case that loads: give it something to do")
				}
			} else {
				if err != nil {
					t.Fatalf("load: %v", err)
				}
				defer m.Close(ctx)
				cctx := ctx
				if tc.cancelAfter > 0 {
					var cancel context.CancelFunc
					cctx, cancel = context.WithCancel(ctx)
					timer := time.AfterFunc(tc.cancelAfter, cancel)
					defer timer.Stop()
					defer cancel()
				}
				start = time.Now()
				if tc.run {
					var stdin io.Reader
					if tc.stdin != nil {
						stdin = tc.stdin(t)
					}
					res, err := m.Run(cctx, host.RunRequest{Args: tc.args, Stdin: stdin, Principal: ann, Limits: tc.callLimits})
					checkOutcome(t, err, tc.code, tc.reason)
					if err == nil && res.ExitCode != tc.exit {
						t.Errorf("exit code %d, want %d", res.ExitCode, tc.exit)
					}
				} else {
					res, err := m.Invoke(cctx, host.Request{Action: tc.action, Input: []byte(tc.input), Principal: ann, Limits: tc.callLimits})
					checkOutcome(t, err, tc.code, tc.reason)
					if got := hex.EncodeToString(res.Output); err == nil && got != tc.output {
						t.Errorf("output %s, want %s", got, tc.output)
					}
				}
			}
			if took := time.Since(start); took > within {
				t.Errorf("took %s, want at most %s", took, within)
			}
			// The host did not pay for the attack: its heap and RSS stay
			// within a bound well under what an unbounded table (512 MiB),
			// a sleeping pool or a 4 GiB memory would cost.
			if d := heapInUse() - heap0; d > 64<<20 {
				t.Errorf("the host's heap grew by %d MiB", d>>20)
			}
			if d := rssBytes(t) - rss0; d > 192<<20 {
				t.Errorf("the host's RSS grew by %d MiB", d>>20)
			}
			// And the module still serves.
			if m != nil && tc.action != "" {
				if res, err := m.Invoke(ctx, host.Request{Action: "echo", Input: []byte("still here"), Principal: ann}); err != nil || string(res.Output) != "still here" {
					t.Fatalf("after the attack: %q, %v", res.Output, err)
				}
			}
		})
	}
	// The host itself still loads and serves.
	m := loadPlugin(t, h, host.LoadOptions{})
	if got, err := invoke(m, "echo", "ok"); err != nil || got != "ok" {
		t.Fatalf("after the corpus: %q, %v", got, err)
	}
}

// TestHostilePooledTableStaysBounded: a pooled instance keeps its table
// between calls (like its globals), so the cap must hold across calls, not
// per call.
func TestHostilePooledTableStaysBounded(t *testing.T) {
	h := newHost(t, nil)
	m, err := h.Load(context.Background(), fixture(t, "hostile_plugin.wasm"), host.LoadOptions{Name: "pooled", MaxIdle: 1,
		Limits: host.Limits{MaxTableElements: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	heap0 := heapInUse()
	for i := range 50 {
		res, err := m.Invoke(context.Background(), host.Request{Action: "tablegrow", Principal: ann})
		if err != nil || hex.EncodeToString(res.Output) != le32(-1) {
			t.Fatalf("call %d: %x, %v", i, res.Output, err)
		}
		res, err = m.Invoke(context.Background(), host.Request{Action: "tablegrowloop", Principal: ann})
		if err != nil || hex.EncodeToString(res.Output) != le32(1+65536) {
			t.Fatalf("call %d: %x, %v", i, res.Output, err)
		}
	}
	res, err := m.Invoke(context.Background(), host.Request{Action: "tablesize", Principal: ann})
	if err != nil || hex.EncodeToString(res.Output) != le32(1+65536) {
		t.Fatalf("table size %x, %v; want %d", res.Output, err, 1+65536)
	}
	if d := heapInUse() - heap0; d > 16<<20 {
		t.Errorf("100 table attacks grew the heap by %d MiB", d>>20)
	}
}

func checkOutcome(t *testing.T, err error, code abi.Code, reason string) {
	t.Helper()
	if code == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if got := abi.CodeOf(err); got != code {
		t.Fatalf("code %q (%v), want %q", got, err, code)
	}
	if !strings.Contains(err.Error(), reason) {
		t.Fatalf("error %q does not contain %q", err, reason)
	}
}

// heapInUse is the Go heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// rssBytes is the process's resident set.
func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
