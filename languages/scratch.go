package languages

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// Every WASM run gets a scratch directory of its own, its writable
// working directory (host.Scratch: mounted at "/", under the run's
// ScratchBytes and ScratchFiles), made empty before the run and removed
// after it whatever the run ended with: the run is in this process, so
// the removal runs after a timeout, an out-of-memory or a cancellation as
// after a clean exit; what a process killed with SIGKILL leaves, the next
// one removes (sweepScratchOnce). A native run's working directory is its job dir, a
// tmpfs of its own that ends with it (host/native).
//
// FilesOut returns what the run wrote there. Everything in the directory
// is the guest's making, so it is read as hostile: it is walked beneath
// an os.Root, without following a link; only regular files are read,
// opened without following a link and checked again once open; names
// that are not printable text are escaped and the file not returned; and
// the whole is bounded by MaxFilesOut and the run's MaxOutputBytes.

// MaxFilesOut bounds the files a result returns.
const MaxFilesOut = 64

// Bounds on FilesOut's patterns.
const (
	maxFilesOutPatterns = 32
	maxFilesOutPattern  = 256
	// maxScratchWalk bounds the names looked at to answer FilesOut: the
	// quota bounds the names a run makes, this a caller's quota too.
	maxScratchWalk = 100_000
)

// OutFile is a file a run wrote to its scratch directory, as FilesOut
// returns it: its content when it is returned, or why it is not.
type OutFile struct {
	Name string `json:"name"` // relative to the scratch directory, '/'-separated
	Size int64  `json:"size"`
	// Encoding is "utf-8" when Content is the file's text, "base64" when
	// it is its bytes in standard base64; empty when Omitted.
	Encoding string `json:"encoding,omitempty"`
	Content  string `json:"content,omitempty"`
	// Omitted says why the file is not returned: it is not a regular file,
	// its name is not printable text, or it passes a bound.
	Omitted string `json:"omitted,omitempty"`
}

// ValidateFilesOut checks FilesOut's patterns: each names files relative
// to the scratch directory (no leading '/', no "..") with path.Match's
// syntax.
func ValidateFilesOut(patterns []string) error {
	if len(patterns) > maxFilesOutPatterns {
		return fmt.Errorf("files_out: %d patterns; give at most %d", len(patterns), maxFilesOutPatterns)
	}
	for _, p := range patterns {
		q := strconv.QuoteToASCII(p)
		if len(q) > maxFilesOutPattern+2 {
			q = q[:maxFilesOutPattern] + "…"
		}
		switch {
		case p == "":
			return errors.New("files_out: an empty pattern; name files relative to the working directory, e.g. \"out.txt\" or \"*.png\"")
		case len(p) > maxFilesOutPattern:
			return fmt.Errorf("files_out: the pattern %s is longer than %d bytes", q, maxFilesOutPattern)
		case !utf8.ValidString(p) || strings.ContainsFunc(p, unicode.IsControl):
			return fmt.Errorf("files_out: the pattern %s is not printable text", q)
		case strings.HasPrefix(p, "/"):
			return fmt.Errorf("files_out: the pattern %s is absolute; name files relative to the working directory, e.g. \"out.txt\"", q)
		}
		for _, el := range strings.Split(p, "/") {
			if el == ".." || el == "." || el == "" {
				return fmt.Errorf("files_out: the pattern %s has a %q element; name files beneath the working directory, e.g. \"plots/*.png\"", q, el)
			}
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("files_out: the pattern %s is malformed (%v); use *, ? and [a-z] as in shell globs", q, err)
		}
	}
	return nil
}

// scratchPrefix begins the names of scratch directories in the
// temporary directory; the rest is "job-<pid>-<start>-<random>", the
// process that made it as kernel.JobRunnerGone reads it.
const scratchPrefix = "moat-scratch-"

