package host_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// fileTree lays out the directories of the file-grant tests under a
// fresh base:
//
//	outside/secret        "s3cret": outside every grant
//	ro/                   granted read-only
//	  file.txt            "hello"
//	  sub/inner.txt       "inner"
//	  link_passwd -> /etc/passwd
//	  link_up     -> ../outside/secret
//	  dir_out     -> ../outside
//	  loop1 <-> loop2
//	  fifo                a FIFO
//	rw/                   granted read-write
//	  out -> ../outside
//	rosecret/x            "s3cret": a sibling whose name has ro's as a prefix
func fileTree(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"outside", "ro/sub", "rw", "rosecret"} {
		must(os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	for name, body := range map[string]string{"outside/secret": "s3cret", "ro/file.txt": "hello", "ro/sub/inner.txt": "inner", "rosecret/x": "s3cret"} {
		must(os.WriteFile(filepath.Join(base, name), []byte(body), 0o644))
	}
	for name, target := range map[string]string{"ro/link_passwd": "/etc/passwd", "ro/link_up": "../outside/secret", "ro/dir_out": "../outside",
		"ro/loop1": "loop2", "ro/loop2": "loop1", "rw/out": "../outside"} {
		must(os.Symlink(target, filepath.Join(base, name)))
	}
	must(syscall.Mkfifo(filepath.Join(base, "ro/fifo"), 0o644))
	return base
}

// fileHost starts a host whose profile grants base/ro read-only and
// base/rw read-write, with lim as the host's limits.
func fileHost(t *testing.T, base string, lim host.Limits) *host.Host {
	t.Helper()
	p, err := policy.ParseProfile("files.yaml", []byte(strings.ReplaceAll(`name: files
default:
  capabilities:
    filesystem: [BASE/ro, BASE/rw:rw]
`, "BASE", base)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Profile: p, Limits: lim, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

// loadFS loads testdata/fsguest asking for grants (the filesystem list of
// its manifest, BASE replaced).
func loadFS(t *testing.T, h *host.Host, base, grants string, opts ...func(*host.LoadOptions)) (*host.Module, error) {
	t.Helper()
	raw := strings.ReplaceAll("name: fsguest\nversion: 1.0.0\nactions: [{name: fs}]\ncapabilities:\n  filesystem: "+grants+"\n", "BASE", base)
	mf, err := policy.ParseManifest("moat.yaml", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	o := host.LoadOptions{Manifest: mf, ManifestBytes: []byte(raw)}
	for _, f := range opts {
		f(&o)
	}
	return h.Load(context.Background(), testwasm.BuildGo(t, "./testdata/fsguest", true), o)
}

// fsCall runs one fsops line in the guest and returns what it observed.
func fsCall(t *testing.T, m *host.Module, cid, line string) string {
	t.Helper()
	res, err := m.Invoke(context.Background(), host.Request{Action: "fs", Input: []byte(line),
		Principal: policy.Principal{User: "ann", Org: "acme"}, CorrelationID: cid})
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return string(res.Output)
}

// TestFileGrantsThroughAGuest drives every hostile case through a real Go
// guest: what it reads, writes and is refused, and the errno it sees.
func TestFileGrantsThroughAGuest(t *testing.T) {
	t.Parallel()
	base := fileTree(t)
	h := fileHost(t, base, host.Limits{})
	m, err := loadFS(t, h, base, "[BASE/ro, BASE/rw:rw]")
	if err != nil {
		t.Fatal(err)
	}
	ro, rw := base+"/ro", base+"/rw"
	for _, tt := range []struct{ line, want string }{
		// Read-only: reads inside work, at the same path as on the host.
		{"read " + ro + "/file.txt", "ok hello"},
		{"read " + ro + "/sub/inner.txt", "ok inner"},
		{"list " + ro, "ok dir_out,fifo,file.txt,link_passwd,link_up,loop1,loop2,sub"},
		// Links leading outside, however written, are EPERM.
		{"read " + ro + "/link_passwd", "err EPERM"},
		{"read " + ro + "/link_up", "err EPERM"},
		{"read " + ro + "/dir_out/secret", "err EPERM"},
		{"read " + ro + "/loop1", "err ELOOP"},
		// A FIFO is refused, not blocked on.
		{"read " + ro + "/fifo", "err EPERM"},
		// ".." chains: Go cleans the path first, which then lies under no
		// preopen: the call goes nowhere (EBADF).
		{"read " + ro + "/sub/../../outside/secret", "err EBADF"},
		{"read " + ro + "/../../../../../etc/passwd", "err EBADF"},
		// A prefix that is not a parent: Go's wasip1 runtime matches
		// preopens by string prefix, so /…/rosecret/x is looked up as
		// "secret/x" inside ro, never as the sibling.
		{"read " + base + "/rosecret/x", "err ENOENT"},
		// Every change in the read-only grant is EROFS.
		{"write " + ro + "/file.txt x", "err EROFS"},
		{"write " + ro + "/new.txt x", "err EROFS"},
		{"append " + ro + "/file.txt x", "err EROFS"},
		{"mkdir " + ro + "/d", "err EROFS"},
		{"rmdir " + ro + "/sub", "err EROFS"},
		{"unlink " + ro + "/file.txt", "err EROFS"},
		{"rename " + ro + "/file.txt " + ro + "/moved", "err EROFS"},
		{"link " + ro + "/file.txt " + ro + "/hl", "err EROFS"},
		{"symlink file.txt " + ro + "/sl", "err EROFS"},
		{"utimes " + ro + "/file.txt", "err EROFS"},
		{"read " + ro + "/file.txt", "ok hello"},
		// Read-write: changes work.
		{"write " + rw + "/a.txt alpha", "ok"},
		{"append " + rw + "/a.txt beta", "ok"},
		{"read " + rw + "/a.txt", "ok alphabeta"},
		{"mkdir " + rw + "/d", "ok"},
		{"rename " + rw + "/a.txt " + rw + "/d/a.txt", "ok"},
		{"link " + rw + "/d/a.txt " + rw + "/d/b.txt", "ok"},
		{"utimes " + rw + "/d/b.txt", "ok"},
		{"unlink " + rw + "/d/b.txt", "ok"},
		{"rmdir " + rw + "/d", "err ENOTEMPTY"},
		{"unlink " + rw + "/d", "err EISDIR"},
		// ... but none leads outside, and no symlink is made.
		{"write " + rw + "/out/secret pwned", "err EPERM"},
		{"write " + rw + "/out/new pwned", "err EPERM"},
		{"rename " + rw + "/d/a.txt " + rw + "/out/a.txt", "err EPERM"},
		{"rename " + rw + "/d/a.txt " + base + "/outside/a.txt", "err EBADF"},
		{"link " + rw + "/out/secret " + rw + "/stolen", "err EPERM"},
		{"link " + rw + "/d/a.txt " + rw + "/out/hl", "err EPERM"},
		{"symlink /etc/shadow " + rw + "/sl", "err EPERM"},
		{"symlink d/a.txt " + rw + "/sl", "err EPERM"},
		{"mkdir " + rw + "/out/d", "err EPERM"},
		// Between two grants nothing moves: wazero renames and links
		// within one preopen only.
		{"rename " + rw + "/d/a.txt " + ro + "/a.txt", "err ENOSYS"},
		{"link " + ro + "/file.txt " + rw + "/hl", "err ENOSYS"},
	} {
		if got := fsCall(t, m, "files", tt.line); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.line, got, tt.want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(base, "outside/secret")); string(b) != "s3cret" {
		t.Errorf("outside/secret is %q", b)
	}
	if ents, _ := os.ReadDir(filepath.Join(base, "outside")); len(ents) != 1 {
		t.Errorf("outside holds %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(base, "ro/file.txt")); string(b) != "hello" {
		t.Errorf("ro/file.txt is %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(base, "rw/d/a.txt")); string(b) != "alphabeta" {
		t.Errorf("rw/d/a.txt is %q", b)
	}

	// The trail: one allowed fs.write per change, with the path relative
	// to its grant and never the contents; a denial per refusal; nothing
	// for reads that succeeded.
	evs := auditEvents(t, h, audit.Filter{CorrelationID: "files", Kind: audit.KindOp})
	var allowed, denied []string
	for _, e := range evs {
		s := e.Op + " " + e.Attrs["change"] + " " + e.Attrs["path"]
		if e.Attrs["to"] != "" {
			s += " -> " + e.Attrs["to"]
		}
		if e.Decision == audit.Allow {
			if e.MutationID == "" || e.Attrs["target"] != rw || e.User != "ann" || e.Org != "acme" || e.Action != "fs" {
				t.Errorf("allowed event %+v", e)
			}
			allowed = append(allowed, s)
		} else {
			denied = append(denied, s+": "+e.Rule)
		}
		for _, v := range []string{e.Reason, e.Attrs["path"], e.Attrs["to"]} {
			if strings.Contains(v, "alpha") || strings.Contains(v, "pwned") {
				t.Errorf("file contents in the trail: %+v", e)
			}
		}
	}
	wantAllowed := []string{"fs.write write a.txt", "fs.write write a.txt", "fs.write mkdir d", "fs.write rename a.txt -> d/a.txt",
		"fs.write link d/a.txt -> d/b.txt", "fs.write utimes d/b.txt", "fs.write unlink d/b.txt"}
	if !slices.Equal(allowed, wantAllowed) {
		t.Errorf("allowed:\n%q\nwant\n%q", allowed, wantAllowed)
	}
	for _, want := range []string{
		"fs.read access link_passwd: filesystem " + ro + " (read-only)",
		"fs.read access fifo: filesystem " + ro + " (read-only)",
		"fs.write write file.txt: filesystem " + ro + " (read-only)",
		"fs.write symlink sl -> file.txt: filesystem " + ro + " (read-only)",
		"fs.write write out/secret: filesystem " + rw + " (read-write)",
		"fs.write rename d/a.txt -> out/a.txt: filesystem " + rw + " (read-write)",
		"fs.write symlink sl -> /etc/shadow: filesystem " + rw + " (read-write)",
	} {
		if !slices.Contains(denied, want) {
			t.Errorf("denials lack %q:\n%q", want, denied)
		}
	}
}

// TestFileGrantKeptDescriptor: a pooled instance keeps its descriptors
// from one invocation to the next; a write through one opened earlier is
// audited in the invocation that writes.
func TestFileGrantKeptDescriptor(t *testing.T) {
	t.Parallel()
	base := fileTree(t)
	h := fileHost(t, base, host.Limits{})
	m, err := loadFS(t, h, base, "[BASE/rw:rw]")
	if err != nil {
		t.Fatal(err)
	}
	if got := fsCall(t, m, "keep", "keep "+base+"/rw/log"); got != "ok" {
		t.Fatal(got)
	}
	if got := fsCall(t, m, "later", "writekept entry"); got != "ok" {
		t.Fatal(got)
	}
	evs := auditEvents(t, h, audit.Filter{CorrelationID: "later", Kind: audit.KindOp})
	if len(evs) != 1 || evs[0].Attrs["path"] != "log" || evs[0].Attrs["detail"] != "descriptor" || evs[0].Decision != audit.Allow {
		t.Errorf("the later write's events: %+v", evs)
	}
	if b, _ := os.ReadFile(filepath.Join(base, "rw/log")); string(b) != "entry" {
		t.Errorf("rw/log is %q", b)
	}
}

// TestFileGrantAuditBudget: changes are ops of the audit budget; past it
// the guest sees EPERM, nothing more changes, and the trail says why.
func TestFileGrantAuditBudget(t *testing.T) {
	t.Parallel()
	base := fileTree(t)
	h := fileHost(t, base, host.Limits{Budget: budget.Limits{AuditRows: 5}})
	m, err := loadFS(t, h, base, "[BASE/rw:rw]")
	if err != nil {
		t.Fatal(err)
	}
	if got := fsCall(t, m, "flood", "mkdirs "+base+"/rw 50"); got != "ok made=5 first=EPERM" {
		t.Errorf("got %q", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(base, "rw")); len(ents) != 6 { // out and d0..d4
		t.Errorf("rw holds %d entries", len(ents))
	}
	evs := auditEvents(t, h, audit.Filter{CorrelationID: "flood"})
	var ops, exhausted int
	for _, e := range evs {
		switch {
		case e.Kind == audit.KindOp:
			ops++
		case e.Rule == budget.KnobAuditRows:
			exhausted++
		}
	}
	if ops != 5 || exhausted != 1 {
		t.Errorf("%d op events and %d exhaustion rows: %+v", ops, exhausted, evs)
	}
}

// TestFileGrantSwapRace replaces a directory of the grant with a symlink
// out, and back, as fast as the host can, while the guest reads through
// it: no read ever returns the file outside.
func TestFileGrantSwapRace(t *testing.T) {
	t.Parallel()
	base := fileTree(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	rw := filepath.Join(base, "rw")
	must(os.MkdirAll(filepath.Join(rw, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(rw, "sub/inner.txt"), []byte("inner"), 0o644))
	must(os.WriteFile(filepath.Join(base, "outside/inner.txt"), []byte("s3cret"), 0o644))
	must(os.Symlink("../outside", filepath.Join(rw, "swap")))
	h := fileHost(t, base, host.Limits{Timeout: time.Minute})
	m, err := loadFS(t, h, base, "[BASE/rw:rw]")
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var swaps atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		sub, parked, link := filepath.Join(rw, "sub"), filepath.Join(rw, "parked"), filepath.Join(rw, "swap")
		for !stop.Load() {
			if os.Rename(sub, parked) == nil && os.Rename(link, sub) == nil {
				swaps.Add(1)
				_ = os.Rename(sub, link)
				_ = os.Rename(parked, sub)
			}
		}
	}()
	var inside int
	for i := 0; i < 4; i++ {
		got := fsCall(t, m, "race", "race "+rw+"/sub/inner.txt 2000")
		var in, out, failed int
		if _, err := fmt.Sscanf(got, "ok inside=%d outside=%d failed=%d", &in, &out, &failed); err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		if out != 0 {
			t.Fatalf("the guest read outside the grant: %s", got)
		}
		inside += in
	}
	stop.Store(true)
	<-done
	if swaps.Load() < 100 || inside < 100 {
		t.Fatalf("the race hardly ran: %d swaps, %d reads inside", swaps.Load(), inside)
	}
	t.Logf("%d swaps; %d reads inside, none outside", swaps.Load(), inside)
}

// TestFileGrantLoadRefusals: the host's own directories, and anything
// holding them, are never granted, even when the profile says so; nor a
// directory that is not there.
func TestFileGrantLoadRefusals(t *testing.T) {
	t.Parallel()
	base := fileTree(t)
	data := filepath.Join(base, "data")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(data, 0o755))
	must(os.Symlink(data, filepath.Join(base, "alias")))
	p, err := policy.ParseProfile("files.yaml", []byte("name: files\ndefault:\n  capabilities:\n    filesystem: ["+base+":rw]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: data, Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	tests := []struct{ grant, reason string }{
		{"[BASE/data:rw]", "reaches moat's own data directory"},
		{"[BASE/data/cache]", "reaches moat's own data directory"},
		{"[BASE/alias]", "reaches moat's own data directory"}, // a symlink to it
		{"[BASE]", "reaches moat's own data directory"},       // a parent of it
		{"[BASE/missing]", "no such directory"},
		{"[BASE/ro/file.txt]", "cannot open the directory"},
	}
	// A bind mount shows the data directory at a path apart from it: the
	// grant of it, of a directory within it, or of a directory holding
	// it reaches the store all the same (compared by device and inode).
	if os.Geteuid() == 0 {
		must(os.MkdirAll(filepath.Join(data, "inside"), 0o755))
		for _, d := range []string{"bound", "holder/m"} {
			must(os.MkdirAll(filepath.Join(base, d), 0o755))
			must(syscall.Mount(data, filepath.Join(base, d), "", syscall.MS_BIND, ""))
			t.Cleanup(func() { syscall.Unmount(filepath.Join(base, d), syscall.MNT_DETACH) })
		}
		tests = append(tests,
			struct{ grant, reason string }{"[BASE/bound:rw]", "reaches moat's own data directory"},
			struct{ grant, reason string }{"[BASE/bound/inside]", "reaches moat's own data directory"},
			struct{ grant, reason string }{"[BASE/holder]", "reaches moat's own data directory"})
	} else {
		t.Run("bind mounts", func(t *testing.T) { testenv.Require(t, "a bind mount of the data directory needs root") })
	}
	for _, tt := range tests {
		t.Run(tt.grant, func(t *testing.T) {
			_, err := loadFS(t, h, base, tt.grant)
			var he *host.Error
			if !errors.As(err, &he) || he.Code != abi.CodeDenied || !strings.Contains(he.Reason, tt.reason) {
				t.Fatalf("got %v, want denied: %s", err, tt.reason)
			}
		})
	}
	evs := auditEvents(t, h, audit.Filter{Kind: audit.KindLoad, Decision: audit.Deny})
	if len(evs) != len(tests) || evs[0].Rule != "capabilities.filesystem" {
		t.Errorf("load denials: %+v", evs)
	}
}

// TestFileGrantDiskFull: a granted directory whose disk is full (a tmpfs
// of 64 KiB and 16 inodes mounted for the test) gives the guest ENOSPC,
// as the kernel said, not the EIO that WASI's functions make of every
// errno the filesystem interface does not name: for a write, an append
// and a directory made once no inode is left. Deleting frees it again,
// and nothing of the failed writes is left but what fit.
func TestFileGrantDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		testenv.Require(t, "mounting a small tmpfs needs root")
	}
	base := fileTree(t)
	rw := filepath.Join(base, "rw")
	if err := syscall.Mount("tmpfs", rw, "tmpfs", 0, "size=64k,nr_inodes=16,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(rw, syscall.MNT_DETACH) })
	h := fileHost(t, base, host.Limits{})
	m, err := loadFS(t, h, base, "[BASE/rw:rw]")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 128<<10)
	for _, tt := range []struct{ line, want string }{
		{"write " + rw + "/big " + big, "err ENOSPC"},
		{"append " + rw + "/big " + big, "err ENOSPC"},
		{"unlink " + rw + "/big", "ok"},
		{"write " + rw + "/small fits", "ok"},
		{"read " + rw + "/small", "ok fits"},
		{"mkdirs " + rw + " 40", "ok made=14 first=ENOSPC"},
	} {
		if got := fsCall(t, m, "full", tt.line); got != tt.want {
			t.Errorf("%.60s: %q, want %q", tt.line, got, tt.want)
		}
	}
	ents, err := os.ReadDir(rw)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 15 { // small and d0..d13 (16 inodes with the root)
		t.Errorf("the full disk holds %d entries, want 15", len(ents))
	}
}

// TestFileGrantCommand: a WASI command (Module.Run) gets the same
// directories, and its changes are audited like a plugin's.
func TestFileGrantCommand(t *testing.T) {
	t.Parallel()
	base := fileTree(t)
	h := fileHost(t, base, host.Limits{})
	raw := strings.ReplaceAll("name: fscmd\nversion: 1.0.0\nkind: wasi-command\ncapabilities:\n  filesystem: [BASE/ro, BASE/rw:rw]\n", "BASE", base)
	mf, err := policy.ParseManifest("moat.yaml", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(context.Background(), testwasm.BuildGo(t, "./testdata/fscmd", false), host.LoadOptions{Manifest: mf, ManifestBytes: []byte(raw)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ args, want string }{
		{"read " + base + "/ro/file.txt", "ok hello"},
		{"write " + base + "/ro/file.txt x", "err EROFS"},
		{"read " + base + "/ro/link_up", "err EPERM"},
		{"write " + base + "/rw/cmd.txt from-the-command", "ok"},
		{"symlink /etc/passwd " + base + "/rw/sl", "err EPERM"},
	} {
		var out strings.Builder
		if _, err := m.Run(context.Background(), host.RunRequest{Args: strings.Fields(tt.args), Stdout: &out,
			Principal: policy.Principal{User: "ann", Org: "acme"}, CorrelationID: "cmd"}); err != nil {
			t.Fatal(err)
		}
		if out.String() != tt.want {
			t.Errorf("%s: %q, want %q", tt.args, out.String(), tt.want)
		}
	}
	evs := auditEvents(t, h, audit.Filter{CorrelationID: "cmd", Kind: audit.KindOp, Decision: audit.Allow})
	if len(evs) != 1 || evs[0].Attrs["path"] != "cmd.txt" || evs[0].Op != host.OpFileWrite {
		t.Errorf("allowed events: %+v", evs)
	}
	// A mount of the host's own may not hide a grant, nor a grant a mount.
	_, err = m.Run(context.Background(), host.RunRequest{Mounts: []host.Mount{{HostDir: t.TempDir(), GuestPath: base + "/ro/sub", ReadOnly: true}},
		Principal: policy.Principal{User: "ann", Org: "acme"}})
	if abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("overlapping mount: %v", err)
	}
}

// TestFileGrantReadWriteRefusedAsReadOnly: a module asking for rw where
// the profile grants read-only loads (on_ungranted: deny_at_call) with the
// directory read-only: its writes are EROFS.
func TestFileGrantReadWriteRefusedAsReadOnly(t *testing.T) {
	t.Parallel()
	base := fileTree(t)
	p, err := policy.ParseProfile("files.yaml", []byte("name: files\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    filesystem: ["+base+"/rw]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	m, err := loadFS(t, h, base, "[BASE/rw:rw]")
	if err != nil {
		t.Fatal(err)
	}
	if got := fsCall(t, m, "c", "write "+base+"/rw/x y"); got != "err EROFS" {
		t.Errorf("got %q", got)
	}
}

// TestFileGrantRawWASI: the raw WASI calls of testdata/wat/hostile_fsraw.wat,
// which no language runtime cleans up first: ".." chains, absolute paths,
// an open that must not follow a link, links and renames out of a grant
// and between grants. Each byte is the errno the guest saw (WASI numbers).
func TestFileGrantRawWASI(t *testing.T) {
	t.Parallel()
	base := fileTree(t)
	h := fileHost(t, base, host.Limits{})
	raw := strings.ReplaceAll("name: fsraw\nversion: 1.0.0\nkind: wasi-command\ncapabilities:\n  filesystem: [BASE/ro, BASE/rw:rw]\n", "BASE", base)
	mf, err := policy.ParseManifest("moat.yaml", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(context.Background(), fixture(t, "hostile_fsraw.wasm"), host.LoadOptions{Manifest: mf, ManifestBytes: []byte(raw)})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if _, err := m.Run(context.Background(), host.RunRequest{Stdout: &out, Principal: policy.Principal{User: "ann", Org: "acme"}}); err != nil {
		t.Fatal(err)
	}
	const (
		ok, eloop, enosys, eperm, erofs = 0, 32, 52, 63, 69
	)
	want := []byte{eperm, eperm, eperm, eloop, erofs, erofs, eperm, eperm, eperm, eperm, enosys, erofs, erofs, eperm, eperm, eperm, ok}
	if got := []byte(out.String()); !slices.Equal(got, want) {
		t.Errorf("errnos %v, want %v", got, want)
	}
	if b, _ := os.ReadFile(filepath.Join(base, "outside/secret")); string(b) != "s3cret" {
		t.Errorf("outside/secret is %q", b)
	}
	for _, p := range []string{"rw/sl", "rw/hl", "rw/a", "ro/a", "ro/d"} {
		if _, err := os.Lstat(filepath.Join(base, p)); err == nil {
			t.Errorf("%s exists", p)
		}
	}
}

// TestFileGrantStartFunctions: a change a module's start function makes
// has no caller to answer for it: refused (EPERM) and audited; the same
// change in an invocation is made.
func TestFileGrantStartFunctions(t *testing.T) {
	t.Parallel()
	base := fileTree(t)
	h := fileHost(t, base, host.Limits{})
	raw := strings.ReplaceAll("name: fsinit\nversion: 1.0.0\nactions: [{name: mkdir}]\ncapabilities:\n  filesystem: [BASE/rw:rw]\n", "BASE", base)
	mf, err := policy.ParseManifest("moat.yaml", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(context.Background(), fixture(t, "hostile_fsinit.wasm"), host.LoadOptions{Manifest: mf, ManifestBytes: []byte(raw),
		Isolation: host.IsolationFresh, CorrelationID: "fsinit-load"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Invoke(context.Background(), host.Request{Action: "mkdir", Principal: policy.Principal{User: "ann", Org: "acme"}, CorrelationID: "fsinit"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Output; !slices.Equal(got, []byte{63, 0}) { // EPERM in _initialize, then made
		t.Errorf("errnos %v, want [63 0]", got)
	}
	if _, err := os.Stat(filepath.Join(base, "rw/init")); err == nil {
		t.Error("_initialize made rw/init")
	}
	if _, err := os.Stat(filepath.Join(base, "rw/call")); err != nil {
		t.Errorf("the invocation did not make rw/call: %v", err)
	}
	evs := auditEvents(t, h, audit.Filter{Kind: audit.KindOp, Module: "fsinit", Decision: audit.Deny})
	if len(evs) == 0 || evs[0].Attrs["path"] != "init" || evs[0].User != "" || !strings.Contains(evs[0].Reason, "no invocation is in flight") {
		t.Errorf("denials: %+v", evs)
	}
}
