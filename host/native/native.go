// Package native runs a program that has no WebAssembly path (an
// interpreter with a script, a compiled binary, a toolchain) as a confined
// native child: the fallback runner.
//
// The child is moat's own binary re-executed as a wrapper (see
// kernel.ConfineMain), which confines itself and then execs the target. In
// order:
//
//  1. own cgroup (memory, CPU, pids), joined by the wrapper before it execs
//     (v1 has no race-free "start inside"); on pure v2 the child is born in
//     it (clone3 CLONE_INTO_CGROUP);
//  2. new pid, mount, net, ipc and uts namespaces (plus a user namespace
//     when not root); the network namespace is empty (lo down): zero egress;
//  3. rlimits (AS, CPU, FSIZE, NOFILE, NPROC, CORE=0);
//  4. an unprivileged uid and gid of the job's own, leased for the run
//     (as root; see UIDBase);
//  5. Landlock: read-only system dirs, execute only the target, its loader
//     and Spec.ExtraExec, read-write only the job dir; no TCP; IPC scoped;
//  6. the child seccomp filter (kernel.FilterRules: foreign ABIs, the
//     names in kernel.ChildDenyList, and argument checks);
//  7. exec.
//
// Every run gets a fresh job dir (unless Spec.Dir is given) and a fresh
// cgroup, and both are removed when Run returns, also when the child
// crashed or was killed. The child is the init of its pid namespace: when
// it dies, the kernel kills everything else in the namespace, and the
// cgroup kill catches anything left.
package native

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/policy/kernel"
	"golang.org/x/sys/unix"
)

// Spec describes one native run. Zero fields take the defaults shown.
type Spec struct {
	// Command is the argv. Command[0], when it has no slash, is looked up
	// in the PATH of Env (default /usr/bin:/bin), not moat's own PATH, and
	// symlinks are resolved; a "#!" script's interpreter is allowed to
	// execute as well.
	Command []string
	// Dir is the job dir: the working directory and the only writable
	// place. Empty: a fresh directory under os.TempDir()/moat-jobs (named
	// job-<runner pid>-<runner start>-<id>, as its cgroup), mode
	// 0700, owned by the job uid, removed after the run. A given Dir is
	// used as is and kept.
	Dir   string
	Stdin []byte
	// Env is the environment of the command. Default: PATH=/usr/bin:/bin
	// and LANG=C.UTF-8; HOME and TMPDIR are the job dir unless Env sets
	// them.
	Env         []string
	Timeout     time.Duration // wall clock; default 10s
	MemoryBytes int64         // cgroup memory limit; default 256 MiB
	Pids        int64         // processes and threads; default 64
	CPUQuota    float64       // cores; default 1
	MaxOutput   int           // per stream; default 1 MiB; the rest is dropped (Result.Truncated), the run goes on
	// DiskBytes bounds what the job can write: the size of its fresh job
	// dir (a tmpfs of its own) and of each of its /tmp, /var/tmp, /run
	// and /dev/shm. Default 256 MiB. A given Dir is the caller's
	// directory, bound as it is: only RLIMIT_FSIZE bounds a file there.
	// tmpfs pages count against MemoryBytes too.
	DiskBytes int64
	// DiskFiles, when set, bounds the names (files, directories) each of
	// those tmpfs holds: past it the job gets ENOSPC. A code-execution
	// run's is its scratch limit (languages.ExecLimits.ScratchFiles).
	// Unset, the kernel's default applies.
	DiskFiles int64 `json:",omitempty"`
	// AddressSpace, when set, is the RLIMIT_AS in bytes instead of the
	// default derived from MemoryBytes. Raise it for runtimes that reserve
	// address space up front (V8 reserves about 10 GB per WebAssembly
	// memory for its guard regions); the cgroup's memory limit still bounds
	// what they use, but without a cgroup (not root) RLIMIT_AS is the only
	// memory bound.
	AddressSpace uint64
	// StopAtMaxOutput kills the job as soon as a stream passes MaxOutput
	// (Result.Truncated and Status killed), rather than letting a program
	// that floods its output run on to its timeout.
	StopAtMaxOutput bool
	ExtraExec       []string // more binaries (or directories of them) the command may execute (e.g. /usr/bin/cat for a sh script)
	// ReadOnly are more paths (files or directories) the command may read,
	// beyond the system directories: a toolchain tree outside /usr, a
	// submission's source files.
	ReadOnly []string
	// ReadWrite are more directories the command may read and write (never
	// execute), beyond the job dir: a build cache the operator chose to
	// share between jobs. Each is a grant of persistence across jobs; use
	// sparingly. As root, each is handed to the job's uid for the run, as
	// a given Dir is.
	ReadWrite []string
	// Granted are directories the operator granted the command read-write
	// (a plugin's filesystem: [/srv/out:rw]). Unlike ReadWrite they stay
	// the operator's: never handed to the job's uid, so the directory's
	// own permissions decide whether that uid may write; and no symlink,
	// FIFO or socket may be made in them (kernel.ChildFS.Granted).
	Granted []string `json:",omitempty"`
	// Mounts are host directories the command sees at another path of
	// its own root (moat exec --native --dir ./data:/data): read-only, or
	// read-write as Granted. The guest path must lie apart from
	// everything else the root holds (kernel.CheckMount: not /, /proc,
	// the system or scratch directories, the job dir, another grant);
	// the host directory may lie anywhere, /tmp included, since only the
	// guest path is named by the Landlock rules.
	Mounts []Mount `json:",omitempty"`
	// Wrapper is the binary that confines the child and execs the command.
	// Default: moat-confine beside the running executable when there is
	// one (it starts in a fraction of the time), else the running
	// executable itself, which must call kernel.ConfineMain first thing
	// in main (moat does, and so do the tests).
	Wrapper string
	// AllowNet grants TCP targets ("host:port"; names are resolved by the
	// host, now). Without it the command has an empty network namespace:
	// zero egress. With it the command shares the host's network, and a
	// per-job iptables chain (matched by its cgroup) plus Landlock's TCP
	// rules let it reach exactly these targets. Needs root.
	AllowNet []string
	// WorkDir is the working directory when it is not the job dir: a
	// directory of ReadOnly or ReadWrite (a plugin's sources, read-only),
	// so a command such as "python3 main.py" finds its files. HOME and
	// TMPDIR stay the job dir, the only place it may write.
	WorkDir string `json:",omitempty"`
	// Seed, when set, is a directory of regular files and directories
	// copied into the fresh job dir before the command starts (the job's
	// own, writable, counted against DiskBytes and DiskFiles): data files
	// a program opens by a relative name. Only with the fresh job dir
	// (Dir empty). Anything in it that is neither a file nor a directory
	// refuses the run (kernel.RootSpec.Seed).
	Seed string `json:",omitempty"`
	// LongLived marks a supervised worker (ConfinedLauncher): Timeout is
	// not its lifetime and no RLIMIT_CPU bounds its CPU seconds over its
	// life; each invocation has its own deadline and the cgroup's CPU
	// quota bounds its rate.
	LongLived bool `json:",omitempty"`
	// UID and GID the command runs as when moat is root. Default: a uid
	// of the job's own, leased from [UIDBase, UIDBase+UIDCount) for the
	// run, and the gid of the same number; a given Dir is handed to it.
	// Ignored when moat is not root: the command then keeps moat's uid
	// (inside its own user namespace, without capabilities).
	UID, GID uint32
}

