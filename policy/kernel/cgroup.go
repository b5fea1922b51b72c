package kernel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/policy/kernel/child"

	cgroups "github.com/containerd/cgroups/v3"
)

// CgroupParent is the cgroup under which every job cgroup is created, in
// each v1 hierarchy (memory, cpu, cpuacct, pids, freezer) or in the v2 tree.
const CgroupParent = "moat"

// JobLimits are the resource limits of one job's cgroup. Zero means no limit.
type JobLimits struct {
	MemoryBytes int64   // memory.limit_in_bytes (v1) / memory.max (v2)
	CPUQuota    float64 // cores: 0.5 = half a core over each 100 ms period
	Pids        int64   // pids.max (tasks, threads included)
}

// Cgroup is one job's cgroup. On this machine kind (hybrid: controllers on
// v1) it is a directory in each v1 hierarchy; on a pure v2 host it is one
// directory in the unified tree. Controllers are written through the
// cgroup filesystem directly (they are a handful of files); only the mode
// detection comes from containerd/cgroups.
type Cgroup struct {
	id   string
	v2   bool
	dirs map[string]string // controller → job dir (v1); "" → job dir (v2)

	mu        sync.Mutex
	destroyed bool

	// Counters that only grow (v1 cannot reset them), as they were at the
	// last Reset: Stats reports the current job's share.
	oomBase, pidsMaxBase, cpuBase uint64
}

var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer"}

// CgroupUnified reports whether the host runs the pure cgroup v2 hierarchy.
func CgroupUnified() bool { return cgroups.Mode() == cgroups.Unified }

// NewJobCgroup creates the job cgroup CgroupParent/<id> with the limits.
// It needs root (or a delegated tree). On error nothing is left behind.
func NewJobCgroup(id string, lim JobLimits) (*Cgroup, error) {
	c, err := cgroupHandle(id)
	if err != nil {
		return nil, err
	}
	create := c.createV1
	if c.v2 {
		create = c.createV2
	}
	if err := create(lim); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// cgroupHandle checks id and the cgroup mode: a Cgroup with no
// directories yet.
func cgroupHandle(id string) (*Cgroup, error) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil, fmt.Errorf("cgroup: bad job id %q", id)
	}
	switch cgroups.Mode() {
	case cgroups.Unavailable:
		return nil, errors.New("cgroup: no cgroup filesystem mounted")
	case cgroups.Unified:
		return &Cgroup{id: id, v2: true, dirs: map[string]string{}}, nil
	}
	return &Cgroup{id: id, dirs: map[string]string{}}, nil
}

// OpenJobCgroup returns the existing cgroup CgroupParent/<id> (made by
// NewJobCgroup, maybe by another process) without changing it: to read
// what happened in it and remove it once its processes are gone. Its
// counters are read from zero (Stats reports everything since creation).
func OpenJobCgroup(id string) (*Cgroup, error) {
	c, err := cgroupHandle(id)
	if err != nil {
		return nil, err
	}
	if c.v2 {
		c.dirs[""] = filepath.Join("/sys/fs/cgroup", CgroupParent, id)
	} else {
		mounts, err := v1Mounts()
		if err != nil {
			return nil, err
		}
		for _, ctl := range v1Controllers {
			if mp, ok := mounts[ctl]; ok {
				c.dirs[ctl] = filepath.Join(mp, CgroupParent, id)
			}
		}
	}
	for _, d := range c.dirs {
		if _, err := os.Stat(d); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	return c, nil
}

// MemoryLimit returns the cgroup's memory limit in bytes (0: none).
func (c *Cgroup) MemoryLimit() int64 {
	if c.v2 {
		v := readString(c.dirs[""], "memory.max")
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return int64(readUint(c.dirs["memory"], "memory.limit_in_bytes"))
}

// V2 reports whether the cgroup lives in the unified (v2) hierarchy.
func (c *Cgroup) V2() bool { return c.v2 }

// Dir returns the job directory of a v1 controller, or the v2 directory for "".
func (c *Cgroup) Dir(controller string) string { return c.dirs[controller] }

// ProcsFiles returns the cgroup.procs files to write a pid into (one per
// hierarchy), for a re-exec'd wrapper that joins by itself.
func (c *Cgroup) ProcsFiles() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range c.dirs {
		if !seen[d] {
			seen[d] = true
			out = append(out, filepath.Join(d, "cgroup.procs"))
		}
	}
	return out
}

func (c *Cgroup) createV1(lim JobLimits) error {
	mounts, err := v1Mounts()
	if err != nil {
		return err
	}
	for _, ctl := range v1Controllers {
		mp, ok := mounts[ctl]
		if !ok {
			return fmt.Errorf("cgroup: v1 controller %s is not mounted", ctl)
		}
		parent := filepath.Join(mp, CgroupParent)
		if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup: %w", err)
		}
		dir := filepath.Join(parent, c.id)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup: %w", err)
		}
		c.dirs[ctl] = dir
	}
	return c.setLimits(lim)
}

