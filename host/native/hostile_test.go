package native

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy/kernel"
	"golang.org/x/sys/unix"
)

// The hostile corpus of the native runner: each case runs
// testdata/hostileprobe as a confined job, which tries one escape and
// prints what the kernel answered (see its doc). A case passes when the
// answer is exactly the refusal the layer promises.

var (
	probeOnce sync.Once
	probePath string
	probeErr  error
	probeDir  string
)

// hostileProbe builds testdata/hostileprobe once per test binary. Its
// directory is removed by TestMain.
func hostileProbe(t *testing.T) string {
	t.Helper()
	probeOnce.Do(func() {
		probeDir, probeErr = os.MkdirTemp("", "moat-probe-")
		if probeErr != nil {
			return
		}
		if probeErr = os.Chmod(probeDir, 0o755); probeErr != nil {
			return
		}
		probePath = filepath.Join(probeDir, "hostileprobe")
		cmd := exec.Command("go", "build", "-o", probePath, "./testdata/hostileprobe")
		cmd.Dir = testwasm.RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			probeErr = err
			t.Logf("%s", msg)
		}
	})
	if probeErr != nil {
		t.Fatalf("build hostileprobe: %v", probeErr)
	}
	return probePath
}

// probeDirFor is the directory the probe was built in.
func probeDirFor(t *testing.T) string { return filepath.Dir(hostileProbe(t)) }

// removeProbe removes what hostileProbe built.
func removeProbe() {
	if probeDir != "" {
		os.RemoveAll(probeDir)
	}
}

// hostileCase is one escape attempt and the answer that means it failed.
type hostileCase struct {
	args []string
	want string
}

// runProbe runs the probe with args as a confined job and returns its one
// line of output.
func runProbe(t *testing.T, spec Spec, args ...string) string {
	t.Helper()
	spec.Command = append([]string{hostileProbe(t)}, args...)
	res := run(t, spec)
	if res.Status != StatusOK {
		t.Fatalf("probe %q: status %s exit %d stderr %q reason %q", args, res.Status, res.ExitCode, res.Stderr, res.Reason)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func runHostile(t *testing.T, cases []hostileCase, spec Spec) {
	t.Helper()
	for _, c := range cases {
		t.Run(strings.Join(c.args, "-"), func(t *testing.T) {
			if got := runProbe(t, spec, c.args...); got != c.want {
				t.Errorf("%q: got %q, want %q", c.args, got, c.want)
			}
		})
	}
}

// TestHostileSyscallABIs: every system call through a foreign ABI is
// refused, whatever it is, and so are the dangerous native ones.
func TestHostileSyscallABIs(t *testing.T) {
	var cases []hostileCase
	for _, n := range []string{"getpid", "keyctl", "add_key", "request_key", "unshare", "setns", "io_uring_setup",
		"perf_event_open", "bpf", "userfaultfd", "ptrace", "mount", "setuid32", "kexec_load", "socketcall", "socket",
		"chroot", "init_module", "personality", "open"} {
		cases = append(cases, hostileCase{[]string{"i386", n}, "ENOSYS"})
	}
	for _, n := range []string{"getpid", "keyctl", "add_key", "unshare", "io_uring_setup", "perf_event_open", "bpf",
		"userfaultfd", "ptrace", "mount", "setuid", "socket", "kexec_load"} {
		cases = append(cases, hostileCase{[]string{"x32", n}, "ENOSYS"})
	}
	for _, c := range []struct{ name, want string }{
		{"getpid", "ok"},
		{"keyctl", "EPERM"}, {"add_key", "EPERM"}, {"request_key", "EPERM"},
		{"unshare-user", "EPERM"}, {"unshare-net", "EPERM"},
		{"clone-newuser", "EPERM"}, {"clone-newns", "EPERM"}, {"clone3", "ENOSYS"}, {"setns", "EPERM"},
		{"io_uring_setup", "EPERM"}, {"perf_event_open", "EPERM"}, {"bpf", "EPERM"}, {"userfaultfd", "EPERM"},
		{"ptrace", "EPERM"}, {"process_vm_readv", "EPERM"},
		{"mount", "EPERM"}, {"umount", "EPERM"}, {"pivot_root", "EPERM"}, {"chroot", "EPERM"},
		{"fsopen", "EPERM"}, {"open_tree", "EPERM"},
		{"setuid", "EPERM"}, {"setresuid", "EPERM"}, {"setgroups", "EPERM"},
		{"kexec_load", "EPERM"}, {"init_module", "EPERM"}, {"syslog", "EPERM"}, {"iopl", "EPERM"}, {"acct", "EPERM"},
		{"open_by_handle_at", "EPERM"}, {"pidfd_getfd", "EPERM"},
		{"socket-inet", "ok"}, {"socket-unix", "ok"},
		{"socket-mptcp", "EPERM"}, {"socket-mptcp6", "EPERM"}, {"socket-mptcp-high", "EPERM"},
		{"socket-vsock", "EAFNOSUPPORT"}, {"socket-vsock-high", "EAFNOSUPPORT"}, {"socket-packet", "EAFNOSUPPORT"},
		{"socket-alg", "EAFNOSUPPORT"}, {"socket-key", "EAFNOSUPPORT"}, {"socketpair-inet", "EAFNOSUPPORT"},
		{"socket-raw", "EPERM"}, // no CAP_NET_RAW
		{"memfd", "EPERM"}, {"memfd-exec-flag", "EPERM"}, {"memfd-sealed", "ok"},
		{"memfd-exec", "EACCES"}, {"execveat-empty", "EPERM"},
	} {
		cases = append(cases, hostileCase{[]string{"native", c.name}, c.want})
	}
	runHostile(t, cases, Spec{})
}

// listenUnix serves a pathname unix socket at path, world-writable, as a
// careless host service would, and reports whether anything connected.
func listenUnix(t *testing.T, path string) <-chan string {
	t.Helper()
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); os.Remove(path) })
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 64)
			n, _ := c.Read(b)
			got <- string(b[:n])
			c.Close()
		}
	}()
	return got
}

