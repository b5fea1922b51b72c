package driver

import (
	"context"
	"io"
)

// The media family's contract (package store's media.go is the front).
// The front checks every item before a backend sees it: the id is the
// hex SHA-256 of the data, the type one of abi.MediaTypes, the size the
// data's length and at most abi.MaxMediaBytes. A backend keeps the rows
// and the bytes, each item's bytes readable only once the whole item is
// committed, and the organization's usage in the transaction of every
// write.

// MediaItem is a media item as stored; At is unix nanoseconds. Module and
// User are who stored it first.
type MediaItem struct {
	Org, ID, Type string
	Size          int64
	Width, Height int
	Module, User  string
	At            int64
}

// MediaUsage is what an organization stores in media: items and their
// bytes.
type MediaUsage struct {
	Items, Bytes int64
}

// MediaFilter selects an organization's items for MediaList: of Module
// when it is not empty, newest first (At, then ID, descending), after
// (BeforeAt, BeforeID) in that order when HasBefore, at most Limit.
type MediaFilter struct {
	Org, Module string
	BeforeAt    int64
	BeforeID    string
	HasBefore   bool
	Limit       int
}

// MediaReader reads a stored item's bytes, from the first, seeking
// anywhere within them (a Range request).
type MediaReader interface {
	io.ReadSeekCloser
}

// MediaBackend is what a backend implements for the media family. It is
// separate from Backend, as DocumentBackend is, so that adding it touched
// no other contract; the front reaches it with a type assertion, and both
// backends of this repository assert that they implement it.
type MediaBackend interface {
	// MediaPut stores it with its bytes, data, unless it.Org already
	// holds an item of it.ID: then it returns that item and created
	// false, and writes nothing. Otherwise, when quota > 0 and
	// OverQuota(quota, inUse, it.Size) holds, it refuses with
	// ErrOverQuota and writes nothing. The check and the write are one
	// transaction, atomic across processes, and no reader sees the row
	// before the bytes are whole. It returns the organization's bytes in
	// use as it read them, also when it refuses.
	MediaPut(ctx context.Context, it MediaItem, data []byte, quota int64) (stored MediaItem, created bool, inUse int64, err error)
	// MediaGet returns org's item id (ErrNotFound when org has none).
	MediaGet(ctx context.Context, org, id string) (*MediaItem, error)
	// MediaOpen returns org's item id and a reader of its bytes
	// (ErrNotFound when org has none). The caller closes the reader.
	MediaOpen(ctx context.Context, org, id string) (*MediaItem, MediaReader, error)
	// MediaList returns the items f selects.
	MediaList(ctx context.Context, f MediaFilter) ([]MediaItem, error)
	// MediaDelete deletes org's item id and its bytes; deleted is false
	// when org had none. A reader already open may fail.
	MediaDelete(ctx context.Context, org, id string) (deleted bool, err error)
	// MediaUsage is what org stores, kept in each write's transaction.
	MediaUsage(ctx context.Context, org string) (MediaUsage, error)
}
