package execdaemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// envDialAs makes the test binary a client that dials the socket it names
// and exits 0 when the daemon refused it (as another uid must be).
const envDialAs = "EXECDAEMON_TEST_DIAL"

func TestMain(m *testing.M) {
	if sock := os.Getenv(envDialAs); sock != "" {
		id, _ := SelfIdentity("test")
		// Refused after the connection was made (the peer's uid), not
		// for want of a path to the socket.
		if _, err := Dial(sock, id); err != nil && errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "handshake") {
			os.Exit(0)
		} else {
			os.Stderr.WriteString("dial: " + fmt.Sprint(err) + "\n")
		}
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// daemon starts a server of identity id on a socket in a fresh data
// directory, and returns the socket; the server stops with the test.
func daemon(t *testing.T, id Identity, idle time.Duration, h Handler) (string, chan struct{}) {
	t.Helper()
	dir, err := Dir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sock := SocketPath(dir, id)
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	srv := &Server{Identity: id, Idle: idle, Handle: h}
	go func() { srv.Serve(l); l.Close(); close(done) }()
	t.Cleanup(func() { l.Close(); <-done })
	return sock, done
}

func self(t *testing.T, config string) Identity {
	t.Helper()
	id, err := SelfIdentity(config)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// stdio is three pipes' write ends for a client, and the read end of the
// stdout one.
func stdio(t *testing.T) ([3]*os.File, *os.File) {
	t.Helper()
	in, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); r.Close(); w.Close() })
	return [3]*os.File{in, w, w}, r
}

func TestRunWritesOnTheClientsDescriptorsAndReturnsTheStatus(t *testing.T) {
	id := self(t, "a")
	sock, _ := daemon(t, id, time.Minute, func(ctx context.Context, job []byte, fds [3]*os.File) int {
		fds[1].WriteString("job=" + string(job) + "\n")
		return 7
	})
	c, err := Dial(sock, id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	files, r := stdio(t)
	code, err := c.Run([]byte("hello"), files, nil)
	if err != nil || code != 7 {
		t.Fatalf("Run = %d, %v; want 7, nil", code, err)
	}
	files[1].Close()
	out, _ := io.ReadAll(r)
	if string(out) != "job=hello\n" {
		t.Fatalf("output %q", out)
	}
}

func TestAnotherIdentityIsRefused(t *testing.T) {
	id := self(t, "a")
	var ran atomic.Bool
	sock, _ := daemon(t, id, time.Minute, func(context.Context, []byte, [3]*os.File) int { ran.Store(true); return 0 })
	for _, tc := range []struct {
		name   string
		change func(*Identity)
	}{
		{"another binary", func(i *Identity) { i.Binary += ".old" }},
		{"another build", func(i *Identity) { i.ModTime-- }},
		{"another size", func(i *Identity) { i.Size++ }},
		{"another configuration", func(i *Identity) { i.Config = "b" }},
		{"another protocol", func(i *Identity) { i.Protocol++ }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := id
			tc.change(&other)
			_, err := Dial(sock, other)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Dial = %v; want ErrUnavailable", err)
			}
		})
	}
	if ran.Load() {
		t.Fatal("a refused client's job ran")
	}
}