// TestHostileHostSockets: a job sees no socket of the host's, in any
// directory, pathname or abstract, and no host network.
func TestHostileHostSockets(t *testing.T) {
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	paths := []string{
		filepath.Join(os.TempDir(), fmt.Sprintf("moat-hostile-%d.sock", os.Getpid())),
		filepath.Join(open, "service.sock"),
	}
	if os.Geteuid() == 0 {
		paths = append(paths, fmt.Sprintf("/run/moat-hostile-%d.sock", os.Getpid()), fmt.Sprintf("/dev/shm/moat-hostile-%d.sock", os.Getpid()))
	}
	var heard []<-chan string
	for _, p := range paths {
		heard = append(heard, listenUnix(t, p))
	}
	abstract := fmt.Sprintf("moat-hostile-%d", os.Getpid())
	aln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer aln.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	tcp6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp6.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()

	var cases []hostileCase
	for _, p := range paths {
		cases = append(cases, hostileCase{[]string{"connect-unix", p}, "ENOENT"}, hostileCase{[]string{"dgram-unix", p}, "ENOENT"})
	}
	cases = append(cases,
		hostileCase{[]string{"sockets"}, "none"},
		hostileCase{[]string{"connect-abstract", abstract}, "ECONNREFUSED"}, // its own network namespace
		hostileCase{[]string{"connect-tcp", tcp.Addr().String()}, "EACCES"}, // Landlock's TCP rule, before the empty netns
		hostileCase{[]string{"connect-tcp", tcp6.Addr().String()}, "EACCES"},
		hostileCase{[]string{"connect-udp", udp.LocalAddr().String()}, "ENETUNREACH"},
		hostileCase{[]string{"stat", "/var/run/docker.sock"}, "ENOENT"},
		hostileCase{[]string{"stat", "/run/postgresql"}, "ENOENT"},
		hostileCase{[]string{"stat", "/sys/fs/cgroup"}, "ENOENT"},
		hostileCase{[]string{"ls", "/run"}, ""},
		hostileCase{[]string{"ls", "/tmp"}, strings.Join(slices.Sorted(slices.Values([]string{filepath.Base(JobsDir()), filepath.Base(probeDirFor(t))})), " ")},
		hostileCase{[]string{"stat", "/dev/kvm"}, "ENOENT"},
		hostileCase{[]string{"stat", "/dev/vsock"}, "ENOENT"},
		hostileCase{[]string{"stat", "/dev/mem"}, "ENOENT"},
		hostileCase{[]string{"stat", "/dev/null"}, "ok"},
	)
	runHostile(t, cases, Spec{})
	for i, h := range heard {
		select {
		case m := <-h:
			t.Errorf("the host socket %s took %q from a job", paths[i], m)
		default:
		}
	}
}

