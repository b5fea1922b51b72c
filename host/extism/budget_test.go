package extism_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/policy"
)

// allocated is the bytes the process allocated on the heap while f ran
// (runtime.MemStats.TotalAlloc: cumulative, so a buffer the host made and
// dropped again counts as much as one it kept).
func allocated(f func()) int64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

// budgetDecisions are the deny decisions the host recorded for the limit
// knob in the invocation correlation.
func budgetDecisions(t *testing.T, h *host.Host, correlation, knob string) int {
	t.Helper()
	ctx := context.Background()
	if err := hosttest.Audit(h).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := hosttest.Audit(h).Query(ctx, audit.Filter{Kind: audit.KindDecision, Decision: audit.Deny, CorrelationID: correlation})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Rule == knob {
			n++
		}
	}
	return n
}

// loadBudgetPlugin loads the hostile budget fixture with opts, closed when
// the test ends.
func loadBudgetPlugin(t *testing.T, h *host.Host, opts host.LoadOptions) *host.Module {
	t.Helper()
	m, err := h.Load(context.Background(), wasmFixture(t, "hostile_extismbudget.wasm"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// le is the little-endian u64s the fixture reads with input_load_u64.
func le(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

const budgetManifest = `
name: budget
version: 1.0.0
kind: extism
actions: [{name: bigcall}, {name: fetch}, {name: logs}, {name: names}, {name: seterror}]
%s`

// TestExtismMoatCallBudget: moat_call's op name and request are checked
// against abi.MaxRequestBytes and the invocation's budget before the host
// copies them out of the plug-in's memory. The plug-in (the hostile WAT
// fixture) makes one request block and calls moat_call with it eight
// times; a host that copied first allocated eight times its size.
func TestExtismMoatCallBudget(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, nil, nil)
	m := loadBudgetPlugin(t, h, host.LoadOptions{
		Manifest: manifest(t, fmt.Sprintf(budgetManifest, "")), MaxIdle: 1,
		Limits: host.Limits{Timeout: 10 * time.Second, MemoryLimitPages: 2048},
	})
	tests := []struct {
		name            string
		reqLen, opLen   uint64
		op              string
		budget          budget.Limits
		code            abi.Code
		msg             string
		knob            string // the limit whose first hit is audited, once
		maxAlloc        int64  // bytes the host may allocate in the measured call
		reachedDispatch bool
	}{
		{name: "a small request reaches the op", reqLen: 64, op: "config.get",
			code: abi.CodeInvalidArgument, maxAlloc: 1 << 20, reachedDispatch: true},
		{name: "a request over abi.MaxRequestBytes", reqLen: 64 << 20, op: "config.get",
			code: abi.CodeTooLarge, msg: "the request is 67108864 bytes; the limit is 4194304 (abi.MaxRequestBytes)", maxAlloc: 2 << 20},
		{name: "a request past the invocation's held bytes", reqLen: 3 << 20, op: "config.get", budget: budget.Limits{HeldBytes: 1 << 20},
			code: abi.CodeResourceExhausted, msg: "the limit is 1048576 (limits.budget.held_bytes)", knob: budget.KnobHeldBytes, maxAlloc: 2 << 20},
		{name: "an op name longer than any op", reqLen: 64, opLen: 32 << 20, op: "config.get",
			code: abi.CodeUnknownOp, msg: "the op name is 33554432 bytes; no op's name is longer than 256", maxAlloc: 2 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const times = 8
			req := host.Request{Action: "bigcall", Input: append(le(tt.reqLen, tt.opLen, times), tt.op...), Principal: ann,
				Limits: host.Limits{Budget: tt.budget}}
			// Once to grow the pooled instance's memory to the blocks'
			// size (the guest's own, which its memory limit bounds), then
			// measured: what the host allocates beside it.
			if _, err := m.Invoke(ctx, req); err != nil {
				t.Fatal(err)
			}
			req.CorrelationID = "measured-" + strings.ReplaceAll(tt.name, " ", "-")
			var res host.Result
			var err error
			alloc := allocated(func() { res, err = m.Invoke(ctx, req) })
			if err != nil {
				t.Fatal(err)
			}
			var reply struct {
				Resp  json.RawMessage `json:"resp"`
				Error *abi.Error      `json:"error"`
			}
			if err := json.Unmarshal(res.Output, &reply); err != nil || reply.Error == nil {
				t.Fatalf("reply %.300q (%v), want an error reply", res.Output, err)
			}
			if reply.Error.Code != tt.code || !strings.Contains(reply.Error.Message, tt.msg) {
				t.Fatalf("reply error %v, want %s containing %q", reply.Error, tt.code, tt.msg)
			}
			if alloc > tt.maxAlloc {
				t.Errorf("the host allocated %d KiB during the call (8 moat_calls); the bound is %d KiB", alloc>>10, tt.maxAlloc>>10)
			}
			if tt.knob != "" {
				if n := budgetDecisions(t, h, req.CorrelationID, tt.knob); n != 1 {
					t.Errorf("%d deny decisions with rule %s for %d refused calls, want exactly 1", n, tt.knob, times)
				}
			}
			t.Logf("host allocated %d KiB for 8 calls", alloc>>10)
		})
	}
}

// TestExtismLogBudget: Extism's own log functions (log_info and the
// others, which the go-sdk implements by copying the whole block and
// logging it) are charged to the invocation's log budget like moat's
// log.write: a message is cut at abi.MaxLogMessage before the host copies
// it, and past limits.budget.log_records or log_bytes records are
// dropped, the first drop audited.
func TestExtismLogBudget(t *testing.T) {
	ctx := context.Background()
	logs := &syncBuffer{}
	h := newHost(t, nil, logs)
	m := loadBudgetPlugin(t, h, host.LoadOptions{
		Manifest: manifest(t, fmt.Sprintf(budgetManifest, "")),
		Limits:   host.Limits{Timeout: 10 * time.Second, MemoryLimitPages: 2048},
	})
	tests := []struct {
		name        string
		size, count uint64
		budget      budget.Limits
		records     int
		knob        string
	}{
		{name: "a 4 MiB message is cut", size: 4 << 20, count: 1, records: 1},
		{name: "records past log_records are dropped", size: 10, count: 50, budget: budget.Limits{LogRecords: 5}, records: 5, knob: budget.KnobLogRecords},
		{name: "records past log_bytes are dropped", size: 16 << 10, count: 10, budget: budget.Limits{LogBytes: 64 << 10}, records: 4, knob: budget.KnobLogBytes},
		{name: "within the budget", size: 100, count: 20, records: 20},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			corr := fmt.Sprintf("log-budget-%d", i)
			if _, err := m.Invoke(ctx, host.Request{Action: "logs", Input: le(tt.size, tt.count), Principal: ann, CorrelationID: corr,
				Limits: host.Limits{Budget: tt.budget}}); err != nil {
				t.Fatal(err)
			}
			records := 0
			for _, line := range strings.Split(logs.String(), "\n") {
				var rec struct{ Level, Msg, Source string }
				// The fixture logs at info; the go-sdk's own records are debug.
				if json.Unmarshal([]byte(line), &rec) != nil || rec.Source != "guest" || rec.Level != "INFO" || !strings.Contains(line, `"correlation_id":"`+corr+`"`) {
					continue
				}
				records++
				if len(rec.Msg) > abi.MaxLogMessage+100 {
					t.Errorf("a guest log record of %d bytes reached the host's log; the limit is %d", len(rec.Msg), abi.MaxLogMessage)
				}
			}
			if records != tt.records {
				t.Errorf("%d guest records in the host's log, want %d", records, tt.records)
			}
			if tt.knob != "" {
				if n := budgetDecisions(t, h, corr, tt.knob); n != 1 {
					t.Errorf("%d deny decisions with rule %s, want exactly 1", n, tt.knob)
				}
			}
		})
	}
}

