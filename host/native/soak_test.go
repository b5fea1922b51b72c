package native

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// Soak: 1000 native runs, four at a time, leave nothing behind. Each job
// is a shell that exits 0 at once (/bin/true's cost plus the shell's);
// every tenth one first leaves a process sleeping in the background and
// files in its dir, /tmp and /dev/shm, as a job that tries to outlive its
// run would. Afterwards no job cgroup is left in any hierarchy, no process
// of the uid range carries the jobs' environment, no uid lease of this
// process is held, no mount was added to the host's namespace and the
// temp dir holds nothing. Other processes on the machine (moat serve,
// another test binary) may run jobs meanwhile: processes are told apart
// by a marker in the environment, leases by their holder's pid, and a job
// cgroup that was not there before counts only if it is still there once
// any job of another process would have ended (its timeout passed).
const (
	soakRuns        = 1000
	soakParallel    = 4
	soakLeaveBehind = 10 // every tenth job leaves a background process and files
)

// soakScript exits 0; with an argument, it first leaves a process and
// files behind.
const soakScript = `if [ -n "$1" ]; then
  /usr/bin/sleep 600 &
  echo x > "$HOME/left" && echo x > /tmp/left && echo x > /dev/shm/left || exit 9
fi
exit 0`

func TestSoakNativeRuns(t *testing.T) {
	testenv.Slow(t, "a soak")
	if os.Geteuid() != 0 {
		testenv.Require(t, "needs root: cgroups and the uid switch are what the soak checks (CI runs as root)")
	}
	// A temp dir of this test's own: the job dirs are made in it, so
	// anything left there is this test's.
	tmp, err := os.MkdirTemp("", "moat-soak-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	marker := "MOAT_SOAK=" + strconv.Itoa(os.Getpid()) + "-" + newID()
	mountsBefore := mountLines(t)

	cgroupsBefore := jobCgroups(t)

	var (
		mu    sync.Mutex
		walls []time.Duration
	)
	runOne := func(i int) error {
		args := []string{"/bin/sh", "-c", soakScript, "soak"}
		if i%soakLeaveBehind == 0 {
			args = append(args, "leave")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := Run(ctx, Spec{Command: args, Env: []string{"PATH=" + DefaultPath, marker},
			ExtraExec: []string{"/usr/bin/sleep"}, Timeout: 10 * time.Second})
		if err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		if res.Status != StatusOK || res.ExitCode != 0 || !slices.Contains(res.Layers, "cgroup") || !slices.Contains(res.Layers, "uid") {
			return fmt.Errorf("run %d: status %s exit %d layers %v (%s): %s %s", i, res.Status, res.ExitCode, res.Layers, res.Reason, res.Stdout, res.Stderr)
		}
		mu.Lock()
		defer mu.Unlock()
		walls = append(walls, res.Wall)
		return nil
	}

	start := time.Now()
	next := make(chan int)
	errs := make(chan error, soakRuns)
	var wg sync.WaitGroup
	for range soakParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := runOne(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range soakRuns {
		next <- i
	}
	close(next)
	wg.Wait()
	took := time.Since(start)
	close(errs)
	failed := 0
	for err := range errs {
		if failed++; failed <= 5 {
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d runs failed", failed, soakRuns)
	}
	slices.Sort(walls)
	t.Logf("%d runs, %d at a time, in %v (%.1f runs/s); job wall time median %v, p99 %v",
		soakRuns, soakParallel, took.Round(time.Millisecond), float64(soakRuns)/took.Seconds(),
		walls[len(walls)/2].Round(time.Millisecond), walls[len(walls)*99/100].Round(time.Millisecond))

	// cgroups: no new job cgroup in any hierarchy, once another process's
	// jobs have had the time to end
	newCgroups := func() []string {
		var added []string
		for _, c := range jobCgroups(t) {
			if !slices.Contains(cgroupsBefore, c) {
				added = append(added, c)
			}
		}
		return added
	}
	left := newCgroups()
	for deadline := time.Now().Add(DefaultTimeout + 5*time.Second); len(left) > 0 && time.Now().Before(deadline); left = newCgroups() {
		time.Sleep(250 * time.Millisecond)
	}
	for _, c := range left {
		t.Errorf("job cgroup left: %s", c)
	}
	// processes: none of the uid range with the jobs' marker
	for _, p := range leftProcesses(t, marker) {
		t.Errorf("left process: %s", p)
	}
	// uid leases: no flock of this process on a lock file of the range
	if held := heldUIDLocks(t); len(held) > 0 {
		t.Errorf("this process still holds the uid leases %v", held)
	}
	// mounts: the host's namespace never sees a job's mounts
	after := mountLines(t)
	for _, l := range after {
		if !slices.Contains(mountsBefore, l) && (strings.Contains(l, tmp) || strings.Contains(l, "moat")) {
			t.Errorf("mount left in the host's namespace: %s", l)
		}
	}
	// temp dir: the jobs dir, empty, and nothing else
	left = nil
	_ = filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
		if p != tmp && p != JobsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("left in the temp dir: %v", left[:min(len(left), 10)])
	}
}

// jobCgroups lists the job cgroups (job-*, under moat/) of every
// hierarchy that are this process's or a gone runner's: never those of
// another live moat, such as another package's tests running beside this
// one (make test runs two packages at a time).
func jobCgroups(t *testing.T) []string {
	var all []string
	for _, root := range cgroupRoots(t) {
		found, _ := filepath.Glob(filepath.Join(root, "moat", "job-*"))
		for _, d := range found {
			name := filepath.Base(d)
			gone, _ := kernel.JobRunnerGone(name)
			if strings.HasPrefix(name, "job-"+kernel.OwnJobCgroupTag()) || gone {
				all = append(all, d)
			}
		}
	}
	return all
}

// cgroupRoots are the mount points of every cgroup hierarchy.
func cgroupRoots(t *testing.T) []string {
	var roots []string
	for _, l := range mountLines(t) {
		// ... mountpoint ... - fstype source options
		pre, post, ok := strings.Cut(l, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 3 {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") {
			roots = append(roots, f[2]) // major:minor root mountpoint ...
		}
	}
	if len(roots) == 0 {
		t.Fatal("no cgroup hierarchy in /proc/self/mountinfo")
	}
	return roots
}

func mountLines(t *testing.T) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// drop the mount id and parent id, which a remount renumbers
		if f := strings.SplitN(l, " ", 3); len(f) == 3 {
			lines = append(lines, f[2])
		}
	}
	return lines
}

// leftProcesses lists the processes with marker in their environment,
// and those of them in the uid range.
func leftProcesses(t *testing.T, marker string) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) != nil {
			continue // gone meanwhile
		}
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if slices.ContainsFunc(bytes.Split(env, []byte{0}), func(v []byte) bool { return string(v) == marker }) {
			cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			inRange := st.Uid >= UIDBase && st.Uid < UIDBase+UIDCount
			left = append(left, fmt.Sprintf("pid %d uid %d (in the job range: %v) %q", pid, st.Uid, inRange, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
		}
	}
	return left
}

// heldUIDLocks lists the uids whose lock file this process holds a flock
// on, from /proc/locks ("1: FLOCK ADVISORY WRITE pid maj:min:inode 0 EOF").
func heldUIDLocks(t *testing.T) []string {
	ents, err := os.ReadDir(UIDLockDir)
	if err != nil {
		t.Fatalf("uid lock dir: %v", err)
	}
	inodes := map[uint64]string{}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			inodes[fi.Sys().(*syscall.Stat_t).Ino] = e.Name()
		}
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	me := strconv.Itoa(os.Getpid())
	var held []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || f[1] != "FLOCK" || f[4] != me {
			continue
		}
		dev := strings.Split(f[5], ":")
		ino, err := strconv.ParseUint(dev[len(dev)-1], 10, 64)
		if err == nil && inodes[ino] != "" {
			held = append(held, inodes[ino])
		}
	}
	return held
}