func TestCancelAndHangUpCancelTheRun(t *testing.T) {
	id := self(t, "a")
	ended := make(chan error, 2)
	sock, _ := daemon(t, id, time.Minute, func(ctx context.Context, _ []byte, _ [3]*os.File) int {
		select {
		case <-ctx.Done():
			ended <- context.Cause(ctx)
			return 130
		case <-time.After(20 * time.Second):
			ended <- nil
			return 0
		}
	})
	t.Run("cancel", func(t *testing.T) {
		c, err := Dial(sock, id)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		files, _ := stdio(t)
		cancel := make(chan string, 1)
		go func() { time.Sleep(100 * time.Millisecond); cancel <- "interrupt" }()
		code, err := c.Run(nil, files, cancel)
		if err != nil || code != 130 {
			t.Fatalf("Run = %d, %v; want 130", code, err)
		}
		if cause := <-ended; cause == nil || !strings.Contains(cause.Error(), "interrupt") {
			t.Fatalf("cause %v", cause)
		}
	})
	t.Run("client gone", func(t *testing.T) {
		c, err := Dial(sock, id)
		if err != nil {
			t.Fatal(err)
		}
		files, _ := stdio(t)
		go func() { time.Sleep(100 * time.Millisecond); c.Close() }()
		c.Run(nil, files, nil)
		select {
		case cause := <-ended:
			if cause == nil {
				t.Fatal("the run went on without its client")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the run outlived its client")
		}
	})
}

func TestServeEndsWhenIdle(t *testing.T) {
	_, done := daemon(t, self(t, "a"), 300*time.Millisecond, func(context.Context, []byte, [3]*os.File) int { return 0 })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon outlived its idle time")
	}
}

func TestOneDaemonPerSocket(t *testing.T) {
	id := self(t, "a")
	sock, _ := daemon(t, id, time.Minute, func(context.Context, []byte, [3]*os.File) int { return 0 })
	if _, err := Listen(sock); !errors.Is(err, ErrRunning) {
		t.Fatalf("a second Listen = %v; want ErrRunning", err)
	}
}

func TestFramesAreBounded(t *testing.T) {
	id := self(t, "a")
	sock, _ := daemon(t, id, time.Minute, func(context.Context, []byte, [3]*os.File) int { return 0 })
	addr, done, err := sockaddr(sock)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
	done()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A length over MaxFrame: the daemon hangs up without reading on.
	c.Write([]byte{0xff, 0xff, 0xff, 0xff})
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after an oversized frame = %v; want EOF", err)
	}
}

func TestDirIsTheUsersOwn(t *testing.T) {
	data := t.TempDir()
	if err := os.MkdirAll(filepath.Join(data, "exec-daemon"), 0o777); err != nil {
		t.Fatal(err)
	}
	d, err := Dir(data)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v; want 0700", fi.Mode().Perm())
	}
}

// TestAnotherUIDIsRefused: a process of another user that reaches the
// socket (its directory opened up on purpose) is hung up on, by the
// peer's uid, before it is read.
func TestAnotherUIDIsRefused(t *testing.T) {
	testenv.Root(t, "running a client as another uid")
	id := self(t, "a")
	var ran atomic.Bool
	sock, _ := daemon(t, id, time.Minute, func(context.Context, []byte, [3]*os.File) int { ran.Store(true); return 0 })
	for p := sock; p != "/"; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			os.Chmod(p, fi.Mode().Perm()|0o011)
		}
	}
	os.Chmod(sock, 0o777)
	exe, _ := os.Executable()
	for p := filepath.Dir(exe); p != "/"; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil {
			os.Chmod(p, fi.Mode().Perm()|0o011)
		}
	}
	os.Chmod(exe, 0o755)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envDialAs+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the client as nobody was not refused: %v\n%s", err, out)
	}
	if ran.Load() {
		t.Fatal("another uid's job ran")
	}
}

// TestServeEndsWhenItsBinaryIsReplaced: an upgrade replaces the binary on
// disk; the daemon of the old one exits rather than serve on.
func TestServeEndsWhenItsBinaryIsReplaced(t *testing.T) {
	defer func(d time.Duration) { checkEvery = d }(checkEvery)
	checkEvery = 100 * time.Millisecond
	bin := filepath.Join(t.TempDir(), "moat")
	if err := os.WriteFile(bin, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(bin)
	id := Identity{Protocol: Protocol, Binary: bin, Size: fi.Size(), ModTime: fi.ModTime().UnixNano(), Config: "a"}
	_, done := daemon(t, id, time.Minute, func(context.Context, []byte, [3]*os.File) int { return 0 })
	if err := os.WriteFile(bin, []byte("a newer moat"), 0o755); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon of a replaced binary goes on serving")
	}
}
