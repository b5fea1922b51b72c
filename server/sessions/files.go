package sessions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
)

// The files API reaches a workspace through os.Root, as host/grantfs
// serves it to the session's code: every element of a path is opened
// beneath the workspace, a symbolic link is resolved beneath it again, and
// ".." or a link that would leave it is refused, whoever made the link.
// A path is the guest's (/home/user/a/b) or relative to the workspace
// (a/b); anything else is refused before the kernel sees it.

// Entry is one name in a listing.
type Entry struct {
	Name string `json:"name"`
	Path string `json:"path"` // as the code sees it, /home/user/...
	Type string `json:"type"` // file, dir or other
	Size int64  `json:"size"`
	// Mode and ModTime are what Stat and List saw (E2B's EntryInfo
	// carries them; /v1's listing leaves them out, as it always has).
	Mode    fs.FileMode `json:"-"`
	ModTime time.Time   `json:"-"`
}

// MaxListEntries bounds one listing.
const MaxListEntries = 10000

// rel turns a request's path into a path relative to the workspace.
func rel(p string, allowRoot bool) (string, error) {
	switch {
	case len(p) > MaxPathBytes:
		return "", invalid("path: %d bytes, at most %d", len(p), MaxPathBytes)
	case strings.ContainsRune(p, 0):
		return "", invalid("path: it holds a NUL byte")
	}
	if p == WorkspacePath || strings.HasPrefix(p, WorkspacePath+"/") {
		p = strings.TrimPrefix(p, WorkspacePath)
		p = strings.TrimPrefix(p, "/")
	} else if strings.HasPrefix(p, "/") {
		return "", invalid("path: %q is outside the workspace; give a path beneath %s, or one relative to it", p, WorkspacePath)
	}
	if p == "" {
		p = "."
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", invalid("path: %q leads out of the workspace (..); give a path beneath %s", p, WorkspacePath)
	}
	if c == "." && !allowRoot {
		return "", invalid("path: name a file beneath %s, not the workspace itself", WorkspacePath)
	}
	return c, nil
}

func guestPath(r string) string {
	if r == "." {
		return WorkspacePath
	}
	return WorkspacePath + "/" + r
}

// fsErr maps a filesystem error to a refusal a caller can act on.
func (s *Session) fsErr(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &Error{Code: "not_found", Session: s.id, Reason: fmt.Sprintf("%s: no such file or directory", guestPath(p)), Err: err}
	case strings.Contains(err.Error(), "escapes") || errors.Is(err, fs.ErrPermission):
		return &Error{Code: "denied", Session: s.id, Reason: fmt.Sprintf("%s: the path leads out of the workspace (a symbolic link or ..)", guestPath(p)), Err: err}
	}
	return &Error{Code: "invalid_argument", Session: s.id, Reason: fmt.Sprintf("%s: %v", guestPath(p), err), Err: err}
}

func (s *Session) root() (*os.Root, error) {
	r, err := os.OpenRoot(s.dir)
	if err != nil {
		return nil, fmt.Errorf("session %s: open its workspace: %w", s.id, err)
	}
	return r, nil
}

// at is the workspace opened as a root and p as a path beneath it (rel's
// rule; allowRoot admits the workspace itself): what every file
// operation starts with. The caller closes the root.
func (s *Session) at(p string, allowRoot bool) (*os.Root, string, error) {
	rp, err := rel(p, allowRoot)
	if err != nil {
		return nil, "", err
	}
	r, err := s.root()
	if err != nil {
		return nil, "", err
	}
	return r, rp, nil
}

// usage is what the workspace holds: bytes and names, walked through
// the root (links not followed), stopping past the quota.
func (s *Session) usage(r *os.Root) (bytes, files int64) {
	_ = fs.WalkDir(r.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		files++
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			bytes += info.Size()
		}
		if files > s.m.cfg.MaxFiles+1 {
			return fs.SkipAll
		}
		return nil
	})
	return bytes, files - 1 // the workspace itself
}