// Defaults.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultMemory    = 256 << 20
	DefaultPids      = 64
	DefaultCPUQuota  = 1.0
	DefaultMaxOutput = 1 << 20
	DefaultDisk      = 256 << 20
	DefaultPath      = "/usr/bin:/bin"
)

// Status is the outcome of a run.
type Status string

const (
	StatusOK           Status = "ok"            // exit code 0
	StatusTimeout      Status = "timeout"       // the wall-clock limit passed; the job was killed
	StatusMemoryLimit  Status = "memory-limit"  // the cgroup's OOM killer killed a member
	StatusKilled       Status = "killed"        // ended by a signal (or the caller's context)
	StatusRuntimeError Status = "runtime-error" // non-zero exit code
	StatusRefused      Status = "refused"       // confinement failed before the exec: Reason says why
)

// Result is what a run produced.
type Result struct {
	// Warm: the job ran in a wrapper a Pool had started ahead of time.
	Warm      bool          `json:"warm,omitempty"`
	Status    Status        `json:"status"`
	ExitCode  int           `json:"exit_code"`        // -1 when killed by a signal
	Signal    string        `json:"signal,omitempty"` // e.g. "killed"
	Stdout    []byte        `json:"stdout"`
	Stderr    []byte        `json:"stderr"`
	Truncated bool          `json:"truncated,omitempty"` // a stream passed MaxOutput
	Wall      time.Duration `json:"wall_ns"`
	CPU       time.Duration `json:"cpu_ns"`
	// PeakMemory is the cgroup's peak usage, or the child's max RSS when
	// there is no cgroup.
	PeakMemory uint64 `json:"peak_memory"`
	// PidsLimitHit: a fork or thread creation failed at the pids limit.
	PidsLimitHit bool     `json:"pids_limit_hit,omitempty"`
	Layers       []string `json:"layers"`                // applied, in order
	Unavailable  []string `json:"unavailable,omitempty"` // "layer: why"
	Reason       string   `json:"reason,omitempty"`      // refused / killed / runtime-error by moat: why
}

// job is a started confined child and what must be undone after it.
type job struct {
	spec     Spec
	cmd      *exec.Cmd
	cg       *kernel.Cgroup
	res      *Result
	statusR  *os.File
	stdout   *cappedBuffer
	stderr   *cappedBuffer
	overflow chan struct{} // closed when a stream passes MaxOutput with StopAtMaxOutput
	started  time.Time
	cleanups []func()
	// survivors is set when the job's processes outlived the kill (a
	// *kernel.SurvivorsError): the run is then an error, not a result.
	survivors error
}

// killed records err, a failure to empty the job's cgroup, for Run.
func (j *job) killed(err error) {
	if err != nil && j.survivors == nil {
		j.survivors = err
	}
}