// TestHostileWritableAndExec: a job writes only its own dirs, executes
// nothing it wrote, from anywhere, by any route, and its disk is bounded.
func TestHostileWritableAndExec(t *testing.T) {
	cases := []hostileCase{
		{[]string{"copy-exec", "./copy"}, "EACCES"},
		{[]string{"copy-exec", "/tmp/copy"}, "EACCES"},
		{[]string{"copy-exec", "/dev/shm/copy"}, "EACCES"},
		{[]string{"copy-exec", "/run/copy"}, "EACCES"},
		{[]string{"mmap-exec", "./lib.so"}, "EPERM"},
		{[]string{"mmap-exec", "/tmp/lib.so"}, "EPERM"},
		{[]string{"mmap-exec", "/dev/shm/lib.so"}, "EPERM"},
		{[]string{"native", "memfd-exec"}, "EACCES"},
		{[]string{"native", "execveat-empty"}, "EPERM"},
		{[]string{"write", "/probe"}, "EROFS"},
		{[]string{"write", "/usr/probe"}, "EROFS"},
		{[]string{"write", "/etc/probe"}, "EROFS"},
		{[]string{"write", "/var/run/probe"}, "ok"},
		{[]string{"mkdir", "/probe"}, "EROFS"},
		{[]string{"write", "/dev/probe"}, "EROFS"},
		{[]string{"fill", "./big", "32"}, "ENOSPC"},
		{[]string{"fill", "/tmp/big", "32"}, "ENOSPC"},
		{[]string{"fill", "/dev/shm/big", "32"}, "ENOSPC"},
	}
	runHostile(t, cases, Spec{DiskBytes: 8 << 20})
	t.Run("writable-dirs", func(t *testing.T) {
		res := run(t, Spec{Command: []string{hostileProbe(t), "writable", "/moat-none"}})
		got := strings.TrimSpace(string(res.Stdout))
		// The job dir (a tmpfs under the jobs dir) and the scratch dirs.
		if got == "none" {
			t.Fatal("the job cannot write its scratch dirs")
		}
		for _, d := range strings.Fields(got) {
			if d != "." && !slices.Contains(kernel.ScratchDirs, d) && !strings.HasPrefix(d, JobsDir()+"/job-") {
				t.Errorf("writable outside the job's own dirs: %s (all: %s)", d, got)
			}
		}
	})
	t.Run("loader-env-refused", func(t *testing.T) {
		for _, v := range []string{"LD_PRELOAD=/tmp/x.so", "LD_LIBRARY_PATH=.", "LD_AUDIT=x", "GCONV_PATH=.", "ld_preload=x"} {
			_, err := Run(context.Background(), Spec{Command: []string{hostileProbe(t), "env"}, Env: []string{"PATH=/usr/bin", v}})
			if err == nil || !strings.Contains(err.Error(), strings.SplitN(v, "=", 2)[0]) {
				if !strings.HasPrefix(v, "ld_") {
					t.Errorf("env %s: err %v, want a refusal naming it", v, err)
				}
			}
		}
	})
}