// TestExtismNamesBudget: config_get, var_get and var_set look at a name's
// or value's length before copying it (the go-sdk's copy the whole
// block): a name longer than every key is not found, a value that cannot
// fit in the vars is the go-sdk's "Variable store is full" trap, and
// lookups within the limits behave as the go-sdk's.
func TestExtismNamesBudget(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, nil, nil)
	m := loadBudgetPlugin(t, h, host.LoadOptions{
		Manifest: manifest(t, fmt.Sprintf(budgetManifest, "")), MaxIdle: 1, Config: map[string]string{"\x00\x00\x00\x00": "four zeros"},
		Limits: host.Limits{Timeout: 10 * time.Second, MemoryLimitPages: 2048},
	})
	tests := []struct {
		name               string
		size, count, value uint64
		found              bool
		code               abi.Code
		msg                string
		measure            bool
	}{
		// 8 config_get and 8 var_get of a 16 MiB name: the go-sdk copied 256 MiB.
		{name: "names longer than every key", size: 16 << 20, count: 8, measure: true},
		{name: "a config key of the same length is found", size: 4, count: 1, found: true},
		{name: "a var within the store", size: 8, count: 1, value: 1000},
		{name: "a var over the store", size: 8, count: 1, value: 64 << 20, code: abi.CodeTrap, msg: "Variable store is full"},
		{name: "a var name over the store", size: 2 << 20, count: 1, value: 10, code: abi.CodeTrap, msg: "Variable store is full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := host.Request{Action: "names", Input: le(tt.size, tt.count, tt.value), Principal: ann}
			if tt.measure { // once to grow the pooled instance's memory
				if _, err := m.Invoke(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			var res host.Result
			var err error
			alloc := allocated(func() { res, err = m.Invoke(ctx, req) })
			if tt.code != "" {
				if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("err %v, want %s containing %q", err, tt.code, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if found := binary.LittleEndian.Uint64(res.Output) != 0; found != tt.found {
				t.Fatalf("found %v, want %v", found, tt.found)
			}
			if tt.measure && alloc > 2<<20 {
				t.Errorf("the host allocated %d KiB for 16 lookups", alloc>>10)
			}
		})
	}
}

// hostileServer is a real loopback HTTP server that answers with what
// the attack needs.
type hostileServer struct {
	*httptest.Server
	written   atomic.Int64 // response body bytes the server got out
	received  atomic.Int64 // request body bytes it read
	hits      atomic.Int32
	active    atomic.Int32
	peak      atomic.Int32
	release   chan struct{}
	releaseMu sync.Once
}

func newHostileServer(t *testing.T) *hostileServer {
	s := &hostileServer{release: make(chan struct{})}
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'x'
	}
	// stream writes until n bytes are out or the client goes away.
	stream := func(w io.Writer, n int64) {
		for n > 0 {
			k, err := w.Write(chunk[:min(n, int64(len(chunk)))])
			s.written.Add(int64(k))
			n -= int64(k)
			if err != nil {
				return
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		switch r.URL.Path {
		case "/announced": // a Content-Length of n, then as much as the client takes
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			stream(w, n)
		case "/chunked": // n bytes with no Content-Length
			stream(w, n)
		case "/lying": // says 1 KiB, then sends n bytes on the raw connection
			conn, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\nConnection: close\r\n\r\n")
			stream(bw, n)
			bw.Flush()
		case "/upload": // reads the request body
			k, _ := io.Copy(io.Discard, r.Body)
			s.received.Add(k)
		case "/hold": // waits until released or the client goes away
			a := s.active.Add(1)
			for p := s.peak.Load(); a > p && !s.peak.CompareAndSwap(p, a); p = s.peak.Load() {
			}
			select {
			case <-s.release:
			case <-r.Context().Done():
			}
			s.active.Add(-1)
		}
	}))
	t.Cleanup(func() { s.releaseAll(); s.Close() })
	return s
}

func (s *hostileServer) releaseAll() { s.releaseMu.Do(func() { close(s.release) }) }

// loadFetcher loads the fixture with a grant of srv's address.
func loadFetcher(t *testing.T, srv *hostileServer, limits host.Limits, iso host.Isolation) (*host.Host, *host.Module) {
	t.Helper()
	u, _ := url.Parse(srv.URL)
	p := profile(t, fmt.Sprintf(`
name: egress
default:
  capabilities:
    http: [http://127.0.0.1:%s]
`, u.Port()))
	h := newHost(t, p, nil)
	m, err := h.Load(context.Background(), wasmFixture(t, "hostile_extismbudget.wasm"), host.LoadOptions{
		Manifest: manifest(t, fmt.Sprintf(budgetManifest, "capabilities: {http: [http://127.0.0.1:"+u.Port()+"]}")),
		Limits:   limits, Isolation: iso,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return h, m
}

// fetchInput is the fixture's fetch input: a body of bodyLen bytes (0:
// none) sent with the request for url, whose JSON is in a block of at
// least reqLen bytes.
func fetchInput(bodyLen, reqLen uint64, method, url string) []byte {
	b, _ := json.Marshal(map[string]string{"url": url, "method": method})
	return append(le(bodyLen, reqLen), b...)
}

// TestExtismHTTPBudget: an Extism plug-in's http_request holds no more
// than its invocation's budget and memory limit allow, against a real
// loopback server sending huge bodies, with and without a (lying)
// Content-Length, and with a request body over its cap.
func TestExtismHTTPBudget(t *testing.T) {
	ctx := context.Background()
	srv := newHostileServer(t)
	// Every call on a fresh instance, as after a refusal (which discards
	// the instance): what a call allocates is its instance's and what the
	// host allocates for the request, which must stay near the baseline.
	h, m := loadFetcher(t, srv, host.Limits{Timeout: 20 * time.Second, MemoryLimitPages: 2048}, host.IsolationFresh)
	var baseline int64
	for range 3 {
		baseline = max(baseline, allocated(func() {
			if _, err := m.Invoke(ctx, host.Request{Action: "fetch", Input: fetchInput(0, 0, "GET", srv.URL+"/announced?n=16"), Principal: ann}); err != nil {
				t.Fatal(err)
			}
		}))
	}
	t.Logf("baseline: a call allocates %d KiB", baseline>>10)
	tests := []struct {
		name     string
		method   string
		path     string
		body     uint64
		reqLen   uint64 // the request JSON's block
		limits   host.Limits
		code     abi.Code
		msg      string
		knob     string // a first hit of this limit is audited, once
		wantLen  uint64 // the response's length, when the call succeeds
		maxAlloc int64  // bytes the call may allocate beyond the baseline
		maxOut   int64  // response bytes the server may get out (kernel buffers hold a few MiB)
		maxIn    int64  // request body bytes the server may read
	}{
		{name: "a response within the limits", path: "/announced?n=100000", wantLen: 100000, maxAlloc: 4 << 20, maxOut: 100000},
		{name: "a Content-Length of 1 TiB is refused before the body is read", path: "/announced?n=1099511627776",
			code: abi.CodeTooLarge, msg: "the response body is 1099511627776 bytes or more; the limit is 8388608 (limits.budget.http_response_bytes)",
			knob: budget.KnobHTTPResponseBytes, maxAlloc: 1 << 20, maxOut: 32 << 20},
		{name: "a body with no length is cut at the response limit", path: "/chunked?n=1073741824", limits: host.Limits{Budget: budget.Limits{HTTPResponseBytes: 1 << 20}},
			code: abi.CodeTooLarge, msg: "the response body is 1048577 bytes or more; the limit is 1048576 (limits.budget.http_response_bytes)",
			knob: budget.KnobHTTPResponseBytes, maxAlloc: 4 << 20, maxOut: 32 << 20},
		{name: "a lying Content-Length is all the host reads", path: "/lying?n=268435456", wantLen: 1024, maxAlloc: 1 << 20, maxOut: 32 << 20},
		{name: "a response over the call's memory limit", path: "/announced?n=6291456", limits: host.Limits{MemoryLimitPages: 64},
			code: abi.CodeTooLarge, msg: "the call's memory limit leaves room for 4194304", maxAlloc: 1 << 20, maxOut: 32 << 20},
		{name: "a body with no length over the call's memory limit", path: "/chunked?n=1073741824", limits: host.Limits{MemoryLimitPages: 64},
			code: abi.CodeTooLarge, msg: "the call's memory limit leaves room for 4194304", maxAlloc: 10 << 20, maxOut: 32 << 20},
		{name: "a response past the invocation's held bytes", path: "/chunked?n=1073741824", limits: host.Limits{Budget: budget.Limits{HeldBytes: 512 << 10}},
			code: abi.CodeResourceExhausted, msg: "the limit is 524288 (limits.budget.held_bytes)", knob: budget.KnobHeldBytes, maxAlloc: 2 << 20, maxOut: 32 << 20},
		{name: "a request over abi.MaxRequestBytes is refused before it is copied", path: "/upload", reqLen: 64 << 20,
			code: abi.CodeTooLarge, msg: "http_request: the request is 67108864 bytes; the limit is 4194304 (abi.MaxRequestBytes)", maxAlloc: 160 << 20},
		{name: "a request body within its cap", method: "POST", path: "/upload", body: 512 << 10, limits: host.Limits{Budget: budget.Limits{HTTPRequestBytes: 1 << 20}},
			maxAlloc: 4 << 20, maxIn: 512 << 10},
		{name: "a request body over its cap is never sent", method: "POST", path: "/upload", body: 2 << 20, limits: host.Limits{Budget: budget.Limits{HTTPRequestBytes: 1 << 20}},
			code: abi.CodeTooLarge, msg: "the request body is 2097152 bytes or more; the limit is 1048576 (limits.budget.http_request_bytes)",
			knob: budget.KnobHTTPRequestBytes, maxAlloc: 8 << 20},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out0, in0, hits0 := srv.written.Load(), srv.received.Load(), srv.hits.Load()
			req := host.Request{Action: "fetch", Input: fetchInput(tt.body, tt.reqLen, tt.method, srv.URL+tt.path), Principal: ann,
				Limits: tt.limits, CorrelationID: fmt.Sprintf("http-budget-%d", i)}
			var res host.Result
			var err error
			alloc := allocated(func() { res, err = m.Invoke(ctx, req) }) - baseline
			if tt.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Output) != 16 {
					t.Fatalf("output %q", res.Output)
				}
				if n, status := binary.LittleEndian.Uint64(res.Output), binary.LittleEndian.Uint64(res.Output[8:]); n != tt.wantLen || status != 200 {
					t.Fatalf("response of %d bytes with status %d, want %d bytes, 200", n, status, tt.wantLen)
				}
			} else if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err %v, want %s containing %q", err, tt.code, tt.msg)
			}
			if alloc > tt.maxAlloc {
				t.Errorf("the call allocated %d KiB more than the baseline; the bound is %d KiB", alloc>>10, tt.maxAlloc>>10)
			}
			time.Sleep(50 * time.Millisecond) // let the handler see the client go
			if out := srv.written.Load() - out0; out > tt.maxOut {
				t.Errorf("the server got %d MiB of body out; the host should have stopped reading at %d MiB", out>>20, tt.maxOut>>20)
			}
			if in := srv.received.Load() - in0; in != tt.maxIn {
				t.Errorf("the server read %d request body bytes, want %d", in, tt.maxIn)
			}
			if tt.method == "POST" && tt.code != "" && srv.hits.Load() != hits0 {
				t.Errorf("a refused request body reached the server")
			}
			if tt.knob != "" {
				if n := budgetDecisions(t, h, req.CorrelationID, tt.knob); n != 1 {
					t.Errorf("%d deny decisions with rule %s, want exactly 1", n, tt.knob)
				}
			}
			t.Logf("%d KiB over the baseline; the server wrote %d KiB", alloc>>10, (srv.written.Load()-out0)>>10)
		})
	}
}