// WriteFile writes body (at most MaxFileBytes) to p, making its parent
// directories, under the workspace's quota.
func (s *Session) WriteFile(ctx context.Context, correlation, p string, body io.Reader) (*Entry, error) {
	r, rp, err := s.at(p, false)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if dir := path.Dir(rp); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return nil, s.fsErr(rp, err)
		}
	}
	used, names := s.usage(r)
	if names >= s.m.cfg.MaxFiles {
		return nil, &Error{Code: "resource_exhausted", Session: s.id, Reason: fmt.Sprintf("the workspace holds %d names, its limit (sessions.max_files); remove some", names)}
	}
	var old int64
	if st, err := r.Lstat(rp); err == nil && st.Mode().IsRegular() {
		old = st.Size()
	}
	room := min(s.m.cfg.MaxFileBytes, s.m.cfg.DiskQuotaBytes-used+old)
	tmp := rp + ".moat-upload"
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, s.fsErr(rp, err)
	}
	n, err := io.Copy(f, io.LimitReader(body, room+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > room {
		err = &Error{Code: "too_large", Session: s.id, Reason: fmt.Sprintf("%s: more than %d bytes, what the file size limit (sessions.max_file_bytes) and the workspace's quota (sessions.disk_quota_bytes) leave", guestPath(rp), room)}
	}
	if err == nil {
		err = r.Rename(tmp, rp)
	}
	if err != nil {
		_ = r.Remove(tmp)
		var se *Error
		if errors.As(err, &se) {
			return nil, se
		}
		return nil, s.fsErr(rp, err)
	}
	s.touch()
	s.m.record(ctx, s, correlation, "files.write", audit.Allow, guestPath(rp))
	return &Entry{Name: path.Base(rp), Path: guestPath(rp), Type: "file", Size: n}, nil
}

// OpenFile opens p for reading: a regular file of at most MaxFileBytes.
func (s *Session) OpenFile(p string) (io.ReadCloser, int64, error) {
	r, rp, err := s.at(p, false)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	f, err := r.Open(rp)
	if err != nil {
		return nil, 0, s.fsErr(rp, err)
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, 0, s.fsErr(rp, err)
	case !st.Mode().IsRegular():
		f.Close()
		return nil, 0, &Error{Code: "invalid_argument", Session: s.id, Reason: fmt.Sprintf("%s is not a regular file; list a directory with GET /v1/sessions/{id}/files/list", guestPath(rp))}
	case st.Size() > s.m.cfg.MaxFileBytes:
		f.Close()
		return nil, 0, &Error{Code: "too_large", Session: s.id, Reason: fmt.Sprintf("%s is %d bytes, more than sessions.max_file_bytes (%d)", guestPath(rp), st.Size(), s.m.cfg.MaxFileBytes)}
	}
	s.touch()
	return f, st.Size(), nil
}

// List lists the directory p (the workspace when empty).
func (s *Session) List(p string) ([]Entry, error) {
	r, rp, err := s.at(p, true)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.Open(rp)
	if err != nil {
		return nil, s.fsErr(rp, err)
	}
	defer f.Close()
	des, err := f.ReadDir(MaxListEntries)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, s.fsErr(rp, err)
	}
	out := []Entry{}
	for _, d := range des {
		e := Entry{Name: d.Name(), Path: guestPath(filepath.ToSlash(path.Join(rp, d.Name()))), Type: "other"}
		if strings.HasSuffix(d.Name(), ".moat-upload") {
			continue
		}
		if info, err := d.Info(); err == nil {
			e.Mode, e.ModTime = info.Mode(), info.ModTime()
			switch {
			case info.IsDir():
				e.Type = "dir"
			case info.Mode().IsRegular():
				e.Type, e.Size = "file", info.Size()
			}
		}
		out = append(out, e)
	}
	s.touch()
	return out, nil
}

// Remove removes p and, for a directory, what it holds.
func (s *Session) Remove(ctx context.Context, correlation, p string) error {
	r, rp, err := s.at(p, false)
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := r.Lstat(rp); err != nil {
		return s.fsErr(rp, err)
	}
	if err := r.RemoveAll(rp); err != nil {
		return s.fsErr(rp, err)
	}
	s.touch()
	s.m.record(ctx, s, correlation, "files.remove", audit.Allow, guestPath(rp))
	return nil
}

// entryOf describes the name rp whose Lstat is st.
func entryOf(rp string, st fs.FileInfo) *Entry {
	e := &Entry{Name: path.Base(rp), Path: guestPath(rp), Type: "other", Mode: st.Mode(), ModTime: st.ModTime()}
	switch {
	case st.IsDir():
		e.Type = "dir"
	case st.Mode().IsRegular():
		e.Type, e.Size = "file", st.Size()
	}
	if rp == "." {
		e.Name = path.Base(WorkspacePath)
	}
	return e
}

// Stat describes p (the workspace when empty), a symbolic link itself
// rather than what it names.
func (s *Session) Stat(p string) (*Entry, error) {
	r, rp, err := s.at(p, true)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	st, err := r.Lstat(rp)
	if err != nil {
		return nil, s.fsErr(rp, err)
	}
	s.touch()
	return entryOf(rp, st), nil
}

// MakeDir makes the directory p and its parents; a name that is already
// there is a conflict (E2B's makeDir answers false for it).
func (s *Session) MakeDir(ctx context.Context, correlation, p string) (*Entry, error) {
	r, rp, err := s.at(p, false)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if _, err := r.Lstat(rp); err == nil {
		return nil, &Error{Code: "conflict", Session: s.id, Reason: fmt.Sprintf("%s already exists", guestPath(rp))}
	}
	if _, names := s.usage(r); names >= s.m.cfg.MaxFiles {
		return nil, &Error{Code: "resource_exhausted", Session: s.id, Reason: fmt.Sprintf("the workspace holds %d names, its limit (sessions.max_files); remove some", names)}
	}
	if err := r.MkdirAll(rp, 0o755); err != nil {
		return nil, s.fsErr(rp, err)
	}
	st, err := r.Lstat(rp)
	if err != nil {
		return nil, s.fsErr(rp, err)
	}
	s.touch()
	s.m.record(ctx, s, correlation, "files.mkdir", audit.Allow, guestPath(rp))
	return entryOf(rp, st), nil
}

// Move renames from to to, making to's parent directories; both lie
// beneath the workspace by rel's rule and the root's, so neither a path
// nor a link on either side leads out.
func (s *Session) Move(ctx context.Context, correlation, from, to string) (*Entry, error) {
	r, src, err := s.at(from, false)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	dst, err := rel(to, false)
	if err != nil {
		return nil, err
	}
	if _, err := r.Lstat(src); err != nil {
		return nil, s.fsErr(src, err)
	}
	if dir := path.Dir(dst); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return nil, s.fsErr(dst, err)
		}
	}
	if err := r.Rename(src, dst); err != nil {
		return nil, s.fsErr(dst, err)
	}
	st, err := r.Lstat(dst)
	if err != nil {
		return nil, s.fsErr(dst, err)
	}
	s.touch()
	s.m.record(ctx, s, correlation, "files.move", audit.Allow, guestPath(src)+" -> "+guestPath(dst))
	return entryOf(dst, st), nil
}
