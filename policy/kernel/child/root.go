package child

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// RootSpec gives a job a root filesystem of its own, built in its mount
// namespace before anything of the job runs. The host's tree is not
// visible at all: only what the job's Landlock rules name is bound in, at
// the same paths, so no host socket, FIFO or writable directory exists for
// the job to find, whatever its permissions on the host.
//
//   - the system directories, read-only (executing stays Landlock's
//     allowlist), and the parts of /etc in SystemEtc;
//   - the target, its loader and ExtraExec, read-only;
//   - ReadOnly paths, read-only and noexec;
//   - ReadWrite and Granted directories and the device files, read-write
//     and noexec;
//   - the job dir: a fresh tmpfs of JobDirBytes (noexec), or, when
//     JobDirBytes is 0, the host's directory bound read-write (noexec);
//   - fresh tmpfs at /tmp, /var/tmp, /run and /dev/shm (noexec, each
//     ScratchBytes), /var/run linking to /run, and a fresh /proc.
//
// Nothing writable is executable (noexec), nothing is setuid (nosuid)
// and the root itself is read-only. tmpfs pages are charged to the job's
// memory cgroup as well as bounded by their size.
type RootSpec struct {
	JobDir       string `json:"job_dir"`
	JobDirBytes  int64  `json:"job_dir_bytes,omitempty"`
	ScratchBytes int64  `json:"scratch_bytes"`
	// Files, when set, bounds the names (inodes) each fresh tmpfs (the
	// job dir and the scratch dirs) holds: a job making more gets ENOSPC,
	// as past its bytes. Unset, the kernel's default (half the RAM's
	// pages) applies.
	Files int64 `json:"files,omitempty"`
	// Owner of the job dir's tmpfs: the job's uid and gid as seen in its
	// user namespace.
	UID, GID int
	// Seed, when set, is a host directory whose files and directories
	// are copied into the fresh job dir (JobDirBytes > 0) before the job
	// starts, owned by UID and GID: the files a program opens by a
	// relative name (Judge0's additional_files), in a working directory
	// it may write, as a WASM run finds them in its scratch directory.
	// Copied, not bound: what the job writes stays in its tmpfs, and what
	// the seed holds counts against the job dir's bytes and names. It
	// holds regular files and directories only; anything else (a
	// symlink, a device, a FIFO) refuses the run, and so does a copy
	// past the tmpfs's limits.
	Seed string `json:"seed,omitempty"`
	// ProcBind binds the caller's /proc (recursively: a runtime's masks
	// stay) where a fresh proc cannot be mounted, in a user namespace
	// under a masked /proc (kernel.NativeProc, MOAT_NATIVE_PROC=bind).
	// The job keeps its own pid namespace but lists the caller's
	// processes; the operator opts in to that.
	ProcBind bool `json:"proc_bind,omitempty"`
}

// maxSeedDepth bounds the directories a seed nests (the archive's names
// are bounded by the caller; this bounds the child's recursion).
const maxSeedDepth = 64

// ScratchDirs are the fresh tmpfs a job gets in its own root.
var ScratchDirs = []string{"/tmp", "/var/tmp", "/run", "/dev/shm"}

// RootLinks are the paths buildRoot itself makes in every job's root
// beside ScratchDirs and DeviceFiles: a fresh /proc and its links.
var RootLinks = []string{"/proc", "/var/run", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr"}

// bindKind says how a path is bound into the job's root.
type bindKind int

const (
	bindRead bindKind = iota // read-only, noexec
	bindExec                 // read-only, executable
	bindRW                   // read-write, noexec
	bindDev                  // device file: read-write, noexec
)

func (k bindKind) attrs() uint64 {
	switch k {
	case bindExec:
		return unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	case bindRW:
		return unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC
	case bindDev:
		return unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC
	}
	return unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC
}

type bind struct {
	path string // resolved: no symlink in it
	kind bindKind
	dir  bool
	fd   int // a detached clone of the host's tree at path (or src)
	// src is the host's directory a Mount shows at path; "" for the
	// binds at their own path.
	src string
}

type link struct{ path, target string }

// rootPlan is what buildRoot binds, links and mounts.
type rootPlan struct {
	binds []bind
	links []link
}

// add plans p (made absolute) to be visible as kind. A symlink at p is
// recreated as a symlink (its target planned in turn), so /lib64 and
// /etc/localtime look as they do on the host.
func (r *rootPlan) add(p string, kind bindKind) error {
	for range 8 {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%q is not an absolute path", p)
		}
		p = filepath.Clean(p)
		dir, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // optional paths may be missing
			}
			return err
		}
		p = filepath.Join(dir, filepath.Base(p))
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			r.binds = append(r.binds, bind{path: p, kind: kind, dir: fi.IsDir(), fd: -1})
			return nil
		}
		t, err := os.Readlink(p)
		if err != nil {
			return err
		}
		r.links = append(r.links, link{p, t})
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		p = t
	}
	return fmt.Errorf("%q: too many levels of symbolic links", p)
}

