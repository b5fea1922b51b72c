// Package plugintree reads a plugin's source tree: the one rule every path
// that reads a plugin's files from disk goes through (moat run, build,
// sign, verify, deploy, dev's watch, the build's copy into its work dir,
// and package bundle's reading of a plugin's directory: module, manifest,
// signature and sources).
//
// The rule: a plugin's tree holds regular files and directories, nothing
// else. A symbolic link, wherever it points (out of the tree, into it, to
// itself), and a special file (FIFO, socket, device) are refused with an
// *Error naming the entry and the fix, never followed or opened. A link
// is refused rather than skipped because a skipped helpers.js would fail
// later as a missing import, far from its cause, and because moat serve
// refuses a link in an uploaded archive: a tree that runs locally also
// deploys. A link that stays inside the tree is refused too: what a
// signature covers, what is uploaded and what a worker reads must be the
// same bytes, and a link can be repointed between the three.
//
// Reads do not trust the walk: each file is opened beneath the tree's root
// (os.Root, so a link swapped in after the walk cannot leave the tree),
// non-blocking (a FIFO swapped in cannot hang the read) and checked to be
// a regular file once open. Sizes and counts are bounded by Options.
//
// It is the tree part of the bundle package DESIGN.md describes.
package plugintree

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// Defaults of Options.
const (
	DefaultMaxFiles = 10000
	DefaultMaxBytes = 64 << 20
)

// Options say which part of a tree a caller reads and how much of it.
type Options struct {
	// Flat reads only the root's own entries: subdirectories are passed
	// to the callback but not entered.
	Flat bool
	// SkipOutputs leaves out, whatever their type, entries whose name
	// starts with a dot and directories or files named node_modules or
	// target (VCS data, dependencies, build outputs): nothing of them is
	// read, so nothing of them can leak.
	SkipOutputs bool
	// MaxFiles bounds the regular files visited; 0 is DefaultMaxFiles.
	MaxFiles int
	// MaxBytes bounds the bytes read by Entry.Read together; 0 is
	// DefaultMaxBytes.
	MaxBytes int64
}

// Error is an entry of a plugin's tree that is not a regular file or a
// directory, or a tree past a bound. Its message names the path and the
// fix.
type Error struct {
	Path   string // the entry, as an OS path under the root
	Kind   string // "symbolic link", "FIFO", "socket", "device", ...
	Target string // a link's target, as the link reads
	Reason string // set instead of Kind for a bound
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return e.Path + ": " + e.Reason
	}
	if e.Kind == "symbolic link" {
		// The fix copies what the link points to, named from the link's
		// directory (a relative target is relative to it).
		target := e.Target
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(e.Path), target)
		}
		fix := fmt.Sprintf("cp --remove-destination %s %s", shellQuote(target), shellQuote(e.Path))
		if fi, err := os.Stat(e.Path); err == nil && fi.IsDir() {
			fix = fmt.Sprintf("rm %s && cp -r %s %s", shellQuote(e.Path), shellQuote(target), shellQuote(e.Path))
		}
		return fmt.Sprintf("%s is a symbolic link (to %s): a plugin's files must be regular files inside its directory, so moat follows no link; replace the link with a copy of what it points to (%s) or remove it",
			e.Path, e.Target, fix)
	}
	return fmt.Sprintf("%s is a %s: a plugin's directory may hold only regular files and directories, so moat does not open it; remove it or move it out of the directory", e.Path, e.Kind)
}

// shellQuote quotes s for the fix a message suggests.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./~+@:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// kind names a mode that is not a regular file or a directory.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	default:
		return "special file (mode " + m.Type().String() + ")"
	}
}

// Refuses is the rule for an entry known by its mode alone — an entry of
// an uploaded archive, which moat serve reads with no directory to walk:
// it reports whether the rule refuses an entry of mode m, and what the
// entry is ("symbolic link", "FIFO (named pipe)", "character device",
// ...), named as Walk's refusals name it. A directory or a regular file
// passes.
func Refuses(m fs.FileMode) (what string, refused bool) {
	if m.IsDir() || m.IsRegular() {
		return "", false
	}
	return kind(m), true
}

// refuse is the *Error for the entry at p (an OS path) of mode m.
func refuse(p string, m fs.FileMode) error {
	e := &Error{Path: p, Kind: kind(m)}
	if m&fs.ModeSymlink != 0 {
		e.Target, _ = os.Readlink(p)
	}
	return e
}