func (c *Cgroup) createV2(lim JobLimits) error {
	const root = "/sys/fs/cgroup"
	parent := filepath.Join(root, CgroupParent)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroup: %w", err)
	}
	for _, d := range []string{root, parent} {
		if err := writeFile(d, "cgroup.subtree_control", "+memory +pids +cpu"); err != nil {
			return err
		}
	}
	dir := filepath.Join(parent, c.id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroup: %w", err)
	}
	c.dirs[""] = dir
	return c.setLimits(lim)
}

// setLimits writes the limits; a zero limit is left as it is.
func (c *Cgroup) setLimits(lim JobLimits) error {
	if c.v2 {
		dir := c.dirs[""]
		if lim.MemoryBytes > 0 {
			if err := writeFile(dir, "memory.max", strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
				return err
			}
			_ = writeFile(dir, "memory.swap.max", "0")
		}
		if lim.CPUQuota > 0 {
			if err := writeFile(dir, "cpu.max", fmt.Sprintf("%d 100000", int(lim.CPUQuota*100000))); err != nil {
				return err
			}
		}
		if lim.Pids > 0 {
			if err := writeFile(dir, "pids.max", strconv.FormatInt(lim.Pids, 10)); err != nil {
				return err
			}
		}
		return nil
	}
	if lim.MemoryBytes > 0 {
		if err := writeFile(c.dirs["memory"], "memory.limit_in_bytes", strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
			return err
		}
		_ = writeFile(c.dirs["memory"], "memory.swappiness", "0") // best effort
	}
	if lim.CPUQuota > 0 {
		const period = 100000
		if err := writeFile(c.dirs["cpu"], "cpu.cfs_period_us", strconv.Itoa(period)); err != nil {
			return err
		}
		if err := writeFile(c.dirs["cpu"], "cpu.cfs_quota_us", strconv.Itoa(int(lim.CPUQuota*period))); err != nil {
			return err
		}
	}
	if lim.Pids > 0 {
		if err := writeFile(c.dirs["pids"], "pids.max", strconv.FormatInt(lim.Pids, 10)); err != nil {
			return err
		}
	}
	return nil
}

// Reset readies a cgroup for a new job: the job's limits, and usage
// counted from now (peak memory restarts at the current usage; OOM kills,
// refused forks and CPU time are counted from here by Stats). A pool of
// warm wrappers uses it on a cgroup that already holds a wrapper, and
// that may have served a job before. It fails when a limit cannot be
// taken, such as a memory limit below the current usage.
func (c *Cgroup) Reset(lim JobLimits) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return errors.New("cgroup: destroyed")
	}
	if err := c.setLimits(lim); err != nil {
		return err
	}
	if !c.v2 {
		// v2's memory.peak resets only per open file, on recent
		// kernels; there the wrapper's few MiB stay in the peak.
		_ = writeFile(c.dirs["memory"], "memory.max_usage_in_bytes", "0")
	}
	c.oomBase, c.pidsMaxBase, c.cpuBase = c.counters()
	return nil
}

// Empty releases the memory still charged to a cgroup whose processes are
// gone (page cache its last job read), so that a next job starting in it
// starts from nothing. v1 only (memory.force_empty); on v2 it does nothing.
func (c *Cgroup) Empty() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return errors.New("cgroup: destroyed")
	}
	if c.v2 {
		return nil
	}
	return writeFile(c.dirs["memory"], "memory.force_empty", "0")
}

// AddSelf moves the calling process (all its threads) into the job cgroup.
func (c *Cgroup) AddSelf() error { return c.Add(0) }

// Add moves process pid (0: the caller) into the job cgroup.
func (c *Cgroup) Add(pid int) error { return JoinCgroup(c.ProcsFiles(), pid) }

