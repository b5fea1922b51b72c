package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// pipeWorker is the far end of the two OS pipes a native worker has (its
// fds 3 and 4), driven by the test as a hostile worker would drive them.
type pipeWorker struct {
	toHost   *os.File
	fromHost *bufio.Reader
}

func osPipe(t *testing.T) (*transport.PipeConn, *pipeWorker) {
	t.Helper()
	hr, ww, err := os.Pipe() // worker → host
	if err != nil {
		t.Fatal(err)
	}
	wr, hw, err := os.Pipe() // host → worker
	if err != nil {
		t.Fatal(err)
	}
	c := transport.NewPipeConn(hr, hw)
	t.Cleanup(func() {
		c.Close()
		for _, f := range []*os.File{hr, ww, wr, hw} {
			f.Close()
		}
	})
	return c, &pipeWorker{toHost: ww, fromHost: bufio.NewReader(wr)}
}

func (w *pipeWorker) line(s string) { w.toHost.WriteString(s + "\n") }

const readyLine = `{"type":"ready","version":1,"actions":["a"]}`

// readyWith is a ready line naming actions.
func readyWith(actions []string) string {
	b, _ := json.Marshal(abi.PipeMessage{Type: abi.PipeReady, Version: abi.Version, Actions: actions})
	return string(b)
}

func names(n int, f func(i int) string) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = f(i)
	}
	return s
}

// TestPipeHostileReady: the ready message is the first thing an untrusted
// worker says; each bad one breaks the connection with the bound or rule it
// broke, and the host reads no more than MaxReadyLine of it.
func TestPipeHostileReady(t *testing.T) {
	tests := []struct {
		name  string
		ready string
		want  string // in the error, which wraps ErrPipeProtocol
	}{
		{"a million actions", readyWith(names(1_000_000, func(i int) string { return fmt.Sprintf("a%d", i) })),
			"over 65536 bytes (transport.MaxReadyLine, before its ready message)"},
		{"a 1 MiB action name", readyWith([]string{strings.Repeat("x", 1<<20)}),
			"over 65536 bytes (transport.MaxReadyLine, before its ready message)"},
		{"a line of 16 MiB without a newline", strings.Repeat("{", abi.MaxPipeLine),
			"over 65536 bytes (transport.MaxReadyLine, before its ready message)"},
		{"more actions than MaxPipeActions", readyWith(names(transport.MaxPipeActions+1, func(i int) string { return fmt.Sprintf("a%d", i) })),
			"names 257 actions; the limit is 256 (transport.MaxPipeActions)"},
		{"a 65-character name", readyWith([]string{strings.Repeat("x", 65)}), "must be 1 to 64 characters long"},
		{"an empty name", readyWith([]string{""}), "must be 1 to 64 characters long"},
		{"a newline in a name (forges log lines)", readyWith([]string{"greet\nFAKE audit row"}), `byte 0x0a at 5 is not allowed`},
		{"an escape sequence", readyWith([]string{"greet\x1b[2J"}), `byte 0x1b at 5 is not allowed`},
		{"a path", readyWith([]string{"../etc"}), `byte 0x2e at 0 is not allowed`},
		{"non-ASCII", readyWith([]string{"grüß"}), `byte 0xc3 at 2 is not allowed`},
		{"a duplicate", readyWith([]string{"a", "b", "a"}), `action "a" is named twice`},
		{"no actions", readyWith(nil), "it names no actions"},
		{"another ABI version", `{"type":"ready","version":2,"actions":["a"]}`, "it speaks moat ABI v2; this host speaks v1"},
		{"not ready first", `{"type":"result","id":1}`, `its first message is "result", not "ready"`},
		{"garbage", "this is not json", "malformed line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, w := osPipe(t)
			line := []byte(tt.ready + "\n")
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			go w.toHost.Write(line) // returns with EPIPE once the test closes the host's end
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			actions, err := c.Handshake(ctx)
			runtime.ReadMemStats(&after)
			if err == nil || !errors.Is(err, transport.ErrPipeProtocol) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("handshake: %v (%d actions); want ErrPipeProtocol naming %q", err, len(actions), tt.want)
			}
			if !errors.Is(c.Err(), transport.ErrPipeProtocol) {
				t.Fatalf("the connection still works after %v", err)
			}
			// What the host allocated for a hostile ready line is bounded by
			// MaxReadyLine, not by what the worker wrote (up to 16 MiB here).
			if got := after.TotalAlloc - before.TotalAlloc; got > 4*transport.MaxReadyLine+256<<10 {
				t.Errorf("the host allocated %d bytes for a ready line of %d", got, len(line))
			}
		})
	}
}

