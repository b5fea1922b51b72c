package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/transport"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// heapGrowth runs f and returns how much the live heap grew across it
// (after a GC on both sides), with f's results kept alive until the
// second measurement.
func heapGrowth(f func() any) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// replyCodes decodes reply lines and counts them by error code ("ok" for
// a response).
func replyCodes(t *testing.T, out string) map[string]int {
	t.Helper()
	codes := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		var r transport.DeviceReply
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("reply %q is not JSON: %v", line, err)
		}
		if r.Error != nil {
			codes[string(r.Error.Code)]++
		} else {
			codes["ok"]++
		}
	}
	return codes
}

// TestDeviceHostile: what a hostile interpreted guest does to the device
// file, each with the refusal it must meet and a bound on the host memory
// it may cost. Before the budget, the first case grew the heap by 470 MiB
// (one ~170-byte error reply per 2-byte line, all queued in one write),
// and the second held 800 MiB (a 4 MiB partial line on each of 200
// descriptors).
func TestDeviceHostile(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name   string
		limits budget.Limits
		// run drives the device; it returns what it wants kept alive
		// (descriptors, say) while the heap is measured, and checks the
		// refusals itself.
		run      func(t *testing.T, fsys experimentalsys.FS, b *budget.Budget) any
		maxHeap  int64
		exhausts string // the knob the budget reports exhausted, or ""
	}{
		{
			name: "2 MB of short invalid lines in one write",
			run: func(t *testing.T, fsys experimentalsys.FS, b *budget.Budget) any {
				f := open(t, fsys)
				p := bytes.Repeat([]byte("x\n"), mib)
				n, errno := f.Write(p)
				if errno != 0 || n <= 0 || n >= len(p) {
					t.Fatalf("write of %d bytes: %d, %v; want a short write", len(p), n, errno)
				}
				// The guest did not read: the next write is refused.
				if n2, errno := f.Write(p[n:]); n2 != 0 || errno != experimentalsys.EAGAIN {
					t.Fatalf("write with the replies unread: %d, %v; want EAGAIN", n2, errno)
				}
				codes := replyCodes(t, readAll(t, f, 4096))
				if codes["invalid_argument"] != n/2 || len(codes) != 1 {
					t.Fatalf("replies %v for %d lines; want one invalid_argument each", codes, n/2)
				}
				// Once read, the guest may go on.
				if n2, errno := f.Write(p[n:]); n2 <= 0 || errno != 0 {
					t.Fatalf("write after reading: %d, %v", n2, errno)
				}
				return f
			},
			maxHeap: 2 * mib,
		},
		{
			name: "2 MB of valid requests, never read",
			run: func(t *testing.T, fsys experimentalsys.FS, b *budget.Budget) any {
				f := open(t, fsys)
				p := bytes.Repeat([]byte(`{"op":"config.get","req":{"key":"k"}}`+"\n"), 2*mib/40)
				total := 0
				for {
					n, errno := f.Write(p[total:])
					total += n
					if errno == experimentalsys.EAGAIN {
						break
					}
					if errno != 0 || total == len(p) {
						t.Fatalf("write: %d, %v after %d bytes; want EAGAIN before the end", n, errno, total)
					}
				}
				if b.Held() > 128<<10 {
					t.Fatalf("the device holds %d bytes of replies; want at most about one window", b.Held())
				}
				return f
			},
			maxHeap: 1 * mib,
		},
		{
			name: "200 descriptors each holding a 4 MiB partial line",
			run: func(t *testing.T, fsys experimentalsys.FS, b *budget.Budget) any {
				var files []experimentalsys.File
				refusedOpen, refusedLine := 0, 0
				var before, peak runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				chunk := bytes.Repeat([]byte("y"), transport.MaxDeviceLine-2048)
				for range 200 {
					f, errno := fsys.OpenFile(transport.DeviceName, experimentalsys.O_RDWR, 0)
					if errno == experimentalsys.EAGAIN {
						refusedOpen++
						continue
					}
					if errno != 0 {
						t.Fatalf("open: %v", errno)
					}
					files = append(files, f)
					if _, errno := f.Write(chunk); errno != 0 {
						t.Fatalf("partial line: %v", errno)
					}
				}
				if len(files) != budget.DefaultLimits.OpenDevices || refusedOpen != 200-len(files) {
					t.Fatalf("%d opens succeeded, %d refused; want %d and the rest EAGAIN", len(files), refusedOpen, budget.DefaultLimits.OpenDevices)
				}
				runtime.GC()
				runtime.ReadMemStats(&peak)
				if grew := int64(peak.HeapAlloc) - int64(before.HeapAlloc); grew > budget.DefaultLimits.HeldBytes+4*mib {
					t.Errorf("with every descriptor open the heap grew by %d MiB; the budget is %d MiB", grew>>20, budget.DefaultLimits.HeldBytes>>20)
				} else {
					t.Logf("heap growth with 16 descriptors open: %d KiB", grew>>10)
				}
				for _, f := range files {
					f.Write([]byte("\n"))
					if replyCodes(t, readAll(t, f, 4096))["resource_exhausted"] == 1 {
						refusedLine++
					}
				}
				if refusedLine == 0 || refusedLine == len(files) {
					t.Fatalf("%d of %d lines refused with resource_exhausted; want the ones past %d bytes held", refusedLine, len(files), budget.DefaultLimits.HeldBytes)
				}
				// Closing returns the descriptors: the device opens again.
				for _, f := range files {
					f.Close()
				}
				if f, errno := fsys.OpenFile(transport.DeviceName, experimentalsys.O_RDWR, 0); errno != 0 {
					t.Fatalf("open after closing the others: %v", errno)
				} else {
					f.Close()
				}
				if b.Held() != 0 {
					t.Fatalf("%d bytes still charged after every descriptor closed", b.Held())
				}
				return files
			},
			maxHeap:  budget.DefaultLimits.HeldBytes + 4*mib,
			exhausts: budget.KnobHeldBytes + "," + budget.KnobOpenDevices,
		},
		{
			name:   "a partial line past a small held budget",
			limits: budget.Limits{HeldBytes: 64 << 10},
			run: func(t *testing.T, fsys experimentalsys.FS, b *budget.Budget) any {
				f := open(t, fsys)
				f.Write(bytes.Repeat([]byte("z"), 100<<10))
				f.Write([]byte("\n" + `{"op":"after"}` + "\n"))
				codes := replyCodes(t, readAll(t, f, 4096))
				if codes["resource_exhausted"] != 1 || codes["ok"] != 1 {
					t.Fatalf("replies %v; want resource_exhausted for the long line, then the next served", codes)
				}
				return f
			},
			maxHeap:  1 * mib,
			exhausts: budget.KnobHeldBytes,
		},
		{
			name: "a line over MaxDeviceLine",
			run: func(t *testing.T, fsys experimentalsys.FS, b *budget.Budget) any {
				f := open(t, fsys)
				big := bytes.Repeat([]byte("w"), mib)
				for range 5 {
					f.Write(big)
				}
				f.Write([]byte("\n"))
				if codes := replyCodes(t, readAll(t, f, 4096)); codes["too_large"] != 1 || len(codes) != 1 {
					t.Fatalf("replies %v; want one too_large", codes)
				}
				return f
			},
			maxHeap: 2 * mib,
		},
		{
			name: "a request over abi.MaxRequestBytes in a line that fits",
			run: func(t *testing.T, fsys experimentalsys.FS, b *budget.Budget) any {
				f := open(t, fsys)
				line := `{"op":"kv.put","req":"` + strings.Repeat("v", abi.MaxRequestBytes+100) + `"}` + "\n"
				if len(line) > transport.MaxDeviceLine {
					t.Fatalf("the test line is %d bytes, over MaxDeviceLine", len(line))
				}
				f.Write([]byte(line))
				out := readAll(t, f, 4096)
				if codes := replyCodes(t, out); codes["too_large"] != 1 || !strings.Contains(out, "abi.MaxRequestBytes") {
					t.Fatalf("reply %.200s; want too_large naming abi.MaxRequestBytes", out)
				}
				return f
			},
			maxHeap: 2 * mib,
		},
		{
			name:   "ops after the audit budget is used up",
			limits: budget.Limits{AuditRows: 5},
			run: func(t *testing.T, fsys experimentalsys.FS, b *budget.Budget) any {
				f := open(t, fsys)
				for range 5 {
					b.AuditRow() // what audit.Record charges for each op event
				}
				f.Write([]byte(`{"op":"kv.put","req":{}}` + "\n"))
				out := readAll(t, f, 4096)
				if codes := replyCodes(t, out); codes["resource_exhausted"] != 1 || !strings.Contains(out, budget.KnobAuditRows) {
					t.Fatalf("reply %s; want resource_exhausted naming %s", out, budget.KnobAuditRows)
				}
				return f
			},
			maxHeap:  1 * mib,
			exhausts: budget.KnobAuditRows,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := budget.New(tt.limits, nil)
			d := &echo{}
			fsys := transport.NewDevice(budget.With(context.Background(), b), d).FS()
			grew := heapGrowth(func() any { return tt.run(t, fsys, b) })
			if grew > tt.maxHeap {
				t.Errorf("the heap grew by %d KiB; the bound is %d KiB", grew>>10, tt.maxHeap>>10)
			}
			t.Logf("heap growth %d KiB, peak held %d KiB", grew>>10, b.Usage().PeakHeldBytes>>10)
			if got := strings.Join(b.Usage().Exhausted, ","); got != tt.exhausts {
				t.Errorf("exhausted %q, want %q", got, tt.exhausts)
			}
		})
	}
}