// JoinCgroup writes pid (0: the caller) into each cgroup.procs file.
func JoinCgroup(procsFiles []string, pid int) error { return child.JoinCgroup(procsFiles, pid) }

// Stats returns the job's peak memory (bytes), whether the OOM killer killed
// a member, whether a fork failed at the pids limit, and the CPU time used
// by all members (ns).
func (c *Cgroup) Stats() (peakMemory uint64, oomKilled bool, pidsMaxHit bool, cpuNS uint64) {
	c.mu.Lock()
	oomBase, pidsMaxBase, cpuBase := c.oomBase, c.pidsMaxBase, c.cpuBase
	c.mu.Unlock()
	oom, pidsMax, cpu := c.counters()
	if c.v2 {
		peakMemory = readUint(c.dirs[""], "memory.peak")
	} else {
		peakMemory = readUint(c.dirs["memory"], "memory.max_usage_in_bytes")
	}
	return peakMemory, oom > oomBase, pidsMax > pidsMaxBase, cpu - min(cpu, cpuBase)
}

// counters reads the cumulative OOM kills, refused forks and CPU time (ns).
func (c *Cgroup) counters() (oomKills, pidsMax, cpuNS uint64) {
	if c.v2 {
		d := c.dirs[""]
		return readKey(d, "memory.events", "oom_kill"), readKey(d, "pids.events", "max"), readKey(d, "cpu.stat", "usage_usec") * 1000
	}
	return readKey(c.dirs["memory"], "memory.oom_control", "oom_kill"), readKey(c.dirs["pids"], "pids.events", "max"),
		readUint(c.dirs["cpuacct"], "cpuacct.usage")
}

// Pids returns the pids of the job's processes.
func (c *Cgroup) Pids() []int {
	d := c.dirs["pids"]
	if c.v2 {
		d = c.dirs[""]
	}
	return readPids(d)
}

// Kill kills every process of the job and waits until the cgroup is empty
// in every hierarchy, or fails with a *SurvivorsError naming what is
// left. v2 uses cgroup.kill; v1 has none, so it freezes the group, sends
// SIGKILL to each member, and thaws it (a frozen member cannot fork
// between the listing and the kill).
//
// Whatever the freeze did, the group is thawed before Kill returns: a
// SIGKILL is only acted on once a task runs, so a group left frozen holds
// its processes (and their memory) for good. A killer that dies between
// the freeze and the thaw leaves exactly that; the sweep (SweepJobCgroups)
// thaws and empties such a group once its owner is gone.
func (c *Cgroup) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return nil
	}
	return c.kill()
}

// killWait bounds how long Kill waits for the members to be gone after
// SIGKILL. A killed task still has to leave the kernel (an uninterruptible
// sleep in reclaim or I/O ends first), which takes milliseconds, rarely a
// second under memory pressure.
var killWait = 5 * time.Second