// cleanup undoes the job's setup in reverse order: the cgroup's processes
// die before the egress chain and the job dir go.
func (j *job) cleanup() {
	for i := len(j.cleanups) - 1; i >= 0; i-- {
		j.cleanups[i]()
	}
	j.cleanups = nil
}

// kill ends every process of the job. The child is the init of its pid
// namespace, so its death takes every other member with it; the cgroup
// kill is the backstop. It signals through os.Process (a pidfd), never
// by number: after Wait a raw pid may name another process, and a pid of
// 0 would name the caller's own process group.
func (j *job) kill() {
	if j.cg != nil {
		j.killed(j.cg.Kill())
	}
	if j.cmd.Process != nil {
		_ = j.cmd.Process.Kill()
	}
}

// childAttr is how a confined child is cloned: its own pid, mount, ipc,
// uts and (without egress rules) net namespaces, its own process group,
// killed with its parent; without root, a user namespace whose uid 0 is
// the caller (the wrapper is root there to mount /proc, then drops every
// capability for good, so the command holds none).
func childAttr(root bool, uid, gid int, ownNet bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
	}
	if ownNet {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	if !root {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	return attr
}

// exitResult summarizes a job that has exited (after cmd.Wait), for a
// worker: its exit, and what its cgroup observed.
func (j *job) exitResult() *Result {
	res := &Result{Status: StatusOK, ExitCode: -1, Layers: j.res.Layers, Unavailable: j.res.Unavailable}
	if ps := j.cmd.ProcessState; ps != nil {
		res.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal, res.Status = ws.Signal().String(), StatusKilled
		} else if res.ExitCode != 0 {
			res.Status = StatusRuntimeError
		}
	}
	if j.cg != nil {
		peak, oom, pidsHit, cpu := j.cg.Stats()
		res.PeakMemory, res.PidsLimitHit, res.CPU = peak, pidsHit, time.Duration(cpu)
		if oom {
			res.Status = StatusMemoryLimit
		}
	}
	res.Wall = time.Since(j.started)
	return res
}

// start sets up every layer and starts the confined child. extra files
// become the child's fds 3, 4, ... (the pipe transport of a worker); the
// wrapper's status pipe follows them. With stdout or stderr nil, the
// output is captured (capped) in the job.
func start(spec Spec, extraFiles []*os.File, stdoutW, stderrW io.Writer) (j *job, err error) {
	return startWith(nil, spec, extraFiles, stdoutW, stderrW)
}

// startWith is start, taking a warm wrapper from pool when the spec allows
// (no extra files, captured output, no egress rules).
func startWith(pool *Pool, spec Spec, extraFiles []*os.File, stdoutW, stderrW io.Writer) (j *job, err error) {
	return startIO(pool, spec, extraFiles, nil, stdoutW, stderrW)
}