// under reports whether p is q or below it.
func under(p, q string) bool {
	return p == q || strings.HasPrefix(p, strings.TrimSuffix(q, "/")+"/")
}

// prune drops binds that a bind of an ancestor already shows the same
// way (a system directory covers the binaries in it), keeps the rest in
// the order they must be mounted (parents first), and refuses paths
// under /proc, which the job gets fresh.
func (r *rootPlan) prune() error {
	slices.SortStableFunc(r.binds, func(a, b bind) int { return strings.Compare(a.path, b.path) })
	var out []bind
	for _, b := range r.binds {
		if under(b.path, "/proc") {
			return fmt.Errorf("%s: paths under /proc cannot be granted (the job gets a /proc of its own)", b.path)
		}
		covered := false
		for _, o := range out {
			if under(b.path, o.path) && (o.kind == b.kind || o.kind == bindExec && b.kind == bindRead) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, b)
		}
	}
	r.binds = out
	return nil
}

// planRoot lists what the job's root shows, from its Landlock rules.
func planRoot(fs ChildFS, rs *RootSpec) (*rootPlan, error) {
	r := &rootPlan{}
	interp := fs.Interpreter
	if interp == "" {
		interp = ELFInterpreter
	}
	var errs []error
	add := func(kind bindKind, ps ...string) {
		for _, p := range ps {
			if p != "" {
				errs = append(errs, r.add(p, kind))
			}
		}
	}
	add(bindExec, SystemDirs...)
	add(bindRead, SystemEtc...)
	add(bindExec, append([]string{fs.Target, interp}, fs.ExtraExec...)...)
	add(bindRead, fs.ReadOnly...)
	for _, p := range fs.ReadWrite {
		if rs.JobDirBytes > 0 && filepath.Clean(p) == filepath.Clean(rs.JobDir) {
			continue // a tmpfs of its own
		}
		add(bindRW, p)
	}
	add(bindRW, fs.Granted...)
	add(bindDev, DeviceFiles...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := r.prune(); err != nil {
		return nil, err
	}
	// The Mounts last, each checked against everything else the root
	// holds: nothing of the root may lie at, above or below a guest path.
	taken := r.paths()
	taken = append(taken, rs.JobDir)
	for _, m := range fs.Mounts {
		if err := CheckMount(m, taken); err != nil {
			return nil, err
		}
		taken = append(taken, m.Target)
		kind := bindRead
		if m.RW {
			kind = bindRW
		}
		r.binds = append(r.binds, bind{path: m.Target, src: m.Source, kind: kind, dir: true, fd: -1})
	}
	return r, nil
}

// paths are every path the root shows before its Mounts: the binds, the
// links, the scratch tmpfs, /proc and the links buildRoot makes itself.
func (r *rootPlan) paths() []string {
	out := append(append([]string{}, RootLinks...), ScratchDirs...)
	for _, b := range r.binds {
		out = append(out, b.path)
	}
	for _, l := range r.links {
		out = append(out, l.path)
	}
	return out
}

// CheckMount refuses a Mount that the job's root cannot show safely:
// a Source that is not an absolute directory without symlinks, and a
// Target that is not absolute and clean, is /, or lies at, above or below
// a path of taken (what the root already shows: the system directories,
// /proc, the scratch tmpfs, the job dir, the other binds and links). Its
// parents are then fresh directories of the root's own tmpfs, made
// without following any symlink, and nothing of the root is hidden by it
// or bound inside the host's directory.
func CheckMount(m Mount, taken []string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("mount %s at %s: "+format, append([]any{m.Source, m.Target}, args...)...)
	}
	if !filepath.IsAbs(m.Source) || filepath.Clean(m.Source) != m.Source {
		return bad("the host directory must be an absolute, clean path")
	}
	if real, err := filepath.EvalSymlinks(m.Source); err != nil || real != m.Source {
		return bad("the host directory must exist, with no symlink in its path (resolve it first)")
	}
	if fi, err := os.Stat(m.Source); err != nil || !fi.IsDir() {
		return bad("the host path is not a directory")
	}
	if !filepath.IsAbs(m.Target) || filepath.Clean(m.Target) != m.Target || strings.ContainsRune(m.Target, 0) {
		return bad("the guest path must be absolute and clean, e.g. /data")
	}
	if m.Target == "/" {
		return bad("the guest path cannot be / (the job's root is moat's)")
	}
	for _, p := range taken {
		if p == "" {
			continue
		}
		if under(m.Target, p) || under(p, m.Target) {
			return bad("the job's root already holds %s there; choose a guest path apart from it, e.g. /data", p)
		}
	}
	return nil
}

