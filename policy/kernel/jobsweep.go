package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Job cgroups are named for the process that made them (the runner: moat
// exec, a launcher, a test binary): <kind>-<pid>-<start>-<id>, where start
// is the runner's start time in clock ticks since boot. The runner kills
// and removes its jobs' cgroups itself; a runner that crashed, or was
// killed with SIGKILL, cannot, and what it leaves may be frozen (v1: it
// died between the freeze and the thaw of a kill) and hold its processes
// for good. SweepJobCgroups, run by every new runner, reaps such leftovers
// and only those: the pid and start time tell a dead runner's job from a
// live one of another moat process, and from a later process that reuses
// the pid.

// JobCgroupName is the name (under CgroupParent) of a cgroup of the given
// kind ("job", "warm") made by this process, with id unique within it.
func JobCgroupName(kind, id string) string {
	return fmt.Sprintf("%s-%s%s", kind, OwnJobCgroupTag(), id)
}

var ownTag = sync.OnceValue(func() string {
	start, _ := processStart(os.Getpid())
	return fmt.Sprintf("%d-%d-", os.Getpid(), start)
})

// OwnJobCgroupTag is what follows the kind in the names of this process's
// job cgroups ("<pid>-<start>-"): a test counts its own leftovers by it
// (moat/job-<tag>*), never another process's.
func OwnJobCgroupTag() string { return ownTag() }

// jobCgroupKinds are the kinds SweepJobCgroups looks at; ownerKinds, the
// names jobOwner reads a runner from (an egress cgroup's too).
var (
	jobCgroupKinds = []string{"job", "warm"}
	ownerKinds     = []string{"job", "warm", egressKind}
)

// jobOwner parses the runner out of a job cgroup's name (or an egress
// cgroup's: egress-<pid>-<start>-<id>).
func jobOwner(name string) (pid int, start uint64, ok bool) {
	for _, k := range ownerKinds {
		rest, found := strings.CutPrefix(name, k+"-")
		if !found {
			continue
		}
		parts := strings.SplitN(rest, "-", 3)
		if len(parts) != 3 || parts[2] == "" {
			return 0, 0, false
		}
		p, err1 := strconv.Atoi(parts[0])
		st, err2 := strconv.ParseUint(parts[1], 10, 64)
		if err1 != nil || err2 != nil || p <= 0 || parts[0] != strconv.Itoa(p) {
			return 0, 0, false
		}
		return p, st, true
	}
	return 0, 0, false
}

// JobRunnerGone reports whether the runner named in a job's name (of its
// cgroup or its job dir: <kind>-<pid>-<start>-<id>) has exited; named is
// false for a name without a runner (an older moat's).
func JobRunnerGone(name string) (gone, named bool) {
	pid, start, ok := jobOwner(name)
	if !ok {
		return false, false
	}
	return runnerGone(pid, start), true
}

// runnerGone reports whether the runner (pid, start) has exited.
func runnerGone(pid int, start uint64) bool {
	now, err := processStart(pid)
	return err != nil || now != start
}

// legacyMinAge is how old a job cgroup with a name of an older moat (no
// runner in it) must be before the sweep removes it, and then only empty.
const legacyMinAge = time.Minute

// SweepJobCgroups reaps the job cgroups of runners that are gone: it
// thaws each, kills what is left in it, waits for it to empty and removes
// its directory in every hierarchy. A live runner's jobs, this process's
// included, are never touched. Names without a runner (an older moat's)
// are removed only when empty and a minute old. It returns the names it
// reaped; an error names the cgroups it could not empty or remove.
func SweepJobCgroups() ([]string, error) {
	names := map[string]bool{}
	for _, root := range cgroupRoots() {
		for _, k := range jobCgroupKinds {
			dirs, _ := filepath.Glob(filepath.Join(root, CgroupParent, k+"-*"))
			for _, d := range dirs {
				names[filepath.Base(d)] = true
			}
		}
	}
	// First every dead runner's processes are killed, then its egress
	// rules go (a rule must go before its cgroup's directory: iptables
	// deletes a cgroup match by path), then the directories.
	var reaped []string
	var errs []error
	var dead []*Cgroup
	for name := range names {
		pid, start, ok := jobOwner(name)
		if !ok {
			removeStale(name, legacyMinAge, func(string) bool { return true })
			continue
		}
		if !runnerGone(pid, start) {
			continue
		}
		c, err := cgroupHandle(name)
		if err != nil {
			continue
		}
		c.openPresent()
		if err := c.Kill(); err != nil {
			errs = append(errs, fmt.Errorf("reaping the cgroup of runner %d, which is gone: %w", pid, err))
			continue
		}
		dead = append(dead, c)
	}
	if len(dead) > 0 || len(deadEgressCgroups()) > 0 {
		if err := SweepEgress(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range dead {
		if err := c.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("reaping the cgroup %s of a runner which is gone: %w", c.id, err))
			continue
		}
		reaped = append(reaped, c.id)
	}
	return reaped, errors.Join(errs...)
}

// openPresent fills c.dirs with the directories of c that exist: after a
// crash mid-creation, some hierarchies may lack it.
func (c *Cgroup) openPresent() {
	for _, root := range cgroupRoots() {
		d := filepath.Join(root, CgroupParent, c.id)
		if _, err := os.Stat(d); err != nil {
			continue
		}
		key := ""
		if !c.v2 {
			key = v1ControllerOf(root)
		}
		c.dirs[key] = d
	}
}

// cgroupRoots are the mount points job cgroups live under: the v2 root, or
// each v1 controller's hierarchy.
func cgroupRoots() []string {
	if CgroupUnified() {
		return []string{"/sys/fs/cgroup"}
	}
	mounts, err := v1Mounts()
	if err != nil {
		return nil
	}
	var roots []string
	for _, ctl := range v1Controllers {
		if mp, ok := mounts[ctl]; ok && !slices.Contains(roots, mp) {
			roots = append(roots, mp)
		}
	}
	return roots
}

// v1ControllerOf names the (first) moat controller mounted at root.
func v1ControllerOf(root string) string {
	mounts, _ := v1Mounts()
	for _, ctl := range v1Controllers {
		if mounts[ctl] == root {
			return ctl
		}
	}
	return root
}

// JobCgroupDirs lists the directories, in every hierarchy, of the job
// cgroups whose names start with prefix (e.g. "job-"+OwnJobCgroupTag()):
// what a test counts after its jobs to see that none is left.
func JobCgroupDirs(prefix string) []string {
	var out []string
	for _, root := range cgroupRoots() {
		dirs, _ := filepath.Glob(filepath.Join(root, CgroupParent, prefix+"*"))
		out = append(out, dirs...)
	}
	return out
}