// startIO is startWith with the child's stdin given (a Process's pipe);
// nil is spec.Stdin. A given stdin, as given writers, means a cold start.
func startIO(pool *Pool, spec Spec, extraFiles []*os.File, stdinR io.Reader, stdoutW, stderrW io.Writer) (j *job, err error) {
	j = &job{}
	self := j // the error returns below set j to nil; the cleanup needs the job
	defer func() {
		if err != nil {
			self.cleanup()
		}
	}()
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, errors.New("native: no command")
	}
	if err := checkEnv(spec.Env); err != nil {
		return nil, err
	}
	if err := CheckMounts(spec); err != nil {
		return nil, err
	}
	if spec.Seed != "" && (spec.Dir != "" || !filepath.IsAbs(spec.Seed)) {
		return nil, fmt.Errorf("native: seed %q: it must be an absolute path, and is for the fresh job dir (no Dir)", spec.Seed)
	}
	s := withDefaults(spec)
	root := os.Geteuid() == 0
	if root && !pool.joinedReady() {
		// First, so the kernel's wait for the wrapper's cgroup join runs
		// alongside the rest of the set-up (see PrimeCgroupAttach). A
		// warm wrapper has joined already: nothing to wait for.
		kernel.PrimeCgroupAttach()
	}
	uid, gid := int(s.UID), int(s.GID)
	switch {
	case !root:
		uid, gid = os.Getuid(), os.Getgid()
	case s.UID == 0:
		lease, err := leaseUID()
		if err != nil {
			return nil, fmt.Errorf("native: %w", err)
		}
		j.cleanups = append(j.cleanups, lease.release) // the first set up, the last undone
		uid, gid = lease.uid, lease.uid
	}
	if s.GID == 0 && root {
		gid = uid
	}

	target, err := lookPath(s.Command[0], envPath(s.Env))
	if err != nil {
		return nil, fmt.Errorf("native: command %s: %w", s.Command[0], err)
	}
	extra := append([]string{}, s.ExtraExec...)
	if interp := shebang(target); interp != "" {
		extra = append(extra, interp)
	}
	for i, p := range extra {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			extra[i] = r
		}
	}

	id := newID()
	dir := s.Dir
	if root {
		// The caller's directories become the job uid's (see handOver).
		for _, d := range append([]string{dir}, s.ReadWrite...) {
			if d == "" {
				continue
			}
			if err := handOver(d, uid, gid); err != nil {
				return nil, fmt.Errorf("native: %s: %w", d, err)
			}
		}
	}
	if dir == "" {
		if dir, err = makeJobDir(id, root, uid, gid); err != nil {
			return nil, fmt.Errorf("native: job dir: %w", err)
		}
		j.cleanups = append(j.cleanups, func() { os.RemoveAll(dir) })
	}
	env := s.Env
	if len(spec.Env) == 0 {
		env = []string{"PATH=" + DefaultPath, "LANG=C.UTF-8"}
	}
	for _, v := range []string{"HOME", "TMPDIR"} {
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, v+"=") }) {
			env = append(env, v+"="+dir)
		}
	}

	res := &Result{}
	// With egress targets the job shares the host's network namespace,
	// held by iptables rules on its cgroup (set up below, once the cgroup
	// exists) and by Landlock's TCP rules on these ports.
	var targets []kernel.EgressTarget
	var ports []uint16
	allowNet := len(s.AllowNet) > 0
	if allowNet {
		if !root {
			return nil, errors.New("native: --allow-net needs root (iptables rules per job); without it a job has no network at all")
		}
		if targets, err = kernel.ParseEgressTargets(s.AllowNet); err != nil {
			return nil, fmt.Errorf("native: %w", err)
		}
		for _, t := range targets {
			ports = append(ports, uint16(t.Port))
		}
	}
	attr := childAttr(root, uid, gid, !allowNet)
	var warm *warmWrapper
	if !allowNet && len(extraFiles) == 0 && stdinR == nil && stdoutW == nil && stderrW == nil {
		warm = pool.take(wrapperPath(s.Wrapper), attr.Cloneflags)
	}
	lim := kernel.JobLimits{MemoryBytes: s.MemoryBytes, CPUQuota: s.CPUQuota, Pids: s.Pids}
	var cg *kernel.Cgroup
	prejoined := false
	if warm != nil && warm.cg != nil {
		// The wrapper joined its cgroup while it waited: only the job's
		// limits are new. A limit the cgroup cannot take (memory below
		// what the wrapper already uses) sends the job to a cold start.
		if err := warm.cg.Reset(lim); err != nil {
			warm.discard()
			pool.done()
			warm = nil
		} else {
			cg, prejoined = warm.cg, true
			warm.cg = nil // the job's now: its cleanup hands it back
			res.Layers = append(res.Layers, "cgroup")
			j.cleanups = append(j.cleanups, func() { j.killed(pool.recycle(cg)) })
		}
	}
	if cg == nil && root {
		sweepOnce()
		cg, err = kernel.NewJobCgroup(kernel.JobCgroupName("job", id), lim)
		if err != nil {
			res.Unavailable = append(res.Unavailable, "cgroup: "+err.Error())
			cg = nil
		} else {
			res.Layers = append(res.Layers, "cgroup")
			j.cleanups = append(j.cleanups, func() { j.killed(cg.Destroy()) })
		}
	} else if !root {
		res.Unavailable = append(res.Unavailable, "cgroup: not root (memory, CPU and pids limits need root; rlimits still apply)")
	}

	workDir := dir
	if s.WorkDir != "" {
		if workDir, err = checkWorkDir(s.WorkDir, s.ReadOnly, append(append(slices.Clone(s.ReadWrite), s.Granted...), mountTargets(s.Mounts)...)); err != nil {
			return nil, err
		}
	}
	cs := kernel.ConfineSpec{
		Path: target, Args: append([]string{s.Command[0]}, s.Command[1:]...), Env: env, Dir: workDir,
		MountProc: true, Hostname: "moat",
		Root:    rootSpec(s, dir, root, uid, gid),
		Rlimits: rlimitsFor(s, cg != nil, uid, root),
		SetIDs:  root, UID: uid, GID: gid,
		FS: kernel.ChildFS{Target: target, ExtraExec: extra, ReadOnly: s.ReadOnly,
			ReadWrite: append([]string{dir}, s.ReadWrite...), Granted: s.Granted, Mounts: s.Mounts, ConnectTCP: ports},
		StatusFD: 3 + len(extraFiles),
	}
	if err := procLayer(cs.Root, res); err != nil {
		return nil, err
	}
	netLayer := "netns"
	if allowNet {
		netLayer = "egress(" + strings.Join(s.AllowNet, ",") + ")"
	}
	if !root {
		cs.DropCaps = true
		res.Layers = append(res.Layers, "userns")
	}
	res.Layers = append(res.Layers, "pidns", "mntns", "root", netLayer, "ipcns", "utsns", "rlimits")
	if root {
		res.Layers = append(res.Layers, "uid")
	} else {
		res.Unavailable = append(res.Unavailable, "uid: not root (runs as the caller's uid "+strconv.Itoa(uid)+", uid 0 of its own user namespace, without capabilities)")
	}
	if cg != nil && !prejoined {
		if cg.V2() && warm == nil {
			fd, err := unix.Open(cg.Dir(""), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("native: cgroup fd: %w", err)
			}
			j.cleanups = append(j.cleanups, func() { unix.Close(fd) })
			attr.UseCgroupFD, attr.CgroupFD = true, fd
		} else {
			cs.CgroupProcs = cg.ProcsFiles()
		}
	}
	if allowNet {
		if cg == nil {
			return nil, fmt.Errorf("native: --allow-net needs the job's cgroup (every process of the job is killed through it before its iptables rules go), and none could be made: %s",
				strings.Join(res.Unavailable, "; "))
		}
		egress, err := jobEgress("e"+id[:min(len(id), 12)], cg, targets)
		if err != nil {
			return nil, err
		}
		// One cleanup, after the job's and before the cgroup's Destroy
		// (registered earlier, so run later): the rules go only once
		// every process of the cgroup is dead, since a process left
		// behind would reach the host's network unfiltered. When the
		// kill fails the rules stay, with the processes they hold.
		j.cleanups = append(j.cleanups, func() {
			err := cg.Kill()
			j.killed(err)
			if err == nil {
				_ = egress.Close()
			}
		})
		if !cg.V2() {
			// The wrapper joins the v2 egress cgroup with the v1 job
			// cgroups, before anything of the command runs.
			cs.CgroupProcs = append(cs.CgroupProcs, filepath.Join(egress.CgroupDir(), "cgroup.procs"))
		}
	}
	if abi, err := kernel.LandlockABI(); err == nil && abi > 0 {
		cs.Landlock = true
		res.Layers = append(res.Layers, "landlock")
		for _, g := range kernel.LandlockGaps(abi) {
			res.Unavailable = append(res.Unavailable, g.Layer+": "+g.Why)
		}
	} else {
		res.Unavailable = append(res.Unavailable, fmt.Sprintf("landlock: %v", err))
	}
	if kernel.SeccompSupported() {
		filters, err := childFilters()
		if err != nil {
			return nil, fmt.Errorf("native: %w", err)
		}
		cs.Seccomp, cs.SeccompFilters = true, filters
		res.Layers = append(res.Layers, "seccomp")
	} else {
		res.Unavailable = append(res.Unavailable, "seccomp: not supported by the kernel")
	}
	overflow := make(chan struct{})
	var overflowOnce sync.Once
	onFull := func() {}
	if s.StopAtMaxOutput {
		onFull = func() { overflowOnce.Do(func() { close(overflow) }) }
	}
	stdout, stderr := &cappedBuffer{max: s.MaxOutput, full: onFull}, &cappedBuffer{max: s.MaxOutput, full: onFull}
	j.overflow = overflow
	if warm != nil {
		j.cleanups = append([]func(){pool.done}, j.cleanups...) // runs last
		wcs := cs
		wcs.StatusFD = warmStatusFD
		wjs, err := json.Marshal(wcs)
		if err != nil {
			warm.discard()
			return nil, fmt.Errorf("native: %w", err)
		}
		j.cleanups = append(j.cleanups, func() { warm.statusR.Close() })
		startTime := time.Now()
		if err := warm.claim(wjs, s.Stdin, stdout, stderr); err == nil {
			pool.claimed(true)
			res.Warm = true
			j.spec, j.cmd, j.cg, j.res, j.statusR, j.stdout, j.stderr, j.started = s, warm.cmd, cg, res, warm.statusR, stdout, stderr, startTime
			return j, nil
		}
		// The wrapper died (or hung) before it acknowledged its job (a
		// wrapper binary of another moat version beside this one, say;
		// claim has killed and reaped it): start cold instead, where a
		// broken wrapper says what is wrong; the pool stops warming
		// after a few such deaths in a row.
		pool.claimed(false)
		if prejoined {
			cs.CgroupProcs = cg.ProcsFiles()
		}
	}
	js, err := json.Marshal(cs)
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	j.cleanups = append(j.cleanups, func() { statusR.Close() })
	if stdinR == nil {
		stdinR = bytes.NewReader(s.Stdin)
	}
	cmd := &exec.Cmd{
		Path:        wrapperPath(s.Wrapper),
		Args:        append([]string{"moat-confine"}, s.Command...),
		Env:         []string{kernel.ConfineEnv + "=" + string(js)},
		Dir:         dir,
		Stdin:       stdinR,
		Stdout:      stdout,
		Stderr:      stderr,
		ExtraFiles:  append(append([]*os.File{}, extraFiles...), statusW),
		SysProcAttr: attr,
		WaitDelay:   2 * time.Second,
	}
	if stdoutW != nil {
		cmd.Stdout = stdoutW
	}
	if stderrW != nil {
		cmd.Stderr = stderrW
	}
	startTime := time.Now()
	err = cmd.Start()
	statusW.Close()
	if err != nil {
		return nil, fmt.Errorf("native: start: %w", err)
	}
	j.spec, j.cmd, j.cg, j.res, j.statusR, j.stdout, j.stderr, j.started = s, cmd, cg, res, statusR, stdout, stderr, startTime
	j.overflow = overflow
	return j, nil
}