// cloneNoSymlinks is a detached clone of the directory at dir, which
// CheckMount found free of symlinks: opened with openat2 refusing any
// symlink on the way (ELOOP), so a component swapped for one since (by
// whoever may write its parent) cannot lead the clone elsewhere.
func cloneNoSymlinks(dir string) (int, error) {
	d, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return -1, err
	}
	defer unix.Close(d)
	return unix.OpenTree(d, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
}

// mountTmpfs mounts a fresh tmpfs at dir.
func mountTmpfs(dir string, flags uintptr, size int64, mode uint32, uid, gid int, inodes ...int64) error {
	opts := fmt.Sprintf("mode=%o,uid=%d,gid=%d", mode, uid, gid)
	if size > 0 {
		opts += ",size=" + strconv.FormatInt(size, 10)
	}
	if len(inodes) > 0 && inodes[0] > 0 {
		// The directory itself is one of them.
		opts += ",nr_inodes=" + strconv.FormatInt(inodes[0]+1, 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, opts); err != nil {
		return fmt.Errorf("mount tmpfs at %s: %w", dir, err)
	}
	return nil
}

const noexecFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// buildRoot makes the job's root (see RootSpec) and pivots into it. It
// runs in the job's fresh mount namespace, as root there, before the uid
// switch. fs's paths keep their meaning: each is bound at the same path.
func buildRoot(fs ChildFS, rs *RootSpec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("mount --make-rprivate /: %w", err)
	}
	plan, err := planRoot(fs, rs)
	if err != nil {
		return fmt.Errorf("root: %w", err)
	}
	// Detached clones of every tree first: the new root may cover where
	// they came from (a job dir under /tmp).
	for i := range plan.binds {
		b := &plan.binds[i]
		src := b.path
		var fd int
		if b.src != "" {
			src = b.src
			fd, err = cloneNoSymlinks(src)
		} else {
			fd, err = unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		}
		if err != nil {
			return fmt.Errorf("root: clone %s: %w", src, err)
		}
		b.fd = fd
		attr := unix.MountAttr{Attr_set: b.kind.attrs()}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("root: restrict %s: %w", b.path, err)
		}
	}
	defer func() {
		for _, b := range plan.binds {
			if b.fd >= 0 {
				unix.Close(b.fd)
			}
		}
	}()

	// The seed is opened before the new root's tmpfs covers /tmp, where
	// the caller made it: the descriptor still reaches it.
	seed := -1
	if rs.Seed != "" && rs.JobDirBytes > 0 {
		if seed, err = unix.Open(rs.Seed, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("root: open the job dir's seed %s: %w", rs.Seed, err)
		}
		defer unix.Close(seed)
	}

	base := "/tmp"
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		base = rs.JobDir
	}
	if err := mountTmpfs(base, unix.MS_NOSUID|unix.MS_NODEV, 4<<20, 0o755, 0, 0); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	at := func(p string) string { return filepath.Join(base, p) }
	mkdir := func(p string) error {
		if err := os.MkdirAll(at(p), 0o755); err != nil {
			return fmt.Errorf("root: %w", err)
		}
		return nil
	}

	for _, d := range ScratchDirs {
		if err := mkdir(d); err != nil {
			return err
		}
		if err := mountTmpfs(at(d), noexecFlags, rs.ScratchBytes, 0o1777, 0, 0, rs.Files); err != nil {
			return fmt.Errorf("root: %w", err)
		}
	}
	if err := mkdir("/var"); err != nil {
		return err
	}
	if err := os.Symlink("/run", at("/var/run")); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	for _, l := range []link{{"/dev/fd", "/proc/self/fd"}, {"/dev/stdin", "/proc/self/fd/0"}, {"/dev/stdout", "/proc/self/fd/1"}, {"/dev/stderr", "/proc/self/fd/2"}} {
		if err := os.Symlink(l.target, at(l.path)); err != nil {
			return fmt.Errorf("root: %w", err)
		}
	}
	for _, l := range plan.links {
		if slices.Contains(ScratchDirs, l.path) || l.path == "/var/run" {
			continue
		}
		if err := mkdir(filepath.Dir(l.path)); err != nil {
			return err
		}
		if err := os.Symlink(l.target, at(l.path)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("root: %w", err)
		}
	}
	if rs.JobDirBytes > 0 {
		if err := mkdir(rs.JobDir); err != nil {
			return err
		}
		if err := mountTmpfs(at(rs.JobDir), noexecFlags, rs.JobDirBytes, 0o700, rs.UID, rs.GID, rs.Files); err != nil {
			return fmt.Errorf("root: job dir: %w", err)
		}
		if seed >= 0 {
			if err := copySeed(seed, at(rs.JobDir), rs.UID, rs.GID, 0); err != nil {
				return fmt.Errorf("root: job dir: seed: %w", err)
			}
		}
	}
	for _, b := range plan.binds {
		dst := at(b.path)
		if b.dir {
			if err := mkdir(b.path); err != nil {
				return err
			}
		} else {
			if err := mkdir(filepath.Dir(b.path)); err != nil {
				return err
			}
			if f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
				f.Close()
			} else if !errors.Is(err, os.ErrExist) && !errors.Is(err, unix.EROFS) {
				return fmt.Errorf("root: %w", err)
			}
		}
		if err := unix.MoveMount(b.fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("root: bind %s: %w", b.path, err)
		}
	}
	// /proc before the old root goes: in a user namespace the kernel
	// mounts a new proc only while another one is fully visible.
	if err := mkdir("/proc"); err != nil {
		return err
	}
	if rs.ProcBind {
		if err := unix.Mount("/proc", at("/proc"), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("root: bind the pod's /proc: %w", err)
		}
	} else if err := unix.Mount("proc", at("/proc"), "proc", noexecFlags, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("root: mount /proc: %w (in a user namespace the kernel mounts a new proc only while the old one is fully visible, and the container runtime masks parts of it: MOAT_NATIVE_PROC=bind binds the pod's /proc instead; moat doctor, procfs)", err)
		}
		return fmt.Errorf("root: mount /proc: %w", err)
	}
	if err := unix.Chdir(base); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("root: pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("root: detach the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|noexecFlags, ""); err != nil {
		return fmt.Errorf("root: read-only /: %w", err)
	}
	return nil
}

