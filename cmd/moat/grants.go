package main

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/native"
)

// maxGrantFile bounds a --file handed to a WASM run, which gets a copy.
const maxGrantFile = 64 << 20

// dirGrant is one --dir HOST[:GUEST][:ro|rw].
type dirGrant struct {
	host, guest string // host absolute, symlinks resolved; guest absolute
	rw          bool
}

// fileGrant is one --file HOST[:GUEST].
type fileGrant struct{ host, guest string }

// parseDirGrant reads --dir HOST[:GUEST][:ro|rw]: read-only unless it
// ends in :rw; GUEST defaults to HOST's absolute path. A HOST holding a
// colon cannot be given.
func parseDirGrant(s string) (dirGrant, error) {
	parts := strings.Split(s, ":")
	var g dirGrant
	if n := len(parts); n > 1 && (parts[n-1] == "ro" || parts[n-1] == "rw") {
		g.rw = parts[n-1] == "rw"
		parts = parts[:n-1]
	}
	if len(parts) > 2 || parts[0] == "" {
		return g, usagef("--dir %q: write HOST[:GUEST][:ro|rw], e.g. --dir ./data or --dir ./out:/out:rw (a host path with a colon cannot be given)", s)
	}
	abs, err := realPath(parts[0])
	if err != nil {
		return g, usagef("--dir %q: %v", s, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return g, usagef("--dir %q: %s is not a directory (use --file for a file)", s, parts[0])
	}
	g.host, g.guest = abs, abs
	if len(parts) == 2 {
		if !path.IsAbs(parts[1]) {
			return g, usagef("--dir %q: the guest path %q must be absolute, e.g. /data", s, parts[1])
		}
		g.guest = path.Clean(parts[1])
	}
	return g, nil
}

// parseFileGrant reads --file HOST[:GUEST]: always read-only; GUEST
// defaults to HOST's absolute path.
func parseFileGrant(s string) (fileGrant, error) {
	h, guest, hasGuest := strings.Cut(s, ":")
	if h == "" || strings.Contains(guest, ":") {
		return fileGrant{}, usagef("--file %q: write HOST[:GUEST], e.g. --file client.py (a host path with a colon cannot be given)", s)
	}
	abs, err := realPath(h)
	if err != nil {
		return fileGrant{}, usagef("--file %q: %v", s, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
		return fileGrant{}, usagef("--file %q: %s is not a regular file (use --dir for a directory)", s, h)
	}
	g := fileGrant{host: abs, guest: abs}
	if hasGuest {
		if !path.IsAbs(guest) || path.Clean(guest) == "/" {
			return g, usagef("--file %q: the guest path %q must be an absolute file path, e.g. /work/client.py", s, guest)
		}
		g.guest = path.Clean(guest)
	}
	return g, nil
}

// realPath is p made absolute, its symlinks resolved: what is granted is
// the directory or file itself, whatever later happens to a link to it.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// grantFlags are --dir, --file and --workdir as given.
type grantFlags struct {
	dirs, files []string
	workDir     string
}

// grants are a run's parsed --dir and --file, and --workdir as given
// (native resolves it: it may be a guest path).
type grants struct {
	dirs        []dirGrant
	files       []fileGrant
	workDirFlag string
}

func (f grantFlags) parse() (*grants, error) {
	g := &grants{}
	for _, s := range f.dirs {
		d, err := parseDirGrant(s)
		if err != nil {
			return nil, err
		}
		g.dirs = append(g.dirs, d)
	}
	for _, s := range f.files {
		fg, err := parseFileGrant(s)
		if err != nil {
			return nil, err
		}
		g.files = append(g.files, fg)
	}
	g.workDirFlag = f.workDir
	return g, nil
}

// nativeGrants are a native run's grants: paths bound at their own path,
// read-only (ro, files included) or read-write (rw); directories bound at
// a guest path of their own (mounts: the job's root is its own, so a
// directory can appear anywhere in it that nothing else of the root
// holds, kernel.CheckMount); and the working directory as the job sees it.
type nativeGrants struct {
	ro, rw  []string
	mounts  []native.Mount
	workDir string
}

// native returns the grants of a native run. A --file keeps its host path
// (a native root binds directories and files where they are; a file
// elsewhere would be a copy, as for WASM, and a native program finding
// its file at its own path is what --file promises). --workdir may name
// the host directory or, for a --dir HOST:GUEST, its guest path.
func (g *grants) native() (nativeGrants, error) {
	var n nativeGrants
	for _, d := range g.dirs {
		switch {
		case d.guest != d.host:
			n.mounts = append(n.mounts, native.Mount{Source: d.host, Target: d.guest, RW: d.rw})
		case d.rw:
			n.rw = append(n.rw, d.host)
		default:
			n.ro = append(n.ro, d.host)
		}
	}
	for i, a := range n.mounts {
		for _, b := range n.mounts[i+1:] {
			if slicesContainsDirOf([]string{a.Target}, b.Target) || slicesContainsDirOf([]string{b.Target}, a.Target) {
				return n, usagef("--dir: the guest paths %s and %s overlap; give each its own directory", a.Target, b.Target)
			}
		}
	}
	for _, f := range g.files {
		if f.guest != f.host {
			return n, usagef("--file %s:%s: a native run sees a file at its own path; drop :%s, or give its directory with --dir %s:%s", f.host, f.guest, f.guest, path.Dir(f.host), path.Dir(f.guest))
		}
		n.ro = append(n.ro, f.host)
	}
	// Before a job starts, so a bad guest path is a usage error naming
	// the fix (the wrapper checks again against the root it builds).
	if err := native.CheckMounts(native.Spec{ReadOnly: n.ro, Granted: n.rw, Mounts: n.mounts}); err != nil {
		return n, usagef("--dir: %v", err)
	}
	if g.workDirFlag == "" {
		return n, nil
	}
	// A guest path of a --dir HOST:GUEST, as the job sees it.
	if wd := path.Clean(g.workDirFlag); path.IsAbs(wd) {
		for _, m := range n.mounts {
			if slicesContainsDirOf([]string{m.Target}, wd) {
				n.workDir = wd
				return n, nil
			}
		}
	}
	wd, err := realPath(g.workDirFlag)
	if err != nil {
		return n, usagef("--workdir %q: %v", g.workDirFlag, err)
	}
	// A host directory under a --dir HOST:GUEST: where the job sees it.
	for _, m := range n.mounts {
		if rel, err := filepath.Rel(m.Source, wd); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			n.workDir = path.Join(m.Target, filepath.ToSlash(rel))
			return n, nil
		}
	}
	if !slicesContainsDirOf(append(append([]string{}, n.ro...), n.rw...), wd) {
		return n, usagef("--workdir %s: the run sees only what --dir grants; add --dir %s", wd, wd)
	}
	n.workDir = wd
	return n, nil
}

func slicesContainsDirOf(ps []string, dir string) bool {
	for _, p := range ps {
		if dir == p || strings.HasPrefix(dir, p+"/") {
			return true
		}
	}
	return false
}

// wasm returns the mounts of a WASM run: each --dir at its guest path,
// and the --file grants as copies in read-only directories of their own,
// one per guest directory, mounted there (a WASI filesystem mounts
// directories, and the file's own directory would show its neighbours).
// cleanup removes the copies.
func (g *grants) wasm() (mounts []host.Mount, cleanup func(), err error) {
	if g.workDirFlag != "" {
		return nil, nil, usagef("--workdir is for native runs; a WASM program's paths are the guest paths of --dir and --file")
	}
	for _, d := range g.dirs {
		mounts = append(mounts, host.Mount{HostDir: d.host, GuestPath: d.guest, ReadOnly: !d.rw})
	}
	var tmp []string
	cleanup = func() {
		for _, t := range tmp {
			os.RemoveAll(t)
		}
	}
	byDir := map[string]string{} // guest dir -> the copy's directory
	for _, f := range g.files {
		gd := path.Dir(f.guest)
		dir, ok := byDir[gd]
		if !ok {
			if dir, err = os.MkdirTemp("", "moat-file-"); err != nil {
				cleanup()
				return nil, nil, err
			}
			tmp = append(tmp, dir)
			byDir[gd] = dir
			mounts = append(mounts, host.Mount{HostDir: dir, GuestPath: gd, ReadOnly: true})
		}
		if err := copyGrantFile(f.host, filepath.Join(dir, path.Base(f.guest))); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	for i, a := range mounts {
		for _, b := range mounts[i+1:] {
			if slicesContainsDirOf([]string{a.GuestPath}, b.GuestPath) || slicesContainsDirOf([]string{b.GuestPath}, a.GuestPath) {
				cleanup()
				return nil, nil, usagef("--dir/--file: the guest paths %s and %s overlap; give each its own directory", a.GuestPath, b.GuestPath)
			}
		}
	}
	return mounts, cleanup, nil
}

func copyGrantFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return usagef("--file %s: %v", from, err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, io.LimitReader(in, maxGrantFile+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--file %s: copy: %w", from, err)
	}
	if n > maxGrantFile {
		return usagef("--file %s: over %d MiB; give its directory with --dir instead", from, maxGrantFile>>20)
	}
	return nil
}
