package native

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPoolClaimNeedsAck: a warm wrapper counts as taken only once it has
// acknowledged its spec. Each wrapper here is a script that reads its spec
// like the real one and then fails to acknowledge it: it exits, it is
// killed from outside after the spec was written and read (the race the
// cgroup v2 VM found: alive at the write, dead a moment later), it answers
// with something else, or it never answers. Each time the job starts cold
// (the same script execs the real wrapper for a cold start) and succeeds,
// and the pool records the dead claim. The real wrapper, as the control,
// acknowledges and runs the job warm. No sleep decides anything: the kill
// waits on the script's own word that it has read its spec.
func TestPoolClaimNeedsAck(t *testing.T) {
	real := wrapperPath("")
	if real == "/proc/self/exe" {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		real = exe // for the script, /proc/self/exe would be the shell
	}
	dir := t.TempDir()
	// The killed case's script says "read" here once it has its spec;
	// opened read-write, the FIFO never blocks a writer's open nor ends.
	fifo := filepath.Join(dir, "spec-read")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	fifoF, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fifoF.Close()
	specRead := make(chan struct{}, 8)
	go func() {
		sc := bufio.NewScanner(fifoF)
		for sc.Scan() {
			specRead <- struct{}{}
		}
	}()

	script := func(name, afterSpec string) string {
		p := filepath.Join(dir, name)
		body := "#!/bin/sh\n" +
			// A cold start (the spec in the environment): the real wrapper.
			"[ \"$MOAT_CONFINE\" = fd:3 ] || exec " + real + " \"$@\"\n" +
			"spec=$(/bin/cat <&3)\n" +
			// Discarded by the pool (no spec): exit, as the real one does.
			"[ -n \"$spec\" ] || exit 0\n" +
			afterSpec + "\n"
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name      string
		wrapper   string // "": the real wrapper
		ackWithin time.Duration
		kill      bool // kill the wrapper once it has read its spec
		warm      bool
	}{
		{"real wrapper acknowledges", "", time.Minute, false, true},
		{"exits after reading its spec", script("exits", "exit 0"), time.Minute, false, false},
		{"killed after reading its spec", script("killed", "echo read >"+fifo+"\nexec /bin/sleep 60"), time.Minute, true, false},
		{"answers with a failure line", script("fails", "echo 'moat-confine: broken' >&4\nexit 125"), time.Minute, false, false},
		{"never answers", script("hangs", "exec /bin/sleep 60"), 200 * time.Millisecond, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func(d time.Duration) { warmAckTimeout = d }(warmAckTimeout)
			warmAckTimeout = c.ackWithin
			warmBefore := warmCgroups()
			pool := NewPool(1, c.wrapper)
			defer pool.Close()
			waitWarm(t, pool, 1)
			pool.mu.Lock()
			w := pool.idle[0]
			pool.mu.Unlock()
			if c.kill {
				go func() {
					<-specRead
					_ = w.cmd.Process.Signal(syscall.SIGKILL)
				}()
			}
			before := jobProcs()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := pool.Run(ctx, Spec{Command: []string{"sh", "-c", "echo ran; echo err >&2"}, Wrapper: c.wrapper})
			if err != nil {
				t.Fatalf("Run: %v, want the job to run", err)
			}
			if r.Warm != c.warm || r.Status != StatusOK || string(r.Stdout) != "ran\n" || string(r.Stderr) != "err\n" {
				t.Errorf("warm %v status %s reason %q stdout %q stderr %q; want warm %v, ok, \"ran\\n\" and \"err\\n\"",
					r.Warm, r.Status, r.Reason, r.Stdout, r.Stderr, c.warm)
			}
			if ps := w.cmd.ProcessState; !c.warm && ps == nil {
				t.Error("the unacknowledged wrapper was not reaped")
			}
			pool.mu.Lock()
			failed := pool.failed
			pool.mu.Unlock()
			if want := map[bool]int{true: 0, false: 1}[c.warm]; failed != want {
				t.Errorf("the pool counted %d dead claims, want %d", failed, want)
			}
			pool.Close()
			assertClean(t, before)
			assertNoNewWarmCgroups(t, warmBefore)
		})
	}
}

// TestPoolAckError: what a claim says of each way a wrapper can fail to
// acknowledge, naming the wrapper.
func TestPoolAckError(t *testing.T) {
	defer func(d time.Duration) { warmAckTimeout = d }(warmAckTimeout)
	warmAckTimeout = 50 * time.Millisecond
	for _, tt := range []struct {
		name, status string
		open         bool // the wrapper keeps its end open and says nothing
		want         string
	}{
		{"eof", "", false, "died before it acknowledged its spec"},
		{"other byte", "moat-confine: x", false, `answered its spec with 'm', not the acknowledgement`},
		{"silence", "", true, "did not acknowledge its spec within 50ms"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, wr, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer wr.Close()
			_, _ = wr.WriteString(tt.status)
			if !tt.open {
				wr.Close()
			}
			w := &warmWrapper{wrapper: "/x/moat-confine", statusR: r}
			err = w.awaitAck()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "/x/moat-confine") {
				t.Errorf("awaitAck: %v, want an error naming /x/moat-confine saying %q", err, tt.want)
			}
		})
	}
}