// copySeed copies the directory open at src into dst, which exists: its
// regular files and directories, owned by uid and gid, nothing followed
// (every open is O_NOFOLLOW, relative to its parent's descriptor), and
// anything that is neither refused.
func copySeed(src int, dst string, uid, gid, depth int) error {
	if depth > maxSeedDepth {
		return fmt.Errorf("%s: directories nest deeper than %d", dst, maxSeedDepth)
	}
	dup, err := unix.Dup(src)
	if err != nil {
		return err
	}
	dir := os.NewFile(uintptr(dup), dst)
	entries, err := dir.ReadDir(-1)
	dir.Close()
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if name == "." || name == ".." || strings.ContainsRune(name, '/') {
			return fmt.Errorf("%q: not a name", name)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		to := filepath.Join(dst, name)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			fd, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			err = os.Mkdir(to, 0o755)
			if err == nil {
				err = os.Lchown(to, uid, gid)
			}
			if err == nil {
				err = copySeed(fd, to, uid, gid, depth+1)
			}
			unix.Close(fd)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			if err := copySeedFile(src, name, to, uid, gid); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: neither a regular file nor a directory", to)
		}
	}
	return nil
}

func copySeedFile(dirFD int, name, to string, uid, gid int) error {
	fd, err := unix.Openat(dirFD, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	in := os.NewFile(uintptr(fd), name)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chown(uid, gid)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