// jobEgress makes the iptables rules that hold a job with egress targets.
// On a pure cgroup v2 host they match the job cgroup itself, in which the
// wrapper is born; on a hybrid host (v1 controllers) a v2 cgroup of their
// own, which the wrapper joins with its v1 ones. Either way the job
// cgroup (cg, not nil) is what the caller kills before the rules go.
func jobEgress(id string, cg *kernel.Cgroup, targets []kernel.EgressTarget) (*kernel.Egress, error) {
	var e *kernel.Egress
	var err error
	if cg.V2() {
		e, err = kernel.NewEgressForCgroup(id, cg.Dir(""), targets)
	} else {
		e, err = kernel.NewEgress(id, targets)
	}
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	return e, nil
}

// Run runs spec.Command confined and waits for it. An error means the run
// could not be set up (no command, no such binary, no job dir, fork
// failed); everything that happens to the command is in the Result. It
// leaves nothing behind: cgroup, job dir, egress rules and processes are
// gone when it returns.
func Run(ctx context.Context, spec Spec) (*Result, error) {
	return runPooled(ctx, processPool.Load(), spec)
}

func runPooled(ctx context.Context, pool *Pool, spec Spec) (res *Result, err error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, errors.New("native: no command")
	}
	if l := processLauncher.Load(); l != nil {
		return l.Run(ctx, spec)
	}
	j, err := startWith(pool, spec, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	return j.wait(ctx, spec)
}

