package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// The media family's storage: items per organization, content-addressed
// (an item's id is the hex SHA-256 of its bytes), so the same bytes
// stored twice by an organization are one item, and another organization
// storing them has an item of its own that the first cannot see: every
// method takes the org and the backend puts it into every statement.
//
// Where the bytes live is the backend's: SQLite keeps each item in a file
// under the store's directory (written to a temporary file, synced, and
// renamed into place inside the write transaction, so a half-written
// item is never found), PostgreSQL in the database in chunks, so that
// replicas share them with no shared disk (docs/RATIONALE.md says why).
//
// The front checks what the media family's host code (package
// host/media) already made sure of, because the store is also a library:
// the type is one of abi.MediaTypes, the size at most abi.MaxMediaBytes,
// and the id is computed here, never taken from a caller.

// MediaItem is a stored media item: who stored it first (Module, User),
// and when.
type MediaItem struct {
	ID            string
	Type          string
	Size          int64
	Width, Height int
	Module, User  string
	Created       time.Time
}

// MediaNew is an item to store: its bytes, what they are, and who stores
// them.
type MediaNew struct {
	Org, Module, User string
	Type              string
	Width, Height     int
	Data              []byte
}

// MediaUsage is what an organization stores in media.
type MediaUsage = driver.MediaUsage

// MediaReader reads an item's bytes; see driver.MediaReader.
type MediaReader = driver.MediaReader

// ErrMediaNotFound is what MediaGet, MediaOpen and MediaDelete wrap when
// the organization has no item of that id (whether or not another
// organization has one).
var ErrMediaNotFound = errors.New("no such media item")

// MaxMediaList bounds a page of MediaList.
const MaxMediaList = 100

// ValidMediaID reports whether id has the form of a media item's id: 64
// lowercase hex digits. Anything else (a path, "..", upper case) names no
// item, and is refused before it reaches a backend.
func ValidMediaID(id string) bool { return validHexSHA256(id) }

// MediaPut stores n for n.Org unless the organization already has an
// item of the same bytes, which it returns (created false) unchanged.
// A new item must fit within quota (the bytes of all the organization's
// items; quota <= 0 is none): one that does not is refused with an
// *abi.Error of abi.CodeResourceExhausted saying the quota, the bytes in
// use and the item's size, and nothing is stored. The check and the write
// are one transaction, so concurrent puts (from any process or replica)
// cannot together pass the quota.
func (s *Store) MediaPut(ctx context.Context, n MediaNew, quota int64) (item MediaItem, created bool, err error) {
	if err := mediaOrg(n.Org); err != nil {
		return MediaItem{}, false, err
	}
	if err := mediaName("module", n.Module); err != nil {
		return MediaItem{}, false, err
	}
	if err := mediaName("user", n.User); err != nil {
		return MediaItem{}, false, err
	}
	switch {
	case len(n.Data) == 0:
		return MediaItem{}, false, abi.Errorf(abi.CodeInvalidArgument, "media put: the data is empty")
	case len(n.Data) > abi.MaxMediaBytes:
		return MediaItem{}, false, abi.Errorf(abi.CodeTooLarge, "media put: the item is %d bytes; the limit is %d (abi.MaxMediaBytes)", len(n.Data), abi.MaxMediaBytes)
	case !slices.Contains(abi.MediaTypes, n.Type):
		return MediaItem{}, false, abi.Errorf(abi.CodeInvalidArgument, "media put: type %q is not one of abi.MediaTypes", n.Type)
	case n.Width < 0 || n.Height < 0:
		return MediaItem{}, false, abi.Errorf(abi.CodeInvalidArgument, "media put: width and height must not be negative")
	}
	mb, err := s.media()
	if err != nil {
		return MediaItem{}, false, err
	}
	sum := sha256.Sum256(n.Data)
	row := driver.MediaItem{
		Org: n.Org, ID: hex.EncodeToString(sum[:]), Type: n.Type, Size: int64(len(n.Data)),
		Width: n.Width, Height: n.Height, Module: n.Module, User: n.User, At: time.Now().UnixNano(),
	}
	stored, created, inUse, err := mb.MediaPut(ctx, row, n.Data, quota)
	if errors.Is(err, driver.ErrOverQuota) {
		return MediaItem{}, false, abi.Errorf(abi.CodeResourceExhausted,
			"the media quota of %d bytes for org %s would be exceeded (in use %d, this item adds %d)",
			quota, n.Org, inUse, row.Size)
	}
	if err != nil {
		return MediaItem{}, false, fmt.Errorf("store: media.put org=%q %s: %w", n.Org, short(row.ID), err)
	}
	return mediaItem(stored), created, nil
}

// MediaGet returns org's item id; ErrMediaNotFound (wrapped) when org has
// none.
func (s *Store) MediaGet(ctx context.Context, org, id string) (MediaItem, error) {
	mb, err := s.mediaCheck(org, id)
	if err != nil {
		return MediaItem{}, err
	}
	row, err := mb.MediaGet(ctx, org, id)
	if err != nil {
		return MediaItem{}, mediaErr("get", org, id, err)
	}
	return mediaItem(*row), nil
}

