package sessions

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
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

// ImageLister is implemented by an Images that can list an
// organization's images (DirImages): Manager.Paused lists the paused
// sessions from it. A shared store's are listed through the session
// directory of moat serve's replicas instead (server/replicas.go), which
// records each paused session's Info as it pauses.
type ImageLister interface {
	ListImages(ctx context.Context, org string, max int) ([]string, error)
}

// MaxListedPaused bounds the paused sessions Manager.Paused reads for one
// caller (each is a file's header read).
const MaxListedPaused = 1000

var _ ImageLister = dirImages("")

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
	return atomicfile.WriteFrom(p, func(w io.Writer) error {
		_, err := io.Copy(w, image)
		return err
	})
}

func (d dirImages) OpenImage(_ context.Context, org, id string) (io.ReadCloser, error) {
	p, err := d.path(org, id)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

// ListImages implements ImageLister: the ids of org's images, at most
// max of them.
func (d dirImages) ListImages(_ context.Context, org string, max int) ([]string, error) {
	f, err := os.Open(filepath.Join(string(d), host.SnapshotKey([]byte(org))))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []string
	for len(ids) < max {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if id, ok := strings.CutSuffix(n, ".img"); ok && ValidID(id) && len(ids) < max {
				ids = append(ids, id)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return ids, err
		}
	}
	return ids, nil
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

// The image's format. Version 2 (imageMagic) is written as a stream, so
// that no whole copy of it is ever in memory: the magic, the header's
// length and the header, each context's image (its length in the
// header), the workspace's tar (which ends itself), and a CRC-32C of
// everything before it (damage is what it finds: the store is the
// server's, and whoever writes it could write any image; CRC-32C is the
// hardware's, ~10 GB/s, where SHA-256 cost a resume tens of ms). Version 1 (imageMagicV1) gave the tar's length
// in the header and is read whole, as it was written; images paused
// before the change resume still.
var (
	imageMagic   = []byte("moatsess\x02")
	imageMagicV1 = []byte("moatsess\x01")
)

// Bounds of an image read back: its header, and its contexts' images
// (each at most the contexts' memory limit, 4 GiB).
const (
	maxImageHeader   = 1 << 20
	maxContextImages = 4 << 30
)

// DefaultMaxImageBytes bounds a paused session's image when
// Config.MaxImageBytes is 0 (sessions.max_image_bytes).
const DefaultMaxImageBytes = 1 << 30

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
	Tar      int64             `json:"tar,omitempty"` // version 1: the workspace's bytes
}

type imageContext struct {
	Info  ContextInfo `json:"info"`
	Depth int         `json:"depth"`
	Bytes int64       `json:"bytes"`
}

// errImageTooLarge is a pause whose image passed sessions.max_image_bytes.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errImageTooLarge = errors.New("the session's image is larger than sessions.max_image_bytes")

// boundedWriter fails a write past max bytes in all.
type boundedWriter struct {
	w      io.Writer
	n, max int64
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if b.n+int64(len(p)) > b.max {
		return 0, fmt.Errorf("%w (%d bytes): end the contexts that hold much memory, or remove files, then pause", errImageTooLarge, b.max)
	}
	n, err := b.w.Write(p)
	b.n += int64(n)
	return n, err
}

// writeImage writes s, captured as st, and its workspace to w as an
// image (version 2, above), at most max bytes; the bytes written.
func (s *Session) writeImage(w io.Writer, st *sessionState, max int64) (int64, error) {
	s.mu.Lock()
	h := imageHeader{ID: s.id, User: s.owner.User, Org: s.owner.Org, Env: s.env, Metadata: s.meta, Started: s.start, Expires: s.expires}
	s.mu.Unlock()
	names := sortedKeys(st.contexts)
	for _, name := range names {
		pc := st.contexts[name]
		h.Contexts = append(h.Contexts, imageContext{Info: pc.info, Depth: pc.depth, Bytes: pc.img.MarshaledSize()})
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return 0, err
	}
	bw := &boundedWriter{w: bufio.NewWriterSize(w, 256<<10), max: max}
	sum := crc32.New(castagnoli)
	hw := io.MultiWriter(bw, sum)
	head := append(append([]byte{}, imageMagic...), binary.AppendUvarint(nil, uint64(len(hb)))...)
	if _, err := hw.Write(append(head, hb...)); err != nil {
		return bw.n, err
	}
	for _, name := range names {
		if _, err := st.contexts[name].img.WriteTo(hw); err != nil {
			return bw.n, err
		}
	}
	if err := tarTree(hw, s.dir, s.m.cfg.DiskQuotaBytes, s.m.cfg.MaxFiles); err != nil {
		return bw.n, fmt.Errorf("the workspace: %w", err)
	}
	if _, err := bw.Write(sum.Sum(nil)); err != nil {
		return bw.n, err
	}
	return bw.n, bw.w.(*bufio.Writer).Flush()
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

// imageReader reads an image back as a stream, at most max bytes: its
// header (openImage), its contexts' images, then its workspace, written
// into a directory as it is read; the sum is checked at the end, and
// nothing read is used before it is (Resume removes the directory of an
// image that fails it).
type imageReader struct {
	h    *imageHeader
	r    *bufio.Reader // the image past the header (version 2)
	sum  hash.Hash     // of everything read so far (version 2)
	n    *int64        // bytes read from the source
	max  int64
	v1   []byte // version 1: the workspace's tar, the image checked whole
	imgs []*host.ResidentImage
}

// countReader counts what is read through it and fails past max.
type countReader struct {
	r      io.Reader
	n, max int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n += int64(n); c.n > c.max {
		return n, fmt.Errorf("the paused session's image is larger than %d bytes", c.max)
	}
	return n, err
}

// openImage reads an image's header (and a version 1 image whole).
func openImage(r io.Reader, max int64) (*imageReader, error) {
	cr := &countReader{r: r, max: max}
	br := bufio.NewReaderSize(cr, 256<<10)
	magic, err := br.Peek(len(imageMagic))
	switch {
	case err == nil && bytes.Equal(magic, imageMagicV1):
		h, imgs, ws, err := readImageV1(br, max)
		if err != nil {
			return nil, err
		}
		return &imageReader{h: h, imgs: imgs, v1: ws, max: max}, nil
	case err != nil && cr.n > max:
		return nil, err
	case err != nil || !bytes.Equal(magic, imageMagic):
		return nil, errBadImage
	}
	sum := crc32.New(castagnoli)
	ir := &imageReader{sum: sum, n: &cr.n, max: max}
	tr := io.TeeReader(br, sum)
	if _, err := io.ReadFull(tr, make([]byte, len(imageMagic))); err != nil {
		return nil, errBadImage
	}
	n, err := binary.ReadUvarint(byteReader{tr})
	if err != nil || n > maxImageHeader {
		return nil, ir.fail(err)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(tr, hb); err != nil {
		return nil, ir.fail(err)
	}
	var h imageHeader
	if err := json.Unmarshal(hb, &h); err != nil {
		return nil, errBadImage
	}
	for _, c := range h.Contexts {
		if c.Bytes <= 0 || c.Bytes > maxContextImages || c.Bytes > max || !contextName.MatchString(c.Info.Name) || LanguageOf(c.Info.Language) == "" {
			return nil, errBadImage
		}
	}
	ir.h, ir.r = &h, br
	return ir, nil
}

// fail is errBadImage, or the bound's error when the image passed it.
func (ir *imageReader) fail(err error) error {
	if ir.n != nil && *ir.n > ir.max {
		return fmt.Errorf("the paused session's image is larger than %d bytes", ir.max)
	}
	_ = err
	return errBadImage
}

// byteReader is an io.ByteReader of an io.Reader (one byte a call: for
// the header's length alone).
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var c [1]byte
	_, err := io.ReadFull(b.r, c[:])
	return c[0], err
}

// contexts reads the contexts' images.
func (ir *imageReader) contexts() ([]*host.ResidentImage, error) {
	if ir.v1 != nil || ir.r == nil {
		return ir.imgs, nil
	}
	tr := io.TeeReader(ir.r, ir.sum)
	var imgs []*host.ResidentImage
	for _, c := range ir.h.Contexts {
		// Streamed into the sealed file its instance maps; its own
		// checksum is not computed: the session's covers it, and
		// nothing read is used before that is checked (workspace).
		img, err := host.ReadResidentImage(tr, c.Bytes, true)
		if err != nil {
			return nil, ir.fail(err)
		}
		imgs = append(imgs, img)
	}
	return imgs, nil
}

// workspace writes the image's workspace into dir (untarTree's bounds),
// then checks the image's sum and that nothing follows it: an error
// means dir holds what must not be used.
func (ir *imageReader) workspace(dir string, maxBytes, maxFiles int64) error {
	if ir.r == nil {
		return untarTree(bytes.NewReader(ir.v1), dir, maxBytes, maxFiles)
	}
	if err := untarTree(io.TeeReader(ir.r, ir.sum), dir, maxBytes, maxFiles); err != nil {
		// The tar's own refusal (past the quota, a name out), or damage
		// (a cut or changed image breaks the tar first): the rest of the
		// image and its checksum tell which.
		if !ir.intact() {
			return ir.fail(err)
		}
		return err
	}
	var got [crc32.Size]byte
	if _, err := io.ReadFull(ir.r, got[:]); err != nil {
		return ir.fail(err)
	}
	if !bytes.Equal(got[:], ir.sum.Sum(nil)) {
		return errBadImage
	}
	if _, err := ir.r.ReadByte(); err != io.EOF {
		return ir.fail(err)
	}
	return nil
}

// intact reads the rest of the image and reports whether its checksum,
// its last bytes, is that of everything before it.
func (ir *imageReader) intact() bool {
	hb := &holdBack{h: ir.sum}
	if _, err := io.Copy(hb, ir.r); err != nil || len(hb.tail) != crc32.Size {
		return false
	}
	return bytes.Equal(hb.tail, ir.sum.Sum(nil))
}

// holdBack hashes what is written to it but its last crc32.Size bytes.
type holdBack struct {
	h    hash.Hash
	tail []byte
}

func (hb *holdBack) Write(p []byte) (int, error) {
	all := append(hb.tail, p...)
	cut := max(len(all)-crc32.Size, 0)
	hb.h.Write(all[:cut])
	hb.tail = append([]byte(nil), all[cut:]...)
	return len(p), nil
}

// readImageV1 decodes a version 1 image of at most max bytes, read
// whole; anything else is errBadImage (or a bound's error).
func readImageV1(r io.Reader, max int64) (*imageHeader, []*host.ResidentImage, []byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(r, max+1)); err != nil {
		return nil, nil, nil, err
	}
	b := buf.Bytes()
	if int64(len(b)) > max {
		return nil, nil, nil, fmt.Errorf("the paused session's image is larger than %d bytes", max)
	}
	if len(b) < len(imageMagicV1)+sha256.Size || !bytes.HasPrefix(b, imageMagicV1) {
		return nil, nil, nil, errBadImage
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if want := sha256.Sum256(body); !bytes.Equal(want[:], sum) {
		return nil, nil, nil, errBadImage
	}
	rest := body[len(imageMagicV1):]
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

// readImageHeader reads an image's header alone (not checked against the
// image's sum, which covers the whole: what it says is listed, never
// trusted further; Resume reads and checks the whole image).
func readImageHeader(r io.Reader) (*imageHeader, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, int64(len(imageMagic))+binary.MaxVarintLen64+maxImageHeader), 4096)
	magic := make([]byte, len(imageMagic))
	if _, err := io.ReadFull(br, magic); err != nil || !(bytes.Equal(magic, imageMagic) || bytes.Equal(magic, imageMagicV1)) {
		return nil, errBadImage
	}
	n, err := binary.ReadUvarint(br)
	if err != nil || n > maxImageHeader {
		return nil, errBadImage
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(br, hb); err != nil {
		return nil, errBadImage
	}
	var h imageHeader
	if err := json.Unmarshal(hb, &h); err != nil {
		return nil, errBadImage
	}
	return &h, nil
}

// Paused returns p's paused sessions, oldest first, as their images'
// headers describe them (State StatePaused), when the Images store can
// list them (ImageLister; else none). An image whose lifetime ended is
// deleted as it is met; at most MaxListedPaused are read.
func (m *Manager) Paused(ctx context.Context, p policy.Principal) ([]Info, error) {
	l, ok := m.cfg.Images.(ImageLister)
	if !ok || (p.User == "" && p.Org == "") {
		return nil, nil
	}
	ids, err := l.ListImages(ctx, p.Org, MaxListedPaused)
	if err != nil {
		return nil, fmt.Errorf("sessions: list the paused sessions: %w", err)
	}
	now := time.Now()
	out := []Info{}
	for _, id := range ids {
		m.mu.Lock()
		live := m.live[id] != nil
		m.mu.Unlock()
		if live { // resumed meanwhile (its image about to go)
			continue
		}
		rc, err := m.cfg.Images.OpenImage(ctx, p.Org, id)
		if err != nil {
			continue // deleted meanwhile
		}
		h, err := readImageHeader(rc)
		rc.Close()
		if err != nil || h.ID != id || h.Org != p.Org || h.User != p.User {
			continue // damaged (resume says so), or another principal's of the organization
		}
		if !now.Before(h.Expires) {
			_ = m.cfg.Images.DeleteImage(ctx, p.Org, id)
			continue
		}
		in := Info{ID: h.ID, User: h.User, Org: h.Org, Workspace: WorkspacePath, StartedAt: h.Started, ExpiresAt: h.Expires,
			IdleExpires: h.Expires, Metadata: h.Metadata, Contexts: []ContextInfo{}, State: StatePaused}
		for _, c := range h.Contexts {
			in.Contexts = append(in.Contexts, c.Info)
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Info) int { return a.StartedAt.Compare(b.StartedAt) })
	return out, nil
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
	// The image streams to the store as it is written: no copy of it
	// whole is held (a store's PutImage holds a chunk at a time; the
	// directory's writes a file it renames once whole).
	pr, pw := io.Pipe()
	put := make(chan error, 1)
	go func() {
		err := m.cfg.Images.PutImage(ctx, s.owner.Org, s.id, pr)
		pr.Close() // a write after the store gave up fails
		put <- err
	}()
	n, err := s.writeImage(pw, st, m.cfg.MaxImageBytes)
	pw.CloseWithError(err) // nil: the image's end; else the store keeps nothing
	if perr := <-put; perr != nil {
		err = perr // wraps the writer's error when that ended it
	}
	release()
	if err != nil {
		m.record(ctx, s, correlation, "pause", audit.Deny, err.Error())
		if errors.Is(err, errImageTooLarge) {
			return &Error{Code: "too_large", Session: s.id, Reason: "pause: " + err.Error(), Err: err}
		}
		return fmt.Errorf("session %s: pause: %w", s.id, err)
	}
	s.end(ctx, correlation, "pause", fmt.Sprintf("image of %d bytes in %v", n, time.Since(began).Round(time.Microsecond)))
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
	// Closed after the answer: the last close of a file store's image,
	// deleted below, frees its ~80 MB of page cache (~20 ms of CPU).
	defer func() { go rc.Close() }()
	ir, err := openImage(rc, max(m.cfg.MaxImageBytes, m.cfg.DiskQuotaBytes+maxContextImages*int64(m.cfg.MaxContexts)+maxImageHeader))
	probe := &Session{m: m, id: id, owner: policy.Principal{User: p.User, Org: p.Org}}
	refuse := func(err error) error {
		m.record(ctx, probe, correlation, "resume", audit.Deny, err.Error())
		return &Error{Code: "conflict", Session: id, Reason: err.Error() + "; it cannot be resumed", Err: err}
	}
	if err != nil {
		return nil, refuse(err)
	}
	h := ir.h
	if h.ID != id || h.User != p.User || h.Org != p.Org {
		// Another session's image, or another principal's: never theirs.
		m.record(ctx, probe, correlation, "resume", audit.Deny, "the image is of another session or principal")
		return nil, notFound(id)
	}
	if err := checkVars("env_vars", h.Env, true); err != nil {
		return nil, &Error{Code: "conflict", Session: id, Reason: errBadImage.Error(), Err: err}
	}
	if len(h.Contexts) > m.cfg.MaxContexts {
		return nil, &Error{Code: "conflict", Session: id, Reason: errBadImage.Error()}
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
	imgs, err := ir.contexts()
	if err != nil {
		return nil, refuse(err)
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
	if err := ir.workspace(s.dir, m.cfg.DiskQuotaBytes, m.cfg.MaxFiles); err != nil {
		_ = os.RemoveAll(s.dir)
		if errors.Is(err, errBadImage) || strings.Contains(err.Error(), "larger than") {
			return nil, refuse(err)
		}
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
