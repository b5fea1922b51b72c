package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/transport"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// FuzzDevice writes arbitrary bytes to the device file in pieces of
// arbitrary size, reading replies every few writes, on a small budget.
// Whatever the bytes: Write and Read never claim more than they were
// given, every reply is one JSON line with a response or an error, the
// bytes held never pass the budget, and closing returns all of them.
func FuzzDevice(f *testing.F) {
	for _, s := range []struct {
		data  string
		piece uint16
		every uint8
	}{
		{`{"op":"kv.get","req":{"key":"k"}}` + "\n", 0, 1},
		{`{"op":"a","r` + `eq":{}}` + "\n\n  \n" + `{"op":"b"}` + "\n", 5, 2},
		{"x\nx\nx\nx\nx\nx\nx\nx\n", 1, 0},
		{`{"op":"fail.abi"}` + "\n" + `{"op":"fail.plain","req":null}` + "\n", 7, 1},
		{`{"op":""}` + "\n" + `{"req":{}}` + "\n" + `[]` + "\n" + `"op"` + "\n", 3, 3},
		{`{"op":"kv.put","req":{"key":"` + string(bytes.Repeat([]byte("k"), 300)) + `"}}` + "\n", 64, 1},
		{"{\"op\":\"\xff\xfe\",\"req\":{}}\n", 2, 1},
		{`{"op":"a","req":1e999}` + "\n" + `{"op":"a","req":[[[[[[[[]]]]]]]]}` + "\n", 11, 1},
		{"\r\n\t\x00\n", 1, 1},
		{string(bytes.Repeat([]byte("y"), 70000)) + "\n", 4096, 0},
	} {
		f.Add([]byte(s.data), s.piece, s.every)
	}
	f.Fuzz(func(t *testing.T, data []byte, piece uint16, every uint8) {
		const held = 48 << 10
		b := budget.New(budget.Limits{HeldBytes: held, OpenDevices: 2}, nil)
		fsys := transport.NewDevice(budget.With(context.Background(), b), &echo{}).FS()
		file, errno := fsys.OpenFile(transport.DeviceName, experimentalsys.O_RDWR, 0)
		if errno != 0 {
			t.Fatal(errno)
		}
		var out bytes.Buffer
		buf := make([]byte, 1000)
		drain := func() {
			for {
				n, errno := file.Read(buf)
				if errno != 0 || n < 0 || n > len(buf) {
					t.Fatalf("read: %d, %v", n, errno)
				}
				if n == 0 {
					return
				}
				out.Write(buf[:n])
			}
		}
		size := int(piece)%4096 + 1
		for i, p := 0, data; len(p) > 0; i++ {
			chunk := p[:min(size, len(p))]
			n, errno := file.Write(chunk)
			if n < 0 || n > len(chunk) || errno != 0 && errno != experimentalsys.EAGAIN || errno == 0 && n == 0 {
				t.Fatalf("write of %d bytes: %d, %v", len(chunk), n, errno)
			}
			if b.Held() > held {
				t.Fatalf("%d bytes held; the budget is %d", b.Held(), held)
			}
			p = p[n:]
			if errno == experimentalsys.EAGAIN || every != 0 && i%int(every) == 0 {
				drain()
			}
		}
		drain()
		for _, line := range bytes.SplitAfter(out.Bytes(), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var r transport.DeviceReply
			if line[len(line)-1] != '\n' || json.Unmarshal(line, &r) != nil || (r.Resp == nil) == (r.Error == nil) {
				t.Fatalf("reply %q is not one JSON line with resp or error", line)
			}
		}
		if errno := file.Close(); errno != 0 {
			t.Fatal(errno)
		}
		if b.Held() != 0 {
			t.Fatalf("%d bytes still held after close", b.Held())
		}
	})
}

// FuzzPipe plays a native worker that writes arbitrary bytes to the
// host. The host's end never panics or hangs: the handshake and one
// invocation end with a result or an error, and a broken connection says
// why.
func FuzzPipe(f *testing.F) {
	for _, s := range []string{
		`{"type":"ready","version":1,"actions":["a"]}` + "\n" + `{"type":"result","id":1,"output":"b2s="}` + "\n",
		`{"type":"ready","version":1}` + "\n" + `{"type":"call","id":7,"op":"kv.get","req":{"key":"k"}}` + "\n" + `{"type":"result","id":1}` + "\n",
		`{"type":"ready","version":1}` + "\n" + `{"type":"call","id":7,"op":"fail.abi"}` + "\n" + `{"type":"result","id":1,"error":{"code":"denied","message":"x"}}` + "\n",
		`{"type":"ready","version":2}` + "\n",
		`{"type":"pong","id":1}` + "\n",
		`{"type":"ready","version":1}` + "\n" + `{"type":"result","id":99}` + "\n",
		`{"type":"ready","version":1}` + "\n" + `{"type":"call","id":7,"op":"fail.plain","req":"` + string(bytes.Repeat([]byte("r"), 1000)) + `"}` + "\n",
		`{"type":"ready","version":1}` + "\n" + "not json\n",
		`{"type":"ready","version":1}` + "\n" + `{"type":"result","id":1,"output":"!!!"}` + "\n",
		"", "\n", "{", `{"type":"ready","version":1,"actions":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := transport.NewPipeConn(bytes.NewReader(data), io.Discard)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Handshake(ctx); err != nil {
			if c.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("handshake failed (%v) but the connection says it works", err)
			}
			return
		}
		out, err := c.Invoke(ctx, &echo{}, "a", []byte("in"), "c")
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.Fatal("the invocation hung on a worker whose pipe ended")
		case err == nil && out == nil:
			t.Fatal("a result with no output and no error")
		case err != nil:
			var ae *abi.Error
			if !errors.As(err, &ae) && c.Err() == nil {
				t.Fatalf("invoke failed (%v) but the connection says it works", err)
			}
		}
	})
}