// MediaOpen returns org's item id and a reader of its bytes, which the
// caller closes; ErrMediaNotFound (wrapped) when org has none.
func (s *Store) MediaOpen(ctx context.Context, org, id string) (MediaItem, MediaReader, error) {
	mb, err := s.mediaCheck(org, id)
	if err != nil {
		return MediaItem{}, nil, err
	}
	row, r, err := mb.MediaOpen(ctx, org, id)
	if err != nil {
		return MediaItem{}, nil, mediaErr("open", org, id, err)
	}
	return mediaItem(*row), r, nil
}

// MediaRead returns org's item id with all its bytes, refused with an
// *abi.Error of abi.CodeTooLarge when the item is larger than max.
func (s *Store) MediaRead(ctx context.Context, org, id string, max int64) (MediaItem, []byte, error) {
	it, r, err := s.MediaOpen(ctx, org, id)
	if err != nil {
		return MediaItem{}, nil, err
	}
	defer r.Close()
	if it.Size > max {
		return MediaItem{}, nil, abi.Errorf(abi.CodeTooLarge, "media item %s is %d bytes; this read takes at most %d", short(id), it.Size, max)
	}
	data := make([]byte, it.Size)
	if _, err := io.ReadFull(r, data); err != nil {
		return MediaItem{}, nil, fmt.Errorf("store: media.read org=%q %s: %w", org, short(id), err)
	}
	return it, data, nil
}

// MediaDelete deletes org's item id and its bytes, and reports whether
// there was one.
func (s *Store) MediaDelete(ctx context.Context, org, id string) (bool, error) {
	mb, err := s.mediaCheck(org, id)
	if err != nil {
		return false, err
	}
	deleted, err := mb.MediaDelete(ctx, org, id)
	if err != nil {
		return false, fmt.Errorf("store: media.delete org=%q %s: %w", org, short(id), err)
	}
	return deleted, nil
}

// MediaList returns up to limit of org's items (0: MaxMediaList, at
// most MaxMediaList), newest first, of module when it is not empty,
// after the item after names (its id; "" for the first page).
func (s *Store) MediaList(ctx context.Context, org, module, after string, limit int) ([]MediaItem, error) {
	if err := mediaOrg(org); err != nil {
		return nil, err
	}
	if err := mediaName("module", module); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxMediaList {
		limit = MaxMediaList
	}
	mb, err := s.media()
	if err != nil {
		return nil, err
	}
	f := driver.MediaFilter{Org: org, Module: module, Limit: limit}
	if after != "" {
		prev, err := s.MediaGet(ctx, org, after)
		if err != nil {
			return nil, err
		}
		f.BeforeAt, f.BeforeID, f.HasBefore = prev.Created.UnixNano(), prev.ID, true
	}
	rows, err := mb.MediaList(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("store: media.list org=%q: %w", org, err)
	}
	out := make([]MediaItem, len(rows))
	for i, r := range rows {
		out[i] = mediaItem(r)
	}
	return out, nil
}

// MediaUsage is what org stores in media.
func (s *Store) MediaUsage(ctx context.Context, org string) (MediaUsage, error) {
	if err := mediaOrg(org); err != nil {
		return MediaUsage{}, err
	}
	mb, err := s.media()
	if err != nil {
		return MediaUsage{}, err
	}
	u, err := mb.MediaUsage(ctx, org)
	if err != nil {
		return MediaUsage{}, fmt.Errorf("store: media.usage org=%q: %w", org, err)
	}
	return u, nil
}

// mediaCheck refuses an empty org and an id that is not one, and returns
// the backend.
func (s *Store) mediaCheck(org, id string) (driver.MediaBackend, error) {
	if err := mediaOrg(org); err != nil {
		return nil, err
	}
	if !ValidMediaID(id) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "a media item id is 64 lowercase hex digits (the SHA-256 of its bytes)")
	}
	return s.media()
}

// maxMediaName bounds an organization's, module's or user's name as the
// media family stores it.
const maxMediaName = 256

// mediaOrg refuses an organization no item can belong to: empty, too
// long, not UTF-8, or holding a NUL (which PostgreSQL's text cannot).
func mediaOrg(org string) error {
	if org == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "media: org is empty; name the organization the item belongs to")
	}
	return mediaName("org", org)
}

// mediaName refuses a name (which may be empty) that is too long, not
// UTF-8, or holds a NUL.
func mediaName(field, s string) error {
	if len(s) > maxMediaName || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return abi.Errorf(abi.CodeInvalidArgument, "media: the %s name must be UTF-8 text of at most %d bytes without NUL", field, maxMediaName)
	}
	return nil
}

func mediaErr(op, org, id string, err error) error {
	if errors.Is(err, driver.ErrNotFound) {
		err = ErrMediaNotFound
	}
	return fmt.Errorf("store: media.%s org=%q %s: %w", op, org, short(id), err)
}

func mediaItem(r driver.MediaItem) MediaItem {
	return MediaItem{ID: r.ID, Type: r.Type, Size: r.Size, Width: r.Width, Height: r.Height,
		Module: r.Module, User: r.User, Created: time.Unix(0, r.At)}
}
