package sessions

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/atomicfile"
	"github.com/moat-sandbox/moat/policy"
)

// Pause and resume: a paused session is an image in an Images store
// (the server's store, so that any replica can resume it) and nothing
// else: its contexts are captured as a fork captures them (fork.go), its
// workspace written as a tar, and the live session ended. Resume reads
// the image back (checked: see readImage), makes the session again under
// the same id, owner, variables, metadata and lifetime, and each context
// starts from its image on its first run. A paused session answers 404
// to every other call until it is resumed (POST .../resume).

// Images keeps paused sessions' images (the server's store implements it, so any replica can resume).
type Images interface {
	PutImage(ctx context.Context, org, id string, image io.Reader) error
	OpenImage(ctx context.Context, org, id string) (io.ReadCloser, error) // fs.ErrNotExist when none
	DeleteImage(ctx context.Context, org, id string) error
}

// DirImages is an Images of files in dir (dir/<org digest>/<id>.img): a
// single-node server's, and the tests'.
func DirImages(dir string) Images { return dirImages(dir) }

type dirImages string

var _ Images = dirImages("")

func (d dirImages) path(org, id string) (string, error) {
	if !ValidID(id) {
		return "", fs.ErrNotExist
	}
	return filepath.Join(string(d), host.SnapshotKey([]byte(org)), id+".img"), nil
}

