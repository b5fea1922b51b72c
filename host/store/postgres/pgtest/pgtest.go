// Package pgtest gives tests a PostgreSQL database of their own, so that
// `go test` of anything that needs PostgreSQL works alone, with nothing
// set up by hand:
//
//   - When MOAT_TEST_POSTGRES is set (a URL whose role may CREATE
//     DATABASE), tests use that server.
//   - Otherwise, when the server's binaries are installed (Debian's
//     postgresql-15: /usr/lib/postgresql/15/bin; `make test` installs
//     it), the first test to ask starts a throwaway cluster: initdb into a
//     temporary directory (about a second), listening on a unix socket in
//     that directory only (no TCP port, so nothing else on the machine
//     can reach it, and parallel test binaries cannot collide), with
//     fsync off. As root it runs as the postgres OS user, since initdb
//     refuses root. It stops with the test binary: call Main from
//     TestMain, and the server also gets SIGQUIT if the binary dies.
//   - Otherwise the test is skipped with the reason, or fails when
//     MOAT_REQUIRE_TOOLS=1 (as under `make test`).
//
// Each call of Database creates a fresh database (CREATE DATABASE, so
// tests never see each other's rows) and drops it when the test ends.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		url := pgtest.Database(t)
//		s, err := store.Open(ctx, url)
//		...
//	}
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// EnvURL names the variable that points tests at an existing server.
const EnvURL = "MOAT_TEST_POSTGRES"

// BinDirs are where the server binaries are looked for, in order.
var BinDirs = []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"}

var (
	once    sync.Once
	server  *cluster // the cluster this process started, if any
	baseURL string   // the server's URL (maintenance database)
	skip    string   // why there is no server
)

// cluster is a throwaway server this process started.
type cluster struct {
	dir string
	cmd *exec.Cmd
	log string
}

// URL returns the URL of the test server's maintenance database,
// starting the throwaway cluster on first use; without a server it skips
// t (or fails it, under MOAT_REQUIRE_TOOLS=1).
//
// Under go test -short (make check) it skips: the inner loop runs the
// same suites on SQLite, and make test on both.
func URL(t testing.TB) string {
	t.Helper()
	testenv.Slow(t, "a PostgreSQL cluster; the SQLite run of the same test stays")
	once.Do(setup)
	if baseURL == "" {
		testenv.Require(t, "no PostgreSQL: "+skip)
	}
	return baseURL
}

// Database creates a fresh, empty database on the test server and
// returns its URL; it is dropped (with any connections left) when t ends.
func Database(t testing.TB) string {
	t.Helper()
	base := URL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "moat_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin(ctx, base, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := admin(ctx, base, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// admin runs one statement on the maintenance database.
func admin(ctx context.Context, base, stmt string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, stmt)
	return err
}

// Main runs the tests and then stops the cluster this process started, if
// any. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if err := Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
	}
	os.Exit(code)
}

// Stop stops the cluster this process started (a fast shutdown signalled
// to its process id) and removes its directory. Without one it does
// nothing.
func Stop() error {
	if server == nil {
		return nil
	}
	c := server
	server = nil
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop the server (pid %d): %w", c.cmd.Process.Pid, err)
	}
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	return os.RemoveAll(c.dir)
}

func setup() {
	if u := os.Getenv(EnvURL); u != "" {
		baseURL = u
		return
	}
	bin := ""
	for _, d := range BinDirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			bin = d
			break
		}
	}
	if bin == "" {
		skip = fmt.Sprintf("%s is not set and no PostgreSQL server binaries are installed in %v (install Debian's postgresql-15)", EnvURL, BinDirs)
		return
	}
	c, u, err := start(bin)
	if err != nil {
		skip = fmt.Sprintf("start a throwaway cluster with %s: %v", bin, err)
		return
	}
	server, baseURL = c, u
}

// start runs initdb and the server from bin in a fresh temporary
// directory, and returns the cluster and its URL once it accepts
// connections.
func start(bin string) (_ *cluster, _ string, err error) {
	dir, err := os.MkdirTemp("", "moat-pgtest-")
	if err != nil {
		return nil, "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	cred, err := credential(dir)
	if err != nil {
		return nil, "", err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "moat", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("initdb: %w: %s", err, out)
	}
	logPath := filepath.Join(dir, "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	if cred != nil {
		if err := logf.Chown(int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, "", err
		}
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=", "-c", "unix_socket_directories="+dir, "-c", "unix_socket_permissions=0700",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with the test binary, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start postgres: %w", err)
	}
	c := &cluster{dir: dir, cmd: cmd, log: logPath}
	u := (&url.URL{Scheme: "postgres", Path: "/postgres", RawQuery: url.Values{"host": {dir}, "user": {"moat"}}.Encode()}).String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := admin(ctx, u, "SELECT 1")
		cancel()
		if err == nil {
			return c, u, nil
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			server = c
			Stop()
			log, _ := os.ReadFile(logPath)
			return nil, "", fmt.Errorf("the server did not accept connections: %w; its log:\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// credential returns who runs the server: nobody different unless this
// process is root (initdb refuses root), then the postgres OS user, who
// is given dir.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, the server needs a user of its own: %w (the postgresql package creates the postgres user)", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	if err := os.Chown(dir, int(uid), int(gid)); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}