// TestDeviceEmptyWrite: an empty write (wasi-libc's writev passes an
// empty iovec when its buffer is empty) succeeds with 0 bytes, not EAGAIN.
func TestDeviceEmptyWrite(t *testing.T) {
	f := open(t, transport.NewDevice(context.Background(), &echo{}).FS())
	if n, errno := f.Write(nil); n != 0 || errno != 0 {
		t.Fatalf("empty write: %d, %v; want 0, success", n, errno)
	}
}

// TestDeviceExhaustHookOnce: the host audits the first refusal of each
// limit; a guest hammering the limit does not make a row per refusal.
func TestDeviceExhaustHookOnce(t *testing.T) {
	var hooks []string
	b := budget.New(budget.Limits{OpenDevices: 1}, func(knob, reason string) { hooks = append(hooks, knob+": "+reason) })
	fsys := transport.NewDevice(budget.With(context.Background(), b), &echo{}).FS()
	open(t, fsys)
	for range 100 {
		if _, errno := fsys.OpenFile(transport.DeviceName, experimentalsys.O_RDWR, 0); errno != experimentalsys.EAGAIN {
			t.Fatalf("open past the limit: %v, want EAGAIN", errno)
		}
	}
	if len(hooks) != 1 || !strings.HasPrefix(hooks[0], budget.KnobOpenDevices+": open /dev/moat/ops: this invocation already has 1 descriptors of it open; the limit is 1") {
		t.Fatalf("hook calls %q; want one naming %s", hooks, budget.KnobOpenDevices)
	}
}