// wait waits for a started job to end (its exit, its timeout, ctx, or an
// output overflow), undoes its set-up, and reports it.
func (j *job) wait(ctx context.Context, spec Spec) (res *Result, err error) {
	// The cleanup kills what is left of the job, waits for its cgroup to
	// empty and removes it (in every hierarchy) before Run reports: a
	// caller that exits as soon as Run returns (moat exec) leaves nothing
	// behind. Processes that outlive it make the run an error.
	defer func() {
		j.cleanup()
		if j.survivors != nil {
			res, err = nil, &SurvivorsError{Command: spec.Command, Err: j.survivors}
		}
	}()
	s, cmd, cg, res, statusR, stdout, stderr, began := j.spec, j.cmd, j.cg, j.res, j.statusR, j.stdout, j.stderr, j.started
	reason := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(statusR, 4096))
		reason <- strings.TrimSpace(string(b))
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	kill := j.kill
	timer := time.NewTimer(s.Timeout)
	defer timer.Stop()
	var timedOut, canceled bool
	select {
	case err = <-done:
	case <-timer.C:
		timedOut = true
		kill()
		err = <-done
	case <-ctx.Done():
		canceled = true
		kill()
		err = <-done
	case <-j.overflow:
		kill()
		err = <-done
	}
	res.Wall = time.Since(began)
	// The init of the pid namespace is gone, so the kernel has killed the
	// rest; the cgroup kill (in the deferred cleanup) makes sure, before
	// Run returns.

	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	res.Truncated = stdout.truncated || stderr.truncated
	ps := cmd.ProcessState
	if ps != nil {
		res.CPU = ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			res.PeakMemory = uint64(ru.Maxrss) * 1024
		}
	}
	var oom bool
	if cg != nil {
		peak, oomKilled, pidsHit, cpuNS := cg.Stats()
		if peak > 0 {
			res.PeakMemory = peak
		}
		if cpuNS > 0 {
			res.CPU = time.Duration(cpuNS)
		}
		oom, res.PidsLimitHit = oomKilled, pidsHit
	}
	res.Reason = <-reason

	res.ExitCode = -1
	var ws syscall.WaitStatus
	if ps != nil {
		ws, _ = ps.Sys().(syscall.WaitStatus)
		res.ExitCode = ps.ExitCode()
		if ws.Signaled() {
			res.Signal = ws.Signal().String()
		}
	} else if err != nil {
		return nil, fmt.Errorf("native: wait: %w", err)
	}
	switch {
	case timedOut:
		res.Status = StatusTimeout
		res.Reason = fmt.Sprintf("wall-clock limit %s passed", s.Timeout)
	case canceled:
		res.Status = StatusKilled
		res.Reason = ctx.Err().Error()
	case oom:
		res.Status = StatusMemoryLimit
		res.Reason = fmt.Sprintf("memory limit %d bytes: the OOM killer ended a process", s.MemoryBytes)
	case res.Reason != "" && res.ExitCode == kernel.ConfineExitCode:
		res.Status = StatusRefused
	case ws.Signaled():
		res.Status = StatusKilled
	case res.ExitCode != 0:
		res.Status = StatusRuntimeError
	default:
		res.Status = StatusOK
	}
	if res.Status != StatusRefused {
		res.Reason = strings.TrimPrefix(res.Reason, kernel.ConfinePrefix)
	}
	return res, nil
}

func withDefaults(s Spec) Spec {
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.MemoryBytes <= 0 {
		s.MemoryBytes = DefaultMemory
	}
	if s.Pids <= 0 {
		s.Pids = DefaultPids
	}
	if s.CPUQuota <= 0 {
		s.CPUQuota = DefaultCPUQuota
	}
	if s.MaxOutput <= 0 {
		s.MaxOutput = DefaultMaxOutput
	}
	if s.DiskBytes <= 0 {
		s.DiskBytes = DefaultDisk
	}
	if len(s.Env) == 0 {
		s.Env = []string{"PATH=" + DefaultPath}
	}
	return s
}