func (d dirImages) PutImage(_ context.Context, org, id string, image io.Reader) error {
	p, err := d.path(org, id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, err := io.ReadAll(image)
	if err != nil {
		return err
	}
	return atomicfile.Write(p, b)
}

func (d dirImages) OpenImage(_ context.Context, org, id string) (io.ReadCloser, error) {
	p, err := d.path(org, id)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

func (d dirImages) DeleteImage(_ context.Context, org, id string) error {
	p, err := d.path(org, id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// imageMagic starts a session image; its last byte is the format's
// version, refused when it is not this one.
var imageMagic = []byte("moatsess\x01")

// Bounds of an image read back: its header, and its contexts' images
// (each at most the contexts' memory limit, 4 GiB).
const (
	maxImageHeader   = 1 << 20
	maxContextImages = 4 << 30
)

// imageHeader is a session image's metadata.
type imageHeader struct {
	ID       string            `json:"id"`
	User     string            `json:"user"`
	Org      string            `json:"org"`
	Env      map[string]string `json:"env,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Started  time.Time         `json:"started"`
	Expires  time.Time         `json:"expires"`
	Contexts []imageContext    `json:"contexts"`
	Tar      int64             `json:"tar"` // the workspace's bytes
}

type imageContext struct {
	Info  ContextInfo `json:"info"`
	Depth int         `json:"depth"`
	Bytes int64       `json:"bytes"`
}

// writeImage encodes s, captured as st, and its workspace: the magic, the
// header's length and the header, each context's image, the workspace's
// tar, and a SHA-256 of everything before it.
func (s *Session) writeImage(st *sessionState) ([]byte, error) {
	var ws bytes.Buffer
	if err := tarTree(&ws, s.dir, s.m.cfg.DiskQuotaBytes, s.m.cfg.MaxFiles); err != nil {
		return nil, fmt.Errorf("the workspace: %w", err)
	}
	s.mu.Lock()
	h := imageHeader{ID: s.id, User: s.owner.User, Org: s.owner.Org, Env: s.env, Metadata: s.meta, Started: s.start, Expires: s.expires, Tar: int64(ws.Len())}
	s.mu.Unlock()
	var imgs [][]byte
	for _, name := range sortedKeys(st.contexts) {
		pc := st.contexts[name]
		b, err := pc.img.MarshalBinary()
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, b)
		h.Contexts = append(h.Contexts, imageContext{Info: pc.info, Depth: pc.depth, Bytes: int64(len(b))})
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	out := append([]byte{}, imageMagic...)
	out = binary.AppendUvarint(out, uint64(len(hb)))
	out = append(out, hb...)
	for _, b := range imgs {
		out = append(out, b...)
	}
	out = append(out, ws.Bytes()...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...), nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// errBadImage is the refusal of an image that is not one this version
// wrote, or was damaged or changed since.
var errBadImage = errors.New("the paused session's image is damaged, truncated or of another version")

// readImage decodes an image of at most max bytes; anything else is
// errBadImage (or a bound's error).
func readImage(r io.Reader, max int64) (*imageHeader, []*host.ResidentImage, []byte, error) {
	var buf bytes.Buffer
	if st, ok := r.(interface{ Stat() (fs.FileInfo, error) }); ok { // one allocation, not a doubling per read
		if fi, err := st.Stat(); err == nil && fi.Size() > 0 && fi.Size() <= max {
			buf.Grow(int(fi.Size()) + 1)
		}
	}
	if _, err := buf.ReadFrom(io.LimitReader(r, max+1)); err != nil {
		return nil, nil, nil, err
	}
	b := buf.Bytes()
	if int64(len(b)) > max {
		return nil, nil, nil, fmt.Errorf("the paused session's image is larger than %d bytes", max)
	}
	if len(b) < len(imageMagic)+sha256.Size || !bytes.HasPrefix(b, imageMagic) {
		return nil, nil, nil, errBadImage
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if want := sha256.Sum256(body); !bytes.Equal(want[:], sum) {
		return nil, nil, nil, errBadImage
	}
	rest := body[len(imageMagic):]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > maxImageHeader || n > uint64(len(rest)-k) {
		return nil, nil, nil, errBadImage
	}
	var h imageHeader
	if err := json.Unmarshal(rest[k:k+int(n)], &h); err != nil {
		return nil, nil, nil, errBadImage
	}
	rest = rest[k+int(n):]
	var imgs []*host.ResidentImage
	for _, c := range h.Contexts {
		if c.Bytes <= 0 || c.Bytes > int64(len(rest)) || c.Bytes > maxContextImages || !contextName.MatchString(c.Info.Name) || LanguageOf(c.Info.Language) == "" {
			return nil, nil, nil, errBadImage
		}
		img, err := host.UnmarshalResidentImage(rest[:c.Bytes])
		if err != nil {
			return nil, nil, nil, errBadImage
		}
		imgs = append(imgs, img)
		rest = rest[c.Bytes:]
	}
	if h.Tar != int64(len(rest)) {
		return nil, nil, nil, errBadImage
	}
	return &h, imgs, rest, nil
}

// Pause writes p's session id to the Images store and ends it.
func (m *Manager) Pause(ctx context.Context, p policy.Principal, id, correlation string) error {
	if m.cfg.Images == nil {
		return &Error{Code: "unavailable", Reason: "pausing sessions is not enabled on this server (it has no image store)"}
	}
	s, err := m.Get(p, id)
	if err != nil {
		return err
	}
	began := time.Now()
	st, release, err := s.capture(ctx, correlation, "pause")
	if err != nil {
		m.record(ctx, s, correlation, "pause", audit.Deny, err.Error())
		return err
	}
	img, err := s.writeImage(st)
	if err == nil {
		err = m.cfg.Images.PutImage(ctx, s.owner.Org, s.id, bytes.NewReader(img))
	}
	release()
	if err != nil {
		m.record(ctx, s, correlation, "pause", audit.Deny, err.Error())
		return fmt.Errorf("session %s: pause: %w", s.id, err)
	}
	s.end(ctx, correlation, "pause", fmt.Sprintf("image of %d bytes in %v", len(img), time.Since(began).Round(time.Microsecond)))
	return nil
}

// Resume makes p's paused session id live again from its image.
func (m *Manager) Resume(ctx context.Context, p policy.Principal, id, correlation string) (*Info, error) {
	if m.cfg.Images == nil {
		return nil, &Error{Code: "unavailable", Reason: "pausing sessions is not enabled on this server (it has no image store)"}
	}
	if !ValidID(id) {
		return nil, notFound("")
	}
	if s, err := m.Get(p, id); err == nil { // live: nothing to resume
		return s.info(), nil
	}
	rc, err := m.cfg.Images.OpenImage(ctx, p.Org, id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: resume: %w", id, err)
	}
	h, imgs, ws, err := readImage(rc, m.cfg.DiskQuotaBytes+maxContextImages*int64(m.cfg.MaxContexts)+maxImageHeader)
	rc.Close()
	probe := &Session{m: m, id: id, owner: policy.Principal{User: p.User, Org: p.Org}}
	if err != nil {
		m.record(ctx, probe, correlation, "resume", audit.Deny, err.Error())
		return nil, &Error{Code: "conflict", Session: id, Reason: err.Error() + "; it cannot be resumed", Err: err}
	}
	if h.ID != id || h.User != p.User || h.Org != p.Org {
		// Another session's image, or another principal's: never theirs.
		m.record(ctx, probe, correlation, "resume", audit.Deny, "the image is of another session or principal")
		return nil, notFound(id)
	}
	if err := checkVars("env_vars", h.Env, true); err != nil {
		return nil, &Error{Code: "conflict", Session: id, Reason: errBadImage.Error(), Err: err}
	}
	if err := m.reserve(ctx, probe, correlation, 1); err != nil {
		return nil, err
	}
	defer m.unreserve(p.Org, 1)
	now := time.Now().UTC()
	s := &Session{m: m, id: id, owner: probe.owner, dir: filepath.Join(m.cfg.Dir, id), env: h.Env, meta: h.Metadata, start: h.Started,
		expires: h.Expires, lastUsed: now, contexts: map[string]*codeContext{}, pending: map[string]*pendingContext{}}
	if end := s.start.Add(m.cfg.MaxLifetime); s.expires.After(end) {
		s.expires = end
	}
	if !now.Before(s.expires) {
		_ = m.cfg.Images.DeleteImage(ctx, p.Org, id)
		return nil, &Error{Code: "not_found", Session: id, Reason: "the paused session's lifetime ended", Err: ErrNotFound}
	}
	if len(h.Contexts) > m.cfg.MaxContexts {
		return nil, &Error{Code: "conflict", Session: id, Reason: errBadImage.Error()}
	}
	for i, c := range h.Contexts {
		s.pending[c.Info.Name] = &pendingContext{info: c.Info, img: imgs[i], depth: c.Depth}
	}
	if err := os.MkdirAll(m.cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("session %s: resume: %w", id, err)
	}
	if err := untarTree(bytes.NewReader(ws), s.dir, m.cfg.DiskQuotaBytes, m.cfg.MaxFiles); err != nil {
		_ = os.RemoveAll(s.dir)
		m.record(ctx, s, correlation, "resume", audit.Deny, err.Error())
		return nil, &Error{Code: "conflict", Session: id, Reason: "the paused session's workspace: " + err.Error(), Err: err}
	}
	m.mu.Lock()
	if m.live[id] != nil {
		m.mu.Unlock()
		_ = os.RemoveAll(s.dir)
		return nil, &Error{Code: "conflict", Session: id, Reason: "the session is being resumed by another call"}
	}
	m.live[id] = s
	m.mu.Unlock()
	_ = m.cfg.Images.DeleteImage(ctx, p.Org, id)
	m.record(ctx, s, correlation, "resume", audit.Allow, "")
	in := s.info()
	if m.cfg.OnCreate != nil {
		// This replica holds it now: every other routes its calls here.
		m.cfg.OnCreate(ctx, *in)
	}
	return in, nil
}

// tarTree writes the workspace dir as a tar, beneath an os.Root, at most
// maxBytes and maxFiles.
func tarTree(w io.Writer, dir string, maxBytes, maxFiles int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	var total, files int64
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		if files++; files > maxFiles {
			return fmt.Errorf("more than %d names (sessions.max_files)", maxFiles)
		}
		switch t := d.Type(); {
		case t.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o700})
		case t&fs.ModeSymlink != 0:
			target, err := root.Readlink(p)
			if err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: target, Mode: 0o777})
		case t.IsRegular():
			f, err := root.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			if total += fi.Size(); total > maxBytes {
				return fmt.Errorf("more than %d bytes (sessions.disk_quota_bytes)", maxBytes)
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Size: fi.Size(), Mode: 0o600, ModTime: fi.ModTime()}); err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, fi.Size())
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// untarTree writes a workspace's tar into dir beneath an os.Root: only
// directories, regular files and symbolic links, by clean relative
// names, at most maxBytes and maxFiles; anything else refuses the tar.
func untarTree(r io.Reader, dir string, maxBytes, maxFiles int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var total, files int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if files++; files > maxFiles {
			return fmt.Errorf("more than %d names (sessions.max_files)", maxFiles)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || len(name) > MaxPathBytes || path.Clean(name) != name || !fs.ValidPath(name) {
			return fmt.Errorf("a name that is not a clean relative path: %q", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.Mkdir(name, 0o700)
		case tar.TypeSymlink:
			err = root.Symlink(h.Linkname, name)
		case tar.TypeReg:
			if h.Size < 0 || total+h.Size > maxBytes {
				return fmt.Errorf("more than %d bytes (sessions.disk_quota_bytes)", maxBytes)
			}
			total += h.Size
			var f *os.File
			if f, err = root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
				_, err = io.CopyN(f, tr, h.Size)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		default:
			return fmt.Errorf("%q is of a kind a workspace does not hold (tar type %q)", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}