// newScratch makes a run's scratch directory, named for this process so
// that a later one can remove it if this one is killed (sweepScratch).
func newScratch() (string, error) {
	sweepScratchOnce()
	d, err := os.MkdirTemp("", scratchPrefix+"job-"+kernel.OwnJobCgroupTag())
	if err != nil {
		return "", fmt.Errorf("the run's scratch directory: %w", err)
	}
	return d, nil
}

// sweepScratchOnce removes, once per process before its first run, the
// scratch directories of moat processes that are gone: a run removes its
// own however it ends, but a process killed with SIGKILL cannot. A live
// process's are never touched (its pid and start time are in the name).
var sweepScratchOnce = sync.OnceFunc(func() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), scratchPrefix+"job-*"))
	for _, d := range dirs {
		if gone, named := kernel.JobRunnerGone(strings.TrimPrefix(filepath.Base(d), scratchPrefix)); named && gone {
			_ = os.RemoveAll(d)
		}
	}
})

// collectFiles returns the files beneath dir whose relative names match
// one of patterns, at most MaxFilesOut of them and maxBytes of content in
// all, in name order.
func collectFiles(dir string, patterns []string, maxBytes int64) ([]OutFile, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("files_out: %w", err)
	}
	defer root.Close()
	var out []OutFile
	var total int64
	walked := 0
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if p == "." {
			return err
		}
		if walked++; walked > maxScratchWalk {
			return fs.SkipAll
		}
		if err != nil || d.IsDir() || !matchAny(patterns, p) {
			return nil
		}
		f := OutFile{Name: p}
		if !utf8.ValidString(p) || strings.ContainsFunc(p, unicode.IsControl) {
			f.Name = strconv.QuoteToASCII(p)
			f.Omitted = "its name is not printable text"
			out = append(out, f)
			return nil
		}
		if len(out) >= MaxFilesOut {
			out = append(out[:MaxFilesOut], OutFile{Name: p, Omitted: fmt.Sprintf("more than %d files matched; the rest are not returned", MaxFilesOut)})
			return fs.SkipAll
		}
		if !d.Type().IsRegular() {
			f.Omitted = "not a regular file (a link, FIFO or device is never followed or read)"
			out = append(out, f)
			return nil
		}
		content, size, why := readOut(root, p, maxBytes-total)
		f.Size = size
		if why != "" {
			f.Omitted = why
		} else {
			total += int64(len(content))
			if utf8.Valid(content) {
				f.Encoding, f.Content = "utf-8", string(content)
			} else {
				f.Encoding, f.Content = "base64", base64.StdEncoding.EncodeToString(content)
			}
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

// readOut reads the regular file p beneath root, when it holds at most
// room bytes: opened without following a link or blocking on a FIFO, and
// checked to be a regular file once open.
func readOut(root *os.Root, p string, room int64) ([]byte, int64, string) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, 0, "it could not be opened: " + err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, 0, "not a regular file (a link, FIFO or device is never followed or read)"
	}
	if fi.Size() > room {
		return nil, fi.Size(), "the files returned would pass the run's output limit (max_output_bytes); write less or name fewer files"
	}
	b, err := io.ReadAll(io.LimitReader(f, room+1))
	if err != nil {
		return nil, fi.Size(), "it could not be read"
	}
	if int64(len(b)) > room {
		return nil, int64(len(b)), "the files returned would pass the run's output limit (max_output_bytes); write less or name fewer files"
	}
	return b, int64(len(b)), ""
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// scratchOf is the host.Scratch of a run in dir under lim.
func scratchOf(dir string, lim ExecLimits) *host.Scratch {
	return &host.Scratch{Dir: dir, MaxBytes: lim.ScratchBytes, MaxFiles: lim.ScratchFiles}
}

// scratchNote is what a result's message says of a full scratch directory.
func scratchNote(full string, lim ExecLimits) string {
	limit := fmt.Sprintf("%d bytes", lim.ScratchBytes)
	if full == "files" {
		limit = fmt.Sprintf("%d files", lim.ScratchFiles)
	}
	return "the run's scratch directory is full (at most " + limit + "): the program's write was refused with ENOSPC"
}