// TestPipeHostileInvocation: during an invocation a worker that breaks the
// protocol breaks the connection with ErrPipeProtocol (or ErrWorkerGone),
// and the invocation returns at once.
func TestPipeHostileInvocation(t *testing.T) {
	tests := []struct {
		name string
		act  func(w *pipeWorker)
		is   error
		want string
	}{
		{"a line over abi.MaxPipeLine", func(w *pipeWorker) {
			w.toHost.Write([]byte(strings.Repeat("x", abi.MaxPipeLine+1)))
		}, transport.ErrPipeProtocol, "over 16777216 bytes (abi.MaxPipeLine)"},
		{"garbage", func(w *pipeWorker) { w.line("this is not json") }, transport.ErrPipeProtocol, "malformed line"},
		{"a result with another id", func(w *pipeWorker) { w.line(`{"type":"result","id":99,"output":"b2s="}`) },
			transport.ErrPipeProtocol, "it answered invocation 99 while 1 was running"},
		{"a pong during the invocation", func(w *pipeWorker) { w.line(`{"type":"pong","id":1}`) },
			transport.ErrPipeProtocol, `it sent "pong" during an invocation`},
		{"a second ready", func(w *pipeWorker) { w.line(readyLine) }, transport.ErrPipeProtocol, `it sent "ready" during an invocation`},
		{"the pipe closed", func(w *pipeWorker) { w.toHost.Close() }, transport.ErrWorkerGone, "worker closed its pipe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, w := osPipe(t)
			w.line(readyLine)
			if _, err := c.Handshake(context.Background()); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := c.Invoke(context.Background(), &echo{}, "a", nil, "c")
				done <- err
			}()
			if _, err := w.fromHost.ReadBytes('\n'); err != nil { // the invoke
				t.Fatal(err)
			}
			go tt.act(w)
			select {
			case err := <-done:
				if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("invoke: %v; want %v naming %q", err, tt.is, tt.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the invocation did not end")
			}
		})
	}
}

// countingOps answers every op at once and counts the calls.
type countingOps struct{ n atomic.Int64 }

func (d *countingOps) Dispatch(context.Context, []byte, []byte) ([]byte, error) {
	d.n.Add(1)
	return []byte(`{"value":"` + strings.Repeat("A", 1000) + `"}`), nil
}

// TestPipeCallFloodEndsAtTheDeadline: a worker that floods op calls and
// never reads the replies fills its pipe; the host's write of a reply
// would block for ever, holding the invocation past its deadline. It is
// cut off when the context ends.
func TestPipeCallFloodEndsAtTheDeadline(t *testing.T) {
	testenv.Timing(t)
	c, w := osPipe(t)
	w.line(readyLine)
	if _, err := c.Handshake(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		call := []byte(`{"type":"call","id":1,"op":"kv.get","req":{"key":"k"}}` + "\n")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := w.toHost.Write(call); err != nil {
				return
			}
		}
	}()
	d := &countingOps{}
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.Invoke(ctx, d, "a", nil, "c")
		done <- err
	}()
	select {
	case err := <-done:
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || took > deadline+time.Second {
			t.Fatalf("after %s: %v; want context.DeadlineExceeded at the %s deadline", took, err, deadline)
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("the connection is %v after the deadline; want it broken by the deadline", c.Err())
		}
		// The pipe (64 KiB) holds about 60 replies of 1 KiB: the host
		// dispatched only until it filled.
		if n := d.n.Load(); n == 0 || n > 200 {
			t.Fatalf("dispatched %d calls; want those up to a full pipe", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the host is still blocked writing replies 10s after the invocation's deadline")
	}
}

// TestPipePingHostile: a health check that the worker answers wrongly, or
// not at all, ends within its own deadline.
func TestPipePingHostile(t *testing.T) {
	for _, tt := range []struct {
		name   string
		answer string
		is     error
		want   string
	}{
		{"a pong with another id", `{"type":"pong","id":77}`, transport.ErrPipeProtocol, `it answered a ping with "pong" 77`},
		{"a call instead", `{"type":"call","id":1,"op":"kv.get"}`, transport.ErrPipeProtocol, `it answered a ping with "call" 1`},
		{"silence", "", context.DeadlineExceeded, "context deadline exceeded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, w := osPipe(t)
			w.line(readyLine)
			if _, err := c.Handshake(context.Background()); err != nil {
				t.Fatal(err)
			}
			go func() {
				if _, err := w.fromHost.ReadBytes('\n'); err == nil && tt.answer != "" {
					w.line(tt.answer)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err := c.Ping(ctx)
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ping: %v; want %v naming %q", err, tt.is, tt.want)
			}
		})
	}
}

// TestPipeContextAfterTheCall: a context that ends after its invocation
// answered leaves the connection working.
func TestPipeContextAfterTheCall(t *testing.T) {
	c, w := osPipe(t)
	w.line(readyLine)
	if _, err := c.Handshake(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			w.fromHost.ReadBytes('\n')
			w.line(fmt.Sprintf(`{"type":"result","id":%d,"output":"b2s="}`, i))
		}()
		if out, err := c.Invoke(ctx, &echo{}, "a", nil, "c"); err != nil || string(out) != "ok" {
			t.Fatalf("invoke %d: %q %v", i, out, err)
		}
		cancel()
		time.Sleep(10 * time.Millisecond)
		if err := c.Err(); err != nil {
			t.Fatalf("the connection broke when a finished call's context ended: %v", err)
		}
	}
}