// rlimitsFor: with a cgroup the memory limit is the cgroup's (so that an
// overrun is an OOM kill, reported as memory-limit) and RLIMIT_AS is only a
// generous backstop; without one RLIMIT_AS is the memory limit (an overrun
// is then an allocation failure, a runtime error). NPROC counts every
// process of the uid system-wide, so the processes a shared uid (the
// caller's, or one the spec names) already has are added to the budget.
// A leased uid (root, no Spec.UID) is the job's alone (see leaseUID) and
// has none: an earlier holder's processes died with their pid namespace's
// init. So it is not counted, which spares every job a walk of /proc (a
// stat per process of the machine: 1.4 ms with 200 processes under load,
// a tenth of a python3 start); were one left, the limit would only be
// tighter.
func rlimitsFor(s Spec, cgroup bool, uid int, root bool) kernel.Rlimits {
	as := uint64(s.MemoryBytes) + 64<<20
	if cgroup {
		as = max(4*uint64(s.MemoryBytes), 1<<30)
	}
	if s.AddressSpace > 0 {
		as = s.AddressSpace
	}
	cpu := uint64(s.Timeout/time.Second) + 2
	if s.LongLived {
		cpu = 0 // each invocation has its deadline; the cgroup's quota bounds the rate
	}
	r := kernel.Rlimits{
		AddressSpace: as,
		CPUSeconds:   cpu,
		FileSize:     max(uint64(s.MemoryBytes), 64<<20),
		OpenFiles:    256,
	}
	if uid != 0 {
		r.Procs = uint64(s.Pids)
		if leased := root && s.UID == 0; !leased {
			r.Procs += uint64(countProcs(uid))
		}
		if cgroup {
			r.Procs += 8 // a backstop only: let the cgroup's pids limit bite first, so it is reported
		}
		if !root {
			r.Procs++ // the wrapper, not yet counted, becomes the command
		}
	}
	return r
}

// countProcs counts the processes whose /proc entry belongs to uid.
func countProcs(uid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid {
			n++
		}
	}
	return n
}

// checkWorkDir accepts a working directory that the job's root holds: a
// ReadOnly or ReadWrite directory or one under it.
func checkWorkDir(wd string, ro, rw []string) (string, error) {
	if !filepath.IsAbs(wd) {
		return "", fmt.Errorf("native: WorkDir %q: want an absolute path", wd)
	}
	wd = filepath.Clean(wd)
	for _, p := range append(slices.Clone(ro), rw...) {
		if p = filepath.Clean(p); wd == p || strings.HasPrefix(wd, p+"/") {
			return wd, nil
		}
	}
	return "", fmt.Errorf("native: WorkDir %s is not under ReadOnly or ReadWrite: the job's root holds only the paths it is given (add it to ReadOnly)", wd)
}

// Mount is a host directory (Source) a native job sees at Target of its
// own root, read-only unless RW (Spec.Mounts).
type Mount = kernel.Mount

// CheckMounts says why s's Mounts cannot be shown in its job's root, or
// returns nil: each guest path against what every job's root holds (the
// system directories and files, /proc, the scratch tmpfs, the device
// files, the jobs' directory) and what s binds itself, so that a caller
// hears of it before a job starts. The confinement wrapper checks again,
// against the root it builds (kernel.CheckMount), and refuses to start.
func CheckMounts(s Spec) error {
	taken := slices.Concat(kernel.SystemDirs, kernel.SystemEtc, kernel.DeviceFiles, kernel.ScratchDirs, kernel.RootLinks,
		[]string{JobsDir(), s.Dir}, s.ExtraExec, s.ReadOnly, s.ReadWrite, s.Granted)
	for _, m := range s.Mounts {
		if err := kernel.CheckMount(m, taken); err != nil {
			return fmt.Errorf("native: %w", err)
		}
		taken = append(taken, m.Target)
	}
	return nil
}

// mountTargets are the guest paths of ms.
func mountTargets(ms []Mount) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Target
	}
	return out
}

// JobsDir is where job dirs are created.
func JobsDir() string { return filepath.Join(os.TempDir(), "moat-jobs") }