// TestExtismHTTPInFlight: at most 8 requests of one module are in flight
// at once, however many invocations ask. With 8 held by the server, the
// next calls wait within their deadline and end with timeout without
// reaching it; once the server answers, the 8 succeed and their slots
// serve new calls.
func TestExtismHTTPInFlight(t *testing.T) {
	ctx := context.Background()
	srv := newHostileServer(t)
	const inFlight, waiting = 8, 6
	_, m := loadFetcher(t, srv, host.Limits{Timeout: 10 * time.Second, MemoryLimitPages: 256}, host.IsolationPooled)
	hold := host.Request{Action: "fetch", Input: fetchInput(0, 0, "GET", srv.URL+"/hold"), Principal: ann}
	heap0 := heapInUse()
	// run starts n calls of req, counted in wg.
	run := func(wg *sync.WaitGroup, n int, req host.Request, errs []error, took []time.Duration) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				_, errs[i] = m.Invoke(ctx, req)
				took[i] = time.Since(start)
			}()
		}
	}
	var held, waited sync.WaitGroup
	heldErrs, heldTook := make([]error, inFlight), make([]time.Duration, inFlight)
	run(&held, inFlight, hold, heldErrs, heldTook)
	for deadline := time.Now().Add(5 * time.Second); srv.active.Load() < inFlight; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			srv.releaseAll()
			t.Fatalf("only %d of %d requests reached the server", srv.active.Load(), inFlight)
		}
	}
	short := hold
	short.Limits.Timeout = 500 * time.Millisecond
	waitErrs, waitTook := make([]error, waiting), make([]time.Duration, waiting)
	run(&waited, waiting, short, waitErrs, waitTook)
	waited.Wait()
	for i, err := range waitErrs {
		if abi.CodeOf(err) != abi.CodeTimeout || !strings.Contains(err.Error(), "did not finish within 500ms") {
			t.Errorf("waiting call %d: %v, want timeout", i, err)
		}
		if waitTook[i] > 500*time.Millisecond+deadlineSlack {
			t.Errorf("waiting call %d took %s", i, waitTook[i])
		}
	}
	if p, n := srv.peak.Load(), srv.hits.Load(); p != inFlight || n != inFlight {
		t.Errorf("the server saw %d requests at once and %d in all; want %d and %d", p, n, inFlight, inFlight)
	}
	if d := heapInUse() - heap0; d > 32<<20 {
		t.Errorf("the host's heap grew by %d MiB over %d calls", d>>20, inFlight+waiting)
	}
	srv.releaseAll()
	held.Wait()
	for i, err := range heldErrs {
		if err != nil {
			t.Errorf("held call %d: %v", i, err)
		}
	}
	// The slots came back: twice 8 calls at once, all served.
	for round := range 2 {
		var wg sync.WaitGroup
		errs, took := make([]error, inFlight), make([]time.Duration, inFlight)
		run(&wg, inFlight, hold, errs, took)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, call %d: %v", round, i, err)
			}
		}
	}
}