func (c *Cgroup) kill() error {
	if c.v2 {
		d := c.dirs[""]
		if len(c.allPids()) == 0 {
			return nil
		}
		if err := writeFile(d, "cgroup.kill", "1"); err != nil {
			for _, p := range c.allPids() {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		_ = writeFile(d, "cgroup.freeze", "0") // no-op unless someone froze it
		return c.waitEmpty()
	}
	fz := c.dirs["freezer"]
	if len(c.allPids()) == 0 {
		c.thaw()
		return nil
	}
	if fz != "" && writeFile(fz, "freezer.state", "FROZEN") == nil {
		// Bounded: a task in an uninterruptible sleep delays FROZEN; the
		// kill below and the thaw after it run in any case.
		for i := 0; i < 500 && !strings.HasPrefix(readString(fz, "freezer.state"), "FROZEN"); i++ {
			time.Sleep(time.Millisecond)
		}
	}
	for _, p := range c.allPids() {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	c.thaw()
	return c.waitEmpty()
}

// thaw makes sure a v1 group is not frozen (or freezing): see Kill.
func (c *Cgroup) thaw() {
	if fz := c.dirs["freezer"]; fz != "" && !c.v2 && readString(fz, "freezer.state") != "THAWED" {
		_ = writeFile(fz, "freezer.state", "THAWED")
	}
}

// allPids lists the members of the job in any of its hierarchies: a
// wrapper that died while joining them is in some and not the others.
func (c *Cgroup) allPids() []int {
	var out []int
	for _, d := range c.dirs {
		for _, p := range readPids(d) {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// SurvivorsError is a job cgroup whose processes outlived SIGKILL and the
// bounded wait for them: they still hold the job's memory and maybe its
// files, and the cgroup's directories stay. The job must be reported as a
// failure of the host, not as the job's outcome.
type SurvivorsError struct {
	Cgroup string        // CgroupParent/<id>
	Pids   []int         // still members when the wait ended
	Waited time.Duration // how long the wait was
}

func (e *SurvivorsError) Error() string {
	return fmt.Sprintf("cgroup %s: %d process(es) (pids %v) still alive %s after SIGKILL; they keep the job's memory until they exit (look for a task stuck in the kernel: cat /proc/PID/stack)",
		e.Cgroup, len(e.Pids), e.Pids, e.Waited)
}

func (c *Cgroup) waitEmpty() error {
	deadline := time.Now().Add(killWait)
	for {
		ps := c.allPids()
		if len(ps) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return &SurvivorsError{Cgroup: CgroupParent + "/" + c.id, Pids: ps, Waited: killWait}
		}
		for _, p := range ps {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		c.thaw()
		time.Sleep(2 * time.Millisecond)
	}
}

// Destroy kills every member and removes the cgroup. It is idempotent.
func (c *Cgroup) Destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return nil
	}
	if err := c.kill(); err != nil {
		// Survivors hold the directories: rmdir could only fail (EBUSY).
		return err
	}
	if err := c.remove(); err != nil {
		return err
	}
	c.destroyed = true
	return nil
}

// remove deletes the job directories, retrying while the kernel still
// counts exiting tasks (EBUSY).
func (c *Cgroup) remove() error {
	var errs []error
	for _, d := range c.dirs {
		deadline := time.Now().Add(2 * time.Second)
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("cgroup: rmdir %s: %w", d, err))
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// v1Mounts maps each v1 controller to its mount point, from mountinfo.
func v1Mounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) || fields[sep+1] != "cgroup" || len(fields) < 5 {
			continue
		}
		for _, opt := range strings.Split(fields[sep+3], ",") {
			for _, ctl := range v1Controllers {
				if opt == ctl {
					out[ctl] = fields[4]
				}
			}
		}
	}
	return out, sc.Err()
}

func writeFile(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	return nil
}

func readString(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return string(bytes.TrimSpace(b))
}

func readUint(dir, name string) uint64 {
	n, _ := strconv.ParseUint(readString(dir, name), 10, 64)
	return n
}

// readKey reads "key value" lines (memory.events, oom_control, cpu.stat).
func readKey(dir, name, key string) uint64 {
	for _, line := range strings.Split(readString(dir, name), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// readPids lists the members of a cgroup. A reader in another pid
// namespace sees 0 for members it cannot name; those are dropped, as
// kill(0) would signal the reader's own process group.
func readPids(dir string) []int {
	if dir == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(readString(dir, "cgroup.procs")) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// PrimeCgroupAttach starts, in the background, the wait that a v1 cgroup
// attach costs, so that a job's wrapper joining its cgroups a few
// milliseconds later finds it already under way. It returns at once; a
// failure (no root, no v1 hierarchy, a Landlocked caller) only means no
// head start.
//
// Every write to a v1 cgroup.procs takes the kernel's global threadgroup
// rwsem for writing, and the first writer after a quiet spell waits out an
// RCU grace period (rcu_sync): ~7 ms on the test machine, the largest
// single part of a native run's overhead, while the next writers within
// the grace period's window pay ~0.1 ms. The priming write moves this
// process into the cgroup it is already in (pid "0" is the writer, in the
// pids hierarchy): a no-op for placement, a head start for the lock. It
// is a latency trick only: the wrapper still joins the job cgroups itself
// before it executes anything, as before.
func PrimeCgroupAttach() {
	if os.Geteuid() != 0 || CgroupUnified() {
		return
	}
	go func() {
		procs, ok := ownV1Procs("pids")
		if !ok {
			return
		}
		_ = os.WriteFile(procs, []byte("0"), 0)
	}()
}

// ownV1Procs returns the cgroup.procs file of the cgroup this process is in
// within the v1 hierarchy of controller.
func ownV1Procs(controller string) (string, bool) {
	mounts, err := v1Mounts()
	if err != nil || mounts[controller] == "" {
		return "", false
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				return filepath.Join(mounts[controller], filepath.FromSlash(parts[2]), "cgroup.procs"), true
			}
		}
	}
	return "", false
}
