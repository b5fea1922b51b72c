package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/transport"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// echo is a Dispatcher that answers {"op":..., "req":...}, or an error for
// the ops named "fail.abi" and "fail.plain". The real dispatcher (grants,
// audit, the op table) is exercised end to end by the interpreter tests in
// languages/javascript and languages/python.
type echo struct{ calls []string }

func (e *echo) Dispatch(_ context.Context, op, req []byte) ([]byte, error) {
	e.calls = append(e.calls, string(op)+" "+string(req))
	switch string(op) {
	case "fail.abi":
		return nil, abi.Errorf(abi.CodeDenied, "op fail.abi: not granted")
	case "fail.plain":
		return nil, errors.New("disk on fire")
	}
	return fmt.Appendf(nil, `{"op":%q,"req":%s}`, op, req), nil
}

func TestDeviceServe(t *testing.T) {
	tests := []struct {
		name, line, want string
		wantCall         string
	}{
		{"request", `{"op":"kv.get","req":{"key":"k"}}`, `{"resp":{"op":"kv.get","req":{"key":"k"}}}`, `kv.get {"key":"k"}`},
		{"no req is {}", `{"op":"config.get"}`, `{"resp":{"op":"config.get","req":{}}}`, `config.get {}`},
		{"typed error keeps its code", `{"op":"fail.abi","req":{}}`, `{"error":{"code":"denied","message":"op fail.abi: not granted"}}`, `fail.abi {}`},
		{"other error is internal", `{"op":"fail.plain","req":{}}`, `{"error":{"code":"internal","message":"disk on fire"}}`, `fail.plain {}`},
		{"not JSON", `kv.get key`, `"code":"invalid_argument"`, ""},
		{"no op", `{"req":{}}`, `the request has no \"op\"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &echo{}
			got := string(transport.NewDevice(context.Background(), d).Serve([]byte(tt.line)))
			if !strings.HasSuffix(got, "\n") || !strings.Contains(got, tt.want) {
				t.Fatalf("reply %q, want one line with %q", got, tt.want)
			}
			if !json.Valid([]byte(got)) {
				t.Fatalf("reply %q is not JSON", got)
			}
			if strings.Join(d.calls, ";") != tt.wantCall {
				t.Fatalf("dispatched %q, want %q", d.calls, tt.wantCall)
			}
		})
	}
}

func open(t *testing.T, fsys experimentalsys.FS) experimentalsys.File {
	t.Helper()
	f, errno := fsys.OpenFile(transport.DeviceName, experimentalsys.O_RDWR, 0)
	if errno != 0 {
		t.Fatalf("open %s: %v", transport.DeviceName, errno)
	}
	return f
}

func readAll(t *testing.T, f experimentalsys.File, chunk int) string {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, chunk)
	for {
		n, errno := f.Read(buf)
		if errno != 0 {
			t.Fatal(errno)
		}
		if n == 0 {
			return out.String()
		}
		out.Write(buf[:n])
	}
}

// TestDeviceFraming: lines arrive in pieces or several to a write, replies
// come back in order and in any read size, and each open is its own channel.
func TestDeviceFraming(t *testing.T) {
	d := &echo{}
	fsys := transport.NewDevice(context.Background(), d).FS()
	f, g := open(t, fsys), open(t, fsys)

	for _, piece := range []string{`{"op":"a","r`, `eq":{}}`, "\n\n   \n", `{"op":"b"}` + "\n" + `{"op":"c"}` + "\n" + `{"op":"d"`} {
		if n, errno := f.Write([]byte(piece)); errno != 0 || n != len(piece) {
			t.Fatalf("write %q: %d, %v", piece, n, errno)
		}
	}
	if n, _ := g.Write([]byte(`{"op":"other"}` + "\n")); n == 0 {
		t.Fatal("write on the second channel failed")
	}
	want := `{"resp":{"op":"a","req":{}}}` + "\n" + `{"resp":{"op":"b","req":{}}}` + "\n" + `{"resp":{"op":"c","req":{}}}` + "\n"
	if got := readAll(t, f, 7); got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	if got := readAll(t, g, 4096); got != `{"resp":{"op":"other","req":{}}}`+"\n" {
		t.Fatalf("second channel got %q", got)
	}
	f.Write([]byte("}\n")) // ends the pending {"op":"d"
	if got := readAll(t, f, 4096); !strings.Contains(got, `"op":"d"`) {
		t.Fatalf("the split request got %q", got)
	}
	if len(d.calls) != 5 {
		t.Fatalf("dispatched %q, want 5 ops", d.calls)
	}
	if errno := f.Close(); errno != 0 {
		t.Fatal(errno)
	}
	if _, errno := f.Write([]byte("{}\n")); errno != experimentalsys.EBADF {
		t.Fatalf("write after close: %v, want EBADF", errno)
	}
}

func TestDeviceLongLine(t *testing.T) {
	d := &echo{}
	f := open(t, transport.NewDevice(context.Background(), d).FS())
	long := bytes.Repeat([]byte("x"), transport.MaxDeviceLine/4)
	for range 5 {
		f.Write(long)
	}
	f.Write([]byte("\n" + `{"op":"after"}` + "\n"))
	got := readAll(t, f, 4096)
	if !strings.Contains(got, `"code":"too_large"`) || !strings.Contains(got, `"op":"after"`) || len(d.calls) != 1 {
		t.Fatalf("replies %q, calls %q: want too_large, then the next request served", got, d.calls)
	}
}

// TestDeviceDir: the directory holds the device and nothing can be added,
// renamed or removed.
func TestDeviceDir(t *testing.T) {
	fsys := transport.NewDevice(context.Background(), &echo{}).FS()
	st, errno := fsys.Stat(transport.DeviceName)
	if errno != 0 || st.Mode&fs.ModeCharDevice == 0 {
		t.Fatalf("stat %s: %v %v, want a character device", transport.DeviceName, st.Mode, errno)
	}
	dir, errno := fsys.OpenFile(".", experimentalsys.O_RDONLY, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	ents, errno := dir.Readdir(-1)
	if errno != 0 || len(ents) != 1 || ents[0].Name != transport.DeviceName {
		t.Fatalf("readdir: %v %v, want just %s", ents, errno, transport.DeviceName)
	}
	if _, errno := fsys.OpenFile("x", experimentalsys.O_RDWR|experimentalsys.O_CREAT, 0o644); errno != experimentalsys.EROFS {
		t.Fatalf("create: %v, want EROFS", errno)
	}
	if _, errno := fsys.OpenFile("y", experimentalsys.O_RDONLY, 0); errno != experimentalsys.ENOENT {
		t.Fatalf("open a missing file: %v, want ENOENT", errno)
	}
	if _, errno := fsys.OpenFile(transport.DeviceName, experimentalsys.O_RDWR|experimentalsys.O_CREAT|experimentalsys.O_EXCL, 0); errno != experimentalsys.EEXIST {
		t.Fatalf("exclusive create of the device: %v, want EEXIST", errno)
	}
	for name, errno := range map[string]experimentalsys.Errno{
		"unlink": fsys.Unlink(transport.DeviceName),
		"mkdir":  fsys.Mkdir("d", 0o755),
		"rename": fsys.Rename(transport.DeviceName, "z"),
	} {
		if errno != experimentalsys.EROFS {
			t.Errorf("%s: %v, want EROFS", name, errno)
		}
	}
}

func ExampleDevice_Serve() {
	dev := transport.NewDevice(context.Background(), &echo{})
	fmt.Print(string(dev.Serve([]byte(`{"op":"fail.abi","req":{"key":"count"}}`))))
	// Output:
	// {"error":{"code":"denied","message":"op fail.abi: not granted"}}
}

// TestDeviceNoReply: a request with "noreply" runs (even when it fails) and
// answers nothing, so the next reply on the channel is the next request's;
// a thousand of them leave nothing unread; moat.next still replies.
func TestDeviceNoReply(t *testing.T) {
	d := &echo{}
	f := open(t, transport.NewDevice(context.Background(), d).FS())
	lines := `{"op":"log.write","noreply":true,"req":{"n":1}}` + "\n" +
		`{"op":"fail.abi","noreply":true}` + "\n" +
		`{"op":"kv.get","req":{"key":"k"}}` + "\n"
	if n, errno := f.Write([]byte(lines)); errno != 0 || n != len(lines) {
		t.Fatalf("write: %d, %v", n, errno)
	}
	if got := readAll(t, f, 4096); got != `{"resp":{"op":"kv.get","req":{"key":"k"}}}`+"\n" {
		t.Fatalf("replies %q, want only kv.get's", got)
	}
	if strings.Join(d.calls, ";") != `log.write {"n":1};fail.abi {};kv.get {"key":"k"}` {
		t.Fatalf("dispatched %q", d.calls)
	}
	flood := strings.Repeat(`{"op":"log.write","noreply":true,"req":{}}`+"\n", 1000)
	if n, errno := f.Write([]byte(flood)); errno != 0 || n != len(flood) {
		t.Fatalf("flood: %d, %v", n, errno)
	}
	if got := readAll(t, f, 4096); got != "" {
		t.Fatalf("a noreply flood left %d bytes to read", len(got))
	}
	f.Write([]byte(`{"op":"moat.next","noreply":true,"req":{}}` + "\n"))
	if got := readAll(t, f, 4096); !strings.Contains(got, "not resident") {
		t.Fatalf("moat.next with noreply: %q, want its reply", got)
	}
}