// Skipped reports whether SkipOutputs leaves out an entry named name.
func Skipped(name string) bool {
	return strings.HasPrefix(name, ".") || name == "node_modules" || name == "target"
}

// Entry is a regular file or a directory of a tree.
type Entry struct {
	Rel  string      // slash-separated, relative to the root
	Path string      // the OS path
	Info fs.FileInfo // from lstat; Info.IsDir() for a directory
	t    *walker
}

// Read reads the file, counting it against Options.MaxBytes.
func (e Entry) Read() ([]byte, error) {
	b, err := readIn(e.t.root, e.t.dir, e.Rel, e.t.maxBytes-e.t.read)
	if errors.Is(err, errTooBig) {
		return nil, &Error{Path: e.t.dir, Reason: fmt.Sprintf("holds more than %d MiB: a plugin's directory should hold its sources; move build outputs and dependencies out of it", max(e.t.maxBytes>>20, 1))}
	}
	if err != nil {
		return nil, err
	}
	e.t.read += int64(len(b))
	return b, nil
}

type walker struct {
	root     *os.Root
	dir      string
	maxBytes int64
	read     int64
}

// Walk calls fn with each regular file and directory of the tree at dir
// (not dir itself), in lexical order, after refusing it if it is a link or
// a special file. dir itself may be a link: the caller named it. fn may
// return filepath.SkipDir for a directory.
func Walk(dir string, opt Options, fn func(Entry) error) error {
	if opt.MaxFiles == 0 {
		opt.MaxFiles = DefaultMaxFiles
	}
	if opt.MaxBytes == 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	w := &walker{root: r, dir: dir, maxBytes: opt.MaxBytes}
	files := 0
	return fs.WalkDir(r.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if opt.SkipOutputs && Skipped(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if t := d.Type(); !t.IsDir() && !t.IsRegular() {
			return refuse(p, t)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !d.IsDir() {
			if files++; files > opt.MaxFiles {
				return &Error{Path: dir, Reason: fmt.Sprintf("holds more than %d files: a plugin's directory should hold its sources; move build outputs and dependencies out of it", opt.MaxFiles)}
			}
		}
		if err := fn(Entry{Rel: rel, Path: p, Info: info, t: w}); err != nil {
			return err
		}
		if d.IsDir() && opt.Flat {
			return filepath.SkipDir
		}
		return nil
	})
}

// Stat returns the lstat of the file at p, an OS path in a plugin's tree,
// refusing (*Error) a link or a special file as Walk does, for a caller
// that needs the file's time or size and not its bytes.
func Stat(p string) (fs.FileInfo, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, refuse(p, fi.Mode())
	}
	return fi, nil
}

// ReadFile reads the regular file rel (slash-separated) of the tree at
// dir, refusing a link or a special file as Walk does. A missing file is
// an error satisfying errors.Is(err, fs.ErrNotExist).
func ReadFile(dir, rel string) ([]byte, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return readIn(r, dir, rel, -1)
}

// pathError names the OS path p in err (os.Root's errors name the path
// relative to the root), as os.ReadFile would: "open p: no such file or
// directory".
func pathError(p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: "open", Path: p, Err: pe.Err}
	}
	return err
}

// errTooBig is a file past what readIn may read.
var errTooBig = errors.New("over the bound")

// readIn reads rel under r (the root at dir), at most limit bytes (-1: no
// bound; past it, errTooBig).
func readIn(r *os.Root, dir, rel string, limit int64) ([]byte, error) {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if !fs.ValidPath(path.Clean(rel)) {
		return nil, &Error{Path: p, Reason: "is not a path inside the plugin's directory"}
	}
	fi, err := r.Lstat(rel)
	if err != nil {
		return nil, pathError(p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, refuse(p, fi.Mode())
	}
	// Non-blocking: should a FIFO replace the file after the lstat, the
	// open returns at once and the fstat below refuses it. Beneath the
	// root: should a link replace it, it cannot lead out.
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, pathError(p, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, refuse(p, fi.Mode())
	}
	var src io.Reader = f
	if limit >= 0 {
		src = io.LimitReader(f, limit+1)
	}
	b, err := io.ReadAll(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if limit >= 0 && int64(len(b)) > limit {
		return nil, errTooBig
	}
	return b, nil
}

// IsError reports whether err is a refusal of this package.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