// TestDeviceHonoursContext: a write loop stops when the run's context
// ends, rather than serving a deadline's worth of lines more.
func TestDeviceHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	d := &echo{}
	f := open(t, transport.NewDevice(ctx, d).FS())
	cancel()
	if n, errno := f.Write([]byte(`{"op":"a"}` + "\n")); n != 0 || errno != experimentalsys.EIO {
		t.Fatalf("write after the context ended: %d, %v; want EIO", n, errno)
	}
	if len(d.calls) != 0 {
		t.Fatalf("dispatched %q after the context ended", d.calls)
	}
}

// worker is the far end of a pipe transport, driven by the test.
type worker struct {
	toHost   *io.PipeWriter
	fromHost *io.PipeReader
}

func newPipe(t *testing.T) (*transport.PipeConn, *worker) {
	hr, ww := io.Pipe() // worker → host
	wr, hw := io.Pipe() // host → worker
	t.Cleanup(func() { ww.Close(); hw.Close() })
	return transport.NewPipeConn(hr, hw), &worker{toHost: ww, fromHost: wr}
}

// TestPipeHostile: a native worker's op calls meet the same wire bound
// and audit budget as a WASM guest's, and a line past abi.MaxPipeLine
// ends the worker rather than growing the host.
func TestPipeHostile(t *testing.T) {
	tests := []struct {
		name      string
		limits    budget.Limits
		prepare   func(b *budget.Budget)
		call      string // the worker's call line
		wantCode  abi.Code
		wantInMsg string
		wantCalls int
	}{
		{name: "request over abi.MaxRequestBytes", call: `{"type":"call","id":7,"op":"kv.put","req":"` + strings.Repeat("q", abi.MaxRequestBytes) + `"}`,
			wantCode: abi.CodeTooLarge, wantInMsg: "abi.MaxRequestBytes"},
		{name: "audit budget used up", limits: budget.Limits{AuditRows: 2}, prepare: func(b *budget.Budget) { b.AuditRow(); b.AuditRow() },
			call: `{"type":"call","id":7,"op":"kv.put","req":{}}`, wantCode: abi.CodeResourceExhausted, wantInMsg: budget.KnobAuditRows},
		{name: "an ordinary call", call: `{"type":"call","id":7,"op":"kv.get","req":{"key":"k"}}`, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, w := newPipe(t)
			b := budget.New(tt.limits, nil)
			if tt.prepare != nil {
				tt.prepare(b)
			}
			d := &echo{}
			done := make(chan error, 1)
			go func() {
				_, err := c.Invoke(budget.With(context.Background(), b), d, "a", nil, "c")
				done <- err
			}()
			rd := bufioReader(w.fromHost)
			if _, err := rd.ReadBytes('\n'); err != nil { // the invoke
				t.Fatal(err)
			}
			fmt.Fprintln(w.toHost, tt.call)
			line, err := rd.ReadBytes('\n')
			if err != nil {
				t.Fatal(err)
			}
			var m abi.PipeMessage
			if err := json.Unmarshal(line, &m); err != nil || m.Type != abi.PipeReply || m.ID != 7 {
				t.Fatalf("reply %.200s: %v", line, err)
			}
			if tt.wantCode == "" {
				if m.Error != nil {
					t.Fatalf("reply error %v", m.Error)
				}
			} else if m.Error == nil || m.Error.Code != tt.wantCode || !strings.Contains(m.Error.Message, tt.wantInMsg) {
				t.Fatalf("reply error %v; want %s naming %s", m.Error, tt.wantCode, tt.wantInMsg)
			}
			if len(d.calls) != tt.wantCalls {
				t.Fatalf("dispatched %d ops, want %d", len(d.calls), tt.wantCalls)
			}
			fmt.Fprintln(w.toHost, `{"type":"result","id":1,"output":"b2s="}`)
			if err := <-done; err != nil {
				t.Fatalf("invoke: %v", err)
			}
		})
	}

	t.Run("a line past MaxPipeLine ends the worker", func(t *testing.T) {
		c, w := newPipe(t)
		go func() {
			chunk := bytes.Repeat([]byte("a"), 1<<20)
			for range abi.MaxPipeLine>>20 + 1 {
				if _, err := w.toHost.Write(chunk); err != nil {
					return
				}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := c.Handshake(ctx)
		if err == nil || !strings.Contains(err.Error(), "token too long") || c.Err() == nil {
			t.Fatalf("handshake: %v, conn %v; want the connection broken by a too-long line", err, c.Err())
		}
	})
}

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }
