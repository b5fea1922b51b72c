package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// moat serve's sessions across replicas: the images of paused sessions
// (SessionImages), the replicas that serve and where their peers reach
// them (ReplicaBeat), and which replica holds each live session
// (SessionRecord). A session's memory lives in one replica's process;
// these let every replica answer for it (docs/RATIONALE.md, "A session
// lives on one replica, and every replica answers for it").

// Bounds of what the session storage accepts.
const (
	// DefaultMaxImageBytes bounds an image when SessionImages is given
	// no bound of its own.
	DefaultMaxImageBytes = 1 << 30
	// ImageChunkBytes is the bytes of an image's chunk: an upload or a
	// read holds one chunk in memory, never the image. An image records
	// its chunk size, so changing this leaves stored images readable.
	ImageChunkBytes = 1 << 20
	// imageUploadGrace is how long an upload may run before another
	// PutImage sweeps its chunks as a dead replica's.
	imageUploadGrace = time.Hour
	// MaxSessionInfoBytes bounds the Info a directory entry keeps.
	MaxSessionInfoBytes = 64 << 10
	// MaxReplicaURLBytes bounds a replica's advertised URL.
	MaxReplicaURLBytes = 2048
	// maxSessionsOf bounds SessionsOf.
	maxSessionsOf = 1000
)

// The errors of the session storage. They come wrapped; test with
// errors.Is.
var (
	// ErrSessionStorage: the backend does not implement
	// driver.SessionBackend.
	ErrSessionStorage = errors.New("the store's backend keeps no sessions (driver.SessionBackend)")
	// ErrImageTooLarge: PutImage read more than its bound.
	ErrImageTooLarge = errors.New("the session image exceeds its bound")
	// ErrReplicaNotFound, ErrSessionEntryNotFound: no such row.
	ErrReplicaNotFound      = errors.New("no such replica")
	ErrSessionEntryNotFound = errors.New("no such session in the directory")
)

var storeKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

func (s *Store) sessionBackend(op string) (driver.SessionBackend, error) {
	b, ok := s.b.(driver.SessionBackend)
	if !ok {
		return nil, fmt.Errorf("store: %s on %s: %w", op, s.b.Location(), ErrSessionStorage)
	}
	return b, nil
}

// checkOwner checks the (org, id) an image or entry is stored under:
// both name rows, never paths, but are bounded and of a plain alphabet
// so that a hostile id cannot make a key no other call can name.
func checkOwner(op, org, id string) error {
	if org == "" || len(org) > 256 {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: org must be 1 to 256 bytes (have %d)", op, len(org))
	}
	if !storeKeyPattern.MatchString(id) {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: id %.140q must be 1 to 128 letters, digits, '_', '.' or '-'", op, id)
	}
	return nil
}

// SessionImages stores the images of paused sessions, each under its
// organization and session id. Its methods are the method set of
// server/sessions.Images:
//
//	var _ sessions.Images = (*store.SessionImages)(nil)
//
// (the guard lives in the package that defines the interface, which
// imports this one).
type SessionImages struct {
	s        *Store
	maxBytes int64
}

// SessionImages returns the image storage of s, refusing images larger
// than maxBytes (0: DefaultMaxImageBytes).
func (s *Store) SessionImages(maxBytes int64) *SessionImages {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxImageBytes
	}
	return &SessionImages{s: s, maxBytes: maxBytes}
}

// MaxBytes is the bound of one image.
func (im *SessionImages) MaxBytes() int64 { return im.maxBytes }

// PutImage stores what image yields as the image of org's session id,
// replacing the one stored before only once the new one is whole: a
// reader (another replica resuming) sees the old image or the new, never
// part of one. It reads image a chunk at a time and refuses, with
// ErrImageTooLarge and nothing stored, an image past the bound.
func (im *SessionImages) PutImage(ctx context.Context, org, id string, image io.Reader) error {
	const op = "session.image_put"
	if err := checkOwner(op, org, id); err != nil {
		return err
	}
	b, err := im.s.sessionBackend(op)
	if err != nil {
		return err
	}
	now := time.Now()
	// Uploads that a replica began and never finished (it died) are
	// swept by the next put of any replica.
	if _, err := b.ImageSweep(ctx, now.Add(-imageUploadGrace).UnixNano()); err != nil {
		return fmt.Errorf("store: %s %s/%s: sweep dead uploads: %w", op, org, id, err)
	}
	gen, err := newGen()
	if err != nil {
		return err
	}
	if err := b.ImageBegin(ctx, org, id, gen, now.UnixNano()); err != nil {
		return fmt.Errorf("store: %s %s/%s: %w", op, org, id, err)
	}
	committed := false
	defer func() {
		if !committed {
			// The caller's context may be what ended the upload; the
			// chunks go all the same.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			b.ImageAbort(actx, gen)
		}
	}()
	buf := make([]byte, ImageChunkBytes)
	var size int64
	for seq := 0; ; seq++ {
		n, rerr := io.ReadFull(image, buf)
		if n > 0 {
			size += int64(n)
			if size > im.maxBytes {
				return fmt.Errorf("store: %s %s/%s: more than %d bytes: %w", op, org, id, im.maxBytes, ErrImageTooLarge)
			}
			if err := b.ImageChunk(ctx, gen, seq, buf[:n]); err != nil {
				return fmt.Errorf("store: %s %s/%s: chunk %d: %w", op, org, id, seq, err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("store: %s %s/%s: read the image: %w", op, org, id, rerr)
		}
	}
	if err := b.ImageCommit(ctx, driver.ImageRow{Org: org, ID: id, Gen: gen, Size: size, Chunk: ImageChunkBytes, At: time.Now().UnixNano()}); err != nil {
		return fmt.Errorf("store: %s %s/%s: commit: %w", op, org, id, err)
	}
	committed = true
	return nil
}

func newGen() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// OpenImage returns a reader of the image of org's session id, which
// reads one chunk at a time; an error wrapping fs.ErrNotExist when there
// is none. A reader whose image is replaced or deleted meanwhile fails
// (it never mixes two images).
func (im *SessionImages) OpenImage(ctx context.Context, org, id string) (io.ReadCloser, error) {
	const op = "session.image_open"
	if err := checkOwner(op, org, id); err != nil {
		return nil, err
	}
	b, err := im.s.sessionBackend(op)
	if err != nil {
		return nil, err
	}
	r, err := b.ImageGet(ctx, org, id)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("store: %s %s/%s: no image: %w", op, org, id, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %s %s/%s: %w", op, org, id, err)
	}
	if r.Chunk <= 0 || r.Size < 0 {
		return nil, fmt.Errorf("store: %s %s/%s: the image records chunk %d and size %d", op, org, id, r.Chunk, r.Size)
	}
	return &imageReader{ctx: ctx, b: b, row: *r}, nil
}

// imageReader reads an image's chunks in order.
type imageReader struct {
	ctx  context.Context
	b    driver.SessionBackend
	row  driver.ImageRow
	seq  int
	read int64 // bytes of the chunks fetched
	buf  []byte
}

func (r *imageReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.read >= r.row.Size {
			return 0, io.EOF
		}
		data, err := r.b.ImageReadChunk(r.ctx, r.row.Gen, r.seq)
		if errors.Is(err, driver.ErrNotFound) {
			return 0, fmt.Errorf("store: session image %s/%s: chunk %d is gone (the image was replaced or deleted while read)", r.row.Org, r.row.ID, r.seq)
		}
		if err != nil {
			return 0, fmt.Errorf("store: session image %s/%s: chunk %d: %w", r.row.Org, r.row.ID, r.seq, err)
		}
		if want := min(int64(r.row.Chunk), r.row.Size-r.read); int64(len(data)) != want {
			return 0, fmt.Errorf("store: session image %s/%s: chunk %d holds %d bytes, not %d", r.row.Org, r.row.ID, r.seq, len(data), want)
		}
		r.buf, r.read = data, r.read+int64(len(data))
		r.seq++
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *imageReader) Close() error { r.buf = nil; return nil }

// DeleteImage deletes the image of org's session id; none is not an
// error.
func (im *SessionImages) DeleteImage(ctx context.Context, org, id string) error {
	const op = "session.image_delete"
	if err := checkOwner(op, org, id); err != nil {
		return err
	}
	b, err := im.s.sessionBackend(op)
	if err != nil {
		return err
	}
	if _, err := b.ImageDelete(ctx, org, id); err != nil {
		return fmt.Errorf("store: %s %s/%s: %w", op, org, id, err)
	}
	return nil
}

// HasImage reports whether org's session id has an image.
func (im *SessionImages) HasImage(ctx context.Context, org, id string) (bool, error) {
	const op = "session.image_get"
	if err := checkOwner(op, org, id); err != nil {
		return false, err
	}
	b, err := im.s.sessionBackend(op)
	if err != nil {
		return false, err
	}
	_, err = b.ImageGet(ctx, org, id)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("store: %s %s/%s: %w", op, org, id, err)
	}
	return true, nil
}

// Replica is a moat serve replica as registered in the store: URL is
// where its peers reach it, MAC what the replica wrote to authenticate
// the row (moat serve's; the store keeps it as given).
type Replica struct {
	ID, URL, MAC      string
	StartedAt, SeenAt time.Time
}

func replicaOf(r driver.ReplicaRow) Replica {
	return Replica{ID: r.ID, URL: r.URL, MAC: r.MAC, StartedAt: time.Unix(0, r.StartedAt).UTC(), SeenAt: time.Unix(0, r.SeenAt).UTC()}
}

// ReplicaBeat registers r, or records that it is alive at r.SeenAt.
func (s *Store) ReplicaBeat(ctx context.Context, r Replica) error {
	const op = "replica.beat"
	if !storeKeyPattern.MatchString(r.ID) {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: id %.140q must be 1 to 128 letters, digits, '_', '.' or '-'", op, r.ID)
	}
	if r.URL == "" || len(r.URL) > MaxReplicaURLBytes || len(r.MAC) > 256 {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: url must be 1 to %d bytes and mac at most 256", op, MaxReplicaURLBytes)
	}
	b, err := s.sessionBackend(op)
	if err != nil {
		return err
	}
	if err := b.ReplicaBeat(ctx, driver.ReplicaRow{ID: r.ID, URL: r.URL, MAC: r.MAC, StartedAt: r.StartedAt.UnixNano(), SeenAt: r.SeenAt.UnixNano()}); err != nil {
		return fmt.Errorf("store: %s %s: %w", op, r.ID, err)
	}
	return nil
}

// Replica returns replica id, or an error wrapping ErrReplicaNotFound.
func (s *Store) Replica(ctx context.Context, id string) (*Replica, error) {
	const op = "replica.get"
	b, err := s.sessionBackend(op)
	if err != nil {
		return nil, err
	}
	r, err := b.ReplicaGet(ctx, id)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("store: %s %.140s: %w", op, id, ErrReplicaNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %s %.140s: %w", op, id, err)
	}
	out := replicaOf(*r)
	return &out, nil
}

// ReplicaDelete deletes replica id (a replica stopping).
func (s *Store) ReplicaDelete(ctx context.Context, id string) error {
	const op = "replica.delete"
	b, err := s.sessionBackend(op)
	if err != nil {
		return err
	}
	if err := b.ReplicaDelete(ctx, id); err != nil {
		return fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	return nil
}

// Replicas lists the replicas seen within ttl before now, and deletes
// those not seen for ten times ttl.
func (s *Store) Replicas(ctx context.Context, now time.Time, ttl time.Duration) ([]Replica, error) {
	const op = "replica.list"
	b, err := s.sessionBackend(op)
	if err != nil {
		return nil, err
	}
	rows, err := b.Replicas(ctx, now.Add(-ttl).UnixNano(), now.Add(-10*ttl).UnixNano())
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", op, err)
	}
	out := make([]Replica, len(rows))
	for i, r := range rows {
		out[i] = replicaOf(r)
	}
	return out, nil
}

// SessionEntry is a session in the directory: who owns it, the replica
// holding it live ("" once it is paused: its image is in the store), and
// its Info as it was made, as JSON.
type SessionEntry struct {
	ID, Org, User, Replica string
	Info                   json.RawMessage
	CreatedAt, UpdatedAt   time.Time
}

func entryOf(r driver.SessionRow) SessionEntry {
	return SessionEntry{ID: r.ID, Org: r.Org, User: r.User, Replica: r.Replica, Info: json.RawMessage(r.Info),
		CreatedAt: time.Unix(0, r.CreatedAt).UTC(), UpdatedAt: time.Unix(0, r.UpdatedAt).UTC()}
}

// SessionRecord inserts e or replaces the entry of e.ID.
func (s *Store) SessionRecord(ctx context.Context, e SessionEntry) error {
	const op = "session.record"
	if err := checkOwner(op, e.Org, e.ID); err != nil {
		return err
	}
	if len(e.User) > 256 || len(e.Replica) > 128 {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: user at most 256 bytes, replica at most 128", op)
	}
	if len(e.Info) > MaxSessionInfoBytes || (len(e.Info) > 0 && !json.Valid(e.Info)) {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: info must be JSON of at most %d bytes (have %d)", op, MaxSessionInfoBytes, len(e.Info))
	}
	b, err := s.sessionBackend(op)
	if err != nil {
		return err
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = time.Now()
	}
	if e.UpdatedAt.IsZero() {
		e.UpdatedAt = time.Now()
	}
	info := string(e.Info)
	if info == "" {
		info = "{}"
	}
	if err := b.SessionPut(ctx, driver.SessionRow{ID: e.ID, Org: e.Org, User: e.User, Replica: e.Replica, Info: info,
		CreatedAt: e.CreatedAt.UnixNano(), UpdatedAt: e.UpdatedAt.UnixNano()}); err != nil {
		return fmt.Errorf("store: %s %s: %w", op, e.ID, err)
	}
	return nil
}

// SessionEntry returns session id's entry, or an error wrapping
// ErrSessionEntryNotFound.
func (s *Store) SessionEntry(ctx context.Context, id string) (*SessionEntry, error) {
	const op = "session.entry"
	b, err := s.sessionBackend(op)
	if err != nil {
		return nil, err
	}
	r, err := b.SessionGet(ctx, id)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("store: %s %.140s: %w", op, id, ErrSessionEntryNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %s %.140s: %w", op, id, err)
	}
	e := entryOf(*r)
	return &e, nil
}

// SessionForget deletes session id's entry if replica holds it
// (replica "": whoever does), so that a replica ending a session cannot
// take the entry of one another replica resumed meanwhile.
func (s *Store) SessionForget(ctx context.Context, id, replica string) (bool, error) {
	const op = "session.forget"
	b, err := s.sessionBackend(op)
	if err != nil {
		return false, err
	}
	ok, err := b.SessionDelete(ctx, id, replica)
	if err != nil {
		return false, fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	return ok, nil
}

// SessionSweep deletes the entries of sessions whose replica stopped
// (no longer registered) last updated before before: they say "the
// replica stopped" to a caller until then. Paused entries stay.
func (s *Store) SessionSweep(ctx context.Context, before time.Time) (int, error) {
	const op = "session.sweep"
	b, err := s.sessionBackend(op)
	if err != nil {
		return 0, err
	}
	n, err := b.SessionSweep(ctx, before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("store: %s: %w", op, err)
	}
	return n, nil
}

// SessionsOf lists the entries of (org, user), oldest first (at most
// 1000).
func (s *Store) SessionsOf(ctx context.Context, org, user string) ([]SessionEntry, error) {
	const op = "session.list"
	b, err := s.sessionBackend(op)
	if err != nil {
		return nil, err
	}
	rows, err := b.SessionsOf(ctx, org, user, maxSessionsOf)
	if err != nil {
		return nil, fmt.Errorf("store: %s %s: %w", op, org, err)
	}
	out := make([]SessionEntry, len(rows))
	for i, r := range rows {
		out[i] = entryOf(r)
	}
	return out, nil
}