// TestHostileUIDs: concurrent jobs never share a uid, every uid is of the
// leased range, and a lease outlives nothing.
func TestHostileUIDs(t *testing.T) {
	needRoot(t)
	const n = 6
	uids := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each job holds its uid while the others start.
			res, err := Run(context.Background(), Spec{Command: []string{"sh", "-c", "id -u; sleep 0.5"}, ExtraExec: []string{"/usr/bin/id", "/usr/bin/sleep"}})
			if err != nil || res.Status != StatusOK {
				t.Errorf("run: %v %+v", err, res)
				return
			}
			uids <- strings.TrimSpace(string(res.Stdout))
		}()
	}
	wg.Wait()
	close(uids)
	seen := map[string]bool{}
	for u := range uids {
		id, err := strconv.Atoi(u)
		if err != nil || !isJobUID(id) {
			t.Errorf("uid %q: not of the range [%d, %d)", u, UIDBase, UIDBase+UIDCount)
		}
		if seen[u] {
			t.Errorf("uid %s ran two concurrent jobs", u)
		}
		seen[u] = true
	}
	// Every lease was released: each lock file can be locked again.
	ents, _ := os.ReadDir(UIDLockDir)
	for _, e := range ents {
		f, err := os.Open(filepath.Join(UIDLockDir, e.Name()))
		if err != nil {
			continue
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil && seen[e.Name()] {
			t.Errorf("uid %s still leased after its job: %v", e.Name(), err)
		}
		f.Close()
	}
}

// TestHostileGivenDirSymlinks: handing a caller's dir to the job's uid
// follows no symlink a previous job planted there, and leaves a shared
// hard-linked file its owner's.
func TestHostileGivenDirSymlinks(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(t.TempDir(), "seed")
	if err := os.WriteFile(shared, []byte("seed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "out.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(shared, filepath.Join(dir, "seed")); err != nil {
		t.Fatal(err)
	}
	res := run(t, Spec{Command: []string{"sh", "-c", "id -u; cat out.wasm"}, Dir: dir, ExtraExec: []string{"/usr/bin/id", "/usr/bin/cat"}})
	for _, p := range []string{victim, "/etc", shared} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil || st.Uid != 0 {
			t.Errorf("%s: owner %d (%v), want root's still", p, st.Uid, err)
		}
	}
	if strings.Contains(string(res.Stdout), "root's") {
		t.Errorf("the job read a file through a symlink out of its root: %q", res.Stdout)
	}
}

// TestHostileHostFiles: a job reaches no file of the host's it was not
// given, whatever the file's permissions: moat's own database, another
// job's files, the host's /proc; and its descriptors are bounded.
func TestHostileHostFiles(t *testing.T) {
	data := t.TempDir()
	if err := os.Chmod(data, 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(data, "moat.db")
	if err := os.WriteFile(db, []byte("SQLite format 3"), 0o666); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(JobsDir(), "another-jobs-files")
	if err := os.MkdirAll(other, 0o777); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(other)
	runHostile(t, []hostileCase{
		{[]string{"read", db}, "ENOENT"},
		{[]string{"write", db}, "ENOENT"},
		{[]string{"stat", data}, "ENOENT"},
		{[]string{"stat", other}, "ENOENT"},
		{[]string{"read", "/proc/1/environ"}, "EACCES"}, // Landlock: /proc is not the job's to read
		{[]string{"read", "/proc/self/mountinfo"}, "EACCES"},
		{[]string{"stat", "/root"}, "ENOENT"},
		{[]string{"stat", "/home"}, "ENOENT"},
		{[]string{"stat", "/etc/shadow"}, "ENOENT"},
		{[]string{"stat", "/etc/passwd"}, "ENOENT"},
		{[]string{"read", "/etc/ld.so.cache"}, "ok"},
		{[]string{"fds"}, "EMFILE"},
	}, Spec{})
}