// TestExtismErrorReasonClipped: a plug-in's error_set message of any
// length becomes a reason of at most a few KiB (it travels into logs, the
// audit trail and HTTP problem details), saying how much was cut.
func TestExtismErrorReasonClipped(t *testing.T) {
	t.Parallel()
	const maxReason = 4 << 10 // the package's bound
	ctx := context.Background()
	h := newHost(t, nil, nil)
	m := loadBudgetPlugin(t, h, host.LoadOptions{
		Manifest: manifest(t, fmt.Sprintf(budgetManifest, "")), MaxIdle: 1,
		Limits: host.Limits{Timeout: 10 * time.Second, MemoryLimitPages: 256},
	})
	for _, n := range []uint64{10, maxReason, 64 << 10} { // filled byte by byte through store_u8: kept small
		_, err := m.Invoke(ctx, host.Request{Action: "seterror", Input: le(n), Principal: policy.Principal{User: "u", Org: "o"}})
		var he *host.Error
		if !errors.As(err, &he) || he.Code != abi.CodeGuestError {
			t.Fatalf("%d bytes: %v, want a guest_error", n, err)
		}
		want := strings.Repeat("e", int(min(n, maxReason)))
		if n > maxReason {
			want += fmt.Sprintf("…[%d more bytes cut]", n-maxReason)
		}
		if he.Reason != want {
			t.Errorf("%d bytes: reason of %d bytes %.40q..., want %d bytes", n, len(he.Reason), he.Reason, len(want))
		}
	}
}