func makeJobDir(id string, root bool, uid, gid int) (string, error) {
	base := JobsDir()
	if err := os.MkdirAll(base, 0o711); err != nil {
		return "", err
	}
	// Named for this runner, as its cgroup is: the sweep of a later
	// runner removes the dirs of one that crashed, never a live one's.
	dir := filepath.Join(base, "job-"+kernel.OwnJobCgroupTag()+id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if root {
		if err := os.Chown(dir, uid, gid); err != nil {
			os.Remove(dir)
			return "", err
		}
	}
	return dir, nil
}

// LoaderEnv are environment variables that make the dynamic loader or libc
// load code from a path: a job may not start with them. (A job's own
// files are on noexec mounts, so the loader could not map them anyway;
// this refuses the attempt where it is made.)
var LoaderEnv = []string{"GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE",
	"NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR"}

// checkEnv refuses LD_* and LoaderEnv variables, and malformed entries.
func checkEnv(env []string) error {
	for _, e := range env {
		name, _, ok := strings.Cut(e, "=")
		if !ok || name == "" || strings.ContainsRune(e, 0) {
			return fmt.Errorf("native: environment entry %q: want NAME=value", e)
		}
		if strings.HasPrefix(name, "LD_") || slices.Contains(LoaderEnv, name) {
			return fmt.Errorf("native: environment variable %s is not allowed: it makes the dynamic loader or libc load code or data from a path the job chooses", name)
		}
	}
	return nil
}

// rootSpec is the job's own root filesystem: its job dir a fresh tmpfs of
// DiskBytes unless the caller gave a Dir, and the scratch dirs as large.
// In a user namespace (not root) the job is uid 0 there.
func rootSpec(s Spec, dir string, root bool, uid, gid int) *kernel.RootSpec {
	rs := &kernel.RootSpec{JobDir: dir, ScratchBytes: s.DiskBytes, Files: s.DiskFiles}
	if s.Dir == "" {
		rs.JobDirBytes, rs.Seed = s.DiskBytes, s.Seed
	}
	if root {
		rs.UID, rs.GID = uid, gid
	}
	return rs
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func envPath(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	return DefaultPath
}

// lookPath finds name in path (the command's own PATH, not moat's) and
// resolves symlinks, so Landlock allows the real file.
func lookPath(name, path string) (string, error) {
	var found string
	if strings.Contains(name, "/") {
		found = name
	} else {
		for _, d := range filepath.SplitList(path) {
			if d == "" || !filepath.IsAbs(d) {
				continue
			}
			p := filepath.Join(d, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				found = p
				break
			}
		}
		if found == "" {
			return "", fmt.Errorf("%s: not found in PATH %s", name, path)
		}
	}
	abs, err := filepath.Abs(found)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s: not an executable file", real)
	}
	return real, nil
}

// shebang returns the interpreter of a "#!" script, or "".
func shebang(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := io.ReadFull(f, buf)
	line := buf[:n]
	if !bytes.HasPrefix(line, []byte("#!")) {
		return ""
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	fields := strings.Fields(string(line[2:]))
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

// cappedBuffer keeps the first max bytes written and drops the rest,
// without failing the writer (the command goes on).
type cappedBuffer struct {
	buf       bytes.Buffer
	max       int
	truncated bool
	full      func() // called when the cap is first passed; may be nil
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room < len(p) {
		if !c.truncated && c.full != nil {
			c.full()
		}
		c.truncated = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *cappedBuffer) Bytes() []byte { return c.buf.Bytes() }

// WrapperName is the slim confinement wrapper's file name (cmd/moat-confine).
const WrapperName = "moat-confine"

// wrapperPath picks the binary that confines a child.
func wrapperPath(given string) string {
	if given != "" {
		return given
	}
	if exe, err := os.Executable(); err == nil {
		w := filepath.Join(filepath.Dir(exe), WrapperName)
		if fi, err := os.Stat(w); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return w
		}
	}
	return "/proc/self/exe"
}

// childFilters compiles the child seccomp filters once per process.
var childFilters = sync.OnceValues(kernel.ChildFilters)

// CheckGrant says why a native job cannot be granted the directory p
// (Spec.ReadOnly or Spec.Granted for an operator's grant), or returns nil.
// Under the job's scratch directories (/tmp, /var/tmp, /run, /dev/shm:
// fresh tmpfs of its own, fully writable) a bound directory would take
// their Landlock rights too, symlinks and FIFOs included, since Landlock
// adds up the rights of every directory above a file.
func CheckGrant(p string) error {
	for _, s := range kernel.ScratchDirs {
		if p == s || strings.HasPrefix(p, s+"/") {
			return fmt.Errorf("%s lies under %s, which a native worker gets fresh (a tmpfs of its own, where it may make anything); grant a directory elsewhere", p, s)
		}
	}
	return nil
}

// SurvivorsError is a run whose processes outlived the kill at its end
// (its timeout, its cancellation, or its own exit): they are still in the
// job's cgroup, holding its memory, so the run is a failure of the host
// and not an outcome of the job. Run returns it instead of a Result;
// the caller reports and audits it.
type SurvivorsError struct {
	Command []string
	Err     error // a *kernel.SurvivorsError, maybe joined with the failed rmdir
}

func (e *SurvivorsError) Error() string {
	name := ""
	if len(e.Command) > 0 {
		name = filepath.Base(e.Command[0]) + ": "
	}
	return "native: " + name + "the job's processes survived its end: " + e.Err.Error()
}

func (e *SurvivorsError) Unwrap() error { return e.Err }

// sweepOnce reaps, once per process and before its first job cgroup, the
// job cgroups that runners which are gone left behind (see
// kernel.SweepJobCgroups). What it cannot reap it says on stderr: the
// process keeps running, its own jobs are unaffected.
var sweepOnce = sync.OnceFunc(func() { _, _ = sweepDeadRunners() })

// sweepDeadRunners reaps the job cgroups and job dirs of runners that are
// gone: see sweepOnce.
func sweepDeadRunners() ([]string, error) {
	reaped, err := kernel.SweepJobCgroups()
	if err != nil {
		fmt.Fprintf(os.Stderr, "moat: %v\n", err)
	}
	// Their job dirs too (once their processes are gone, above).
	dirs, _ := filepath.Glob(filepath.Join(JobsDir(), "job-*"))
	for _, d := range dirs {
		if gone, named := kernel.JobRunnerGone(filepath.Base(d)); named && gone {
			_ = os.RemoveAll(d)
		}
	}
	return reaped, err
}
