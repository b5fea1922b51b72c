package store

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store/sqlite"
)

// holdWriteLock takes the SQLite file's write lock from a connection of
// its own, as another process would, and returns the function that lets
// it go.
func holdWriteLock(t *testing.T, dir string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlite.FileName)+"?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			t.Error(err)
		}
		conn.Close()
	}
}

// waitQueued waits until n writes wait in s's group-commit queue.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(s.kw.queue) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued after 10 s, want %d", len(s.kw.queue), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitGroups waits until s has begun n group commits.
func waitGroups(t *testing.T, s *Store, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if g, _ := s.GroupCommitStats(); g >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d group commits begun after 10 s", n)
		}
	}
}

// TestGroupCommitFailedCommit: when the commit of a group fails, every
// caller whose write was in the group gets the commit's error and none of
// their writes is stored, while the group before it and the writes after
// it are unaffected. The commit fails for real: a trigger on kv breaks a
// deferred foreign key when the key "poison" is written, which SQLite
// checks only at COMMIT, after every statement of the group succeeded.
func TestGroupCommitFailedCommit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.kw == nil {
		t.Fatal("the SQLite backend does not group commits")
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlite.FileName)+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE poison_parent (id INTEGER PRIMARY KEY)`,
		`CREATE TABLE poison_child (parent INTEGER REFERENCES poison_parent (id) DEFERRABLE INITIALLY DEFERRED)`,
		`CREATE TRIGGER poison AFTER INSERT ON kv WHEN NEW.key = 'poison' BEGIN INSERT INTO poison_child VALUES (1); END`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	sc := Scope{Org: "acme", Module: "m"}
	release := holdWriteLock(t, dir)
	// The first write is taken alone and waits for the lock; the next
	// ones queue behind it and make the second group, poison among them.
	first := make(chan error, 1)
	go func() { first <- s.KVPut(ctx, sc, "first", []byte("1")) }()
	waitGroups(t, s, 1) // taken by the writer, which now waits for the lock
	const n = 12
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		key := fmt.Sprintf("k%02d", i)
		if i == n/2 {
			key = "poison"
		}
		wg.Go(func() { errs[i] = s.KVPutWithin(ctx, sc, key, []byte("v"), 1<<20) })
	}
	waitQueued(t, s, n)
	release()
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("the write of the group before: %v", err)
	}
	if g, w := s.GroupCommitStats(); g != 2 || w != n+1 {
		t.Errorf("GroupCommitStats = %d groups, %d writes; want 2 groups, %d writes", g, w, n+1)
	}
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "FOREIGN KEY constraint failed") || !strings.Contains(err.Error(), "kv.put") {
			t.Errorf("write %d of the failed group: err = %v, want the commit's FOREIGN KEY error naming kv.put", i, err)
		}
	}
	keys, _, err := s.KVList(ctx, sc, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "first" {
		t.Errorf("keys after the failed group = %q, want only [first]", keys)
	}
	if u, err := s.KVUsage(ctx, sc); err != nil || u != int64(len("first")+1) {
		t.Errorf("usage = %d, %v; want %d", u, err, len("first")+1)
	}
	// The connection is clean: the next group commits.
	if err := s.KVPut(ctx, sc, "after", []byte("x")); err != nil {
		t.Fatalf("a write after the failed group: %v", err)
	}
}

// TestGroupCommitAbandoned: a caller whose context ends while its write
// still waits in the queue gets its context's error, and the write is
// never made; one whose write was already taken waits for the commit.
func TestGroupCommitAbandoned(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sc := Scope{Org: "acme", Module: "m"}
	release := holdWriteLock(t, dir)
	taken := make(chan error, 1)
	tctx, tcancel := context.WithCancel(ctx)
	go func() { taken <- s.KVPut(tctx, sc, "taken", []byte("1")) }()
	waitGroups(t, s, 1)
	qctx, qcancel := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() { queued <- s.KVPut(qctx, sc, "queued", []byte("2")) }()
	waitQueued(t, s, 1)
	qcancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued write after cancel: %v, want context.Canceled", err)
	}
	tcancel() // too late: the writer has it
	release()
	if err := <-taken; err != nil {
		t.Fatalf("taken write: %v, want nil (committed)", err)
	}
	for key, want := range map[string]bool{"taken": true, "queued": false} {
		if _, found, err := s.KVGet(ctx, sc, key); err != nil || found != want {
			t.Errorf("KVGet(%q) found = %v, %v; want %v", key, found, err, want)
		}
	}
}

// TestGroupCommitKill9: a process writing from many goroutines is killed
// with SIGKILL mid-load; after reopening, every write it acknowledged is
// there, and each writer's own key holds its last acknowledged value or a
// later one, never an earlier one.
func TestGroupCommitKill9(t *testing.T) {
	if dir := os.Getenv("MOAT_GC_CHILD"); dir != "" {
		groupCommitChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestGroupCommitKill9$")
	cmd.Env = append(os.Environ(), "MOAT_GC_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int{} // key → last acknowledged value
	sc := bufio.NewScanner(out)
	n := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "ack" {
			continue
		}
		v, _ := strconv.Atoi(f[2])
		acked[f[1]] = max(acked[f[1]], v)
		if n++; n == 2000 {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	// Acknowledgements already written to the pipe count too.
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "ack" {
			v, _ := strconv.Atoi(f[2])
			acked[f[1]] = max(acked[f[1]], v)
			n++
		}
	}
	cmd.Wait()
	if n < 2000 {
		t.Fatalf("the child acknowledged %d writes before it ended, want 2000", n)
	}
	s, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for key, v := range acked {
		got, found, err := s.KVGet(context.Background(), Scope{Org: "acme", Module: "m"}, key)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := strconv.Atoi(string(got))
		if !found || g < v {
			t.Errorf("%s = %q (found %v) after kill -9, but %d was acknowledged", key, got, found, v)
		}
	}
	t.Logf("%d acknowledged writes over %d keys, all present after kill -9", n, len(acked))
}

// groupCommitChild writes until it is killed: 32 goroutines, each
// counting up its own key and writing one new key per count, and prints
// each write once it is acknowledged.
func groupCommitChild(dir string) {
	s, err := Open(context.Background(), dir)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := 1; ; i++ {
				own, fresh := fmt.Sprintf("g%02d", g), fmt.Sprintf("g%02d-%06d", g, i)
				v := []byte(strconv.Itoa(i))
				if err := s.KVPut(context.Background(), Scope{Org: "acme", Module: "m"}, own, v); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				if err := s.KVPutWithin(context.Background(), Scope{Org: "acme", Module: "m"}, fresh, v, 1<<30); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				mu.Lock()
				fmt.Fprintf(w, "ack %s %d\nack %s %d\n", own, i, fresh, i)
				w.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
