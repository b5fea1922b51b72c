package driver

import "context"

// The storage of moat serve's sessions across replicas (package store's
// sessions.go is the front): paused sessions' images, the replicas that
// serve, and which replica holds each live session. It is an optional
// interface, as an op family's storage is, but no op reaches it: only
// moat serve does, so it is not in Families.

// ImageRow is a committed session image: Gen names its chunks, Chunk is
// the bytes of each but the last. Times are unix nanoseconds.
type ImageRow struct {
	Org, ID, Gen string
	Size         int64
	Chunk        int
	At           int64
}

// ReplicaRow is one moat serve replica as it registered itself: URL is
// where its peers reach it, MAC the front's authenticator of the row
// (the backend stores it as given). SeenAt is its last heartbeat.
type ReplicaRow struct {
	ID, URL, MAC      string
	StartedAt, SeenAt int64
}

// SessionRow is a session in the directory: the replica that holds it
// live, or Replica "" once it is paused (its image is in the store).
type SessionRow struct {
	ID, Org, User, Replica string
	Info                   string // the session's Info as JSON, as it was made
	CreatedAt, UpdatedAt   int64
}

// SessionBackend is what a backend implements for sessions across
// replicas.
//
// An image is written in chunks under a fresh generation (ImageBegin,
// ImageChunk, each its own short transaction, so a 1 GiB image never
// holds a write lock for the whole upload nor sits in memory), then made
// the image of (org, id) by ImageCommit, which deletes the chunks of the
// generation it replaces in the same transaction. A reader reads the
// generation ImageGet returned, chunk by chunk; a generation replaced or
// deleted while it reads fails its next chunk with ErrNotFound.
type SessionBackend interface {
	// ImageBegin records an upload of gen for (org, id) begun at at;
	// ImageSweep deletes the chunks of those never committed.
	ImageBegin(ctx context.Context, org, id, gen string, at int64) error
	// ImageChunk stores chunk seq of gen.
	ImageChunk(ctx context.Context, gen string, seq int, data []byte) error
	// ImageCommit makes r the image of (r.Org, r.ID), deleting the
	// chunks of the one it replaces and r.Gen's upload record.
	ImageCommit(ctx context.Context, r ImageRow) error
	// ImageAbort deletes gen's chunks and upload record.
	ImageAbort(ctx context.Context, gen string) error
	// ImageGet returns the image of (org, id), or ErrNotFound.
	ImageGet(ctx context.Context, org, id string) (*ImageRow, error)
	// ImageReadChunk returns chunk seq of gen, or ErrNotFound.
	ImageReadChunk(ctx context.Context, gen string, seq int) ([]byte, error)
	// ImageDelete deletes the image of (org, id) and its chunks;
	// deleted is false when there was none.
	ImageDelete(ctx context.Context, org, id string) (deleted bool, err error)
	// ImageSweep aborts the uploads begun before before and never
	// committed (a replica that died mid-upload), and returns how many.
	ImageSweep(ctx context.Context, before int64) (int, error)

	// ReplicaBeat inserts r or updates its URL, MAC and SeenAt.
	ReplicaBeat(ctx context.Context, r ReplicaRow) error
	// ReplicaGet returns replica id, or ErrNotFound.
	ReplicaGet(ctx context.Context, id string) (*ReplicaRow, error)
	// ReplicaDelete deletes replica id and, when it was there, marks
	// nothing else: its sessions' rows stay until they are deleted.
	ReplicaDelete(ctx context.Context, id string) error
	// Replicas lists the replicas seen at or after seenAfter, by id,
	// and deletes those seen before expireBefore.
	Replicas(ctx context.Context, seenAfter, expireBefore int64) ([]ReplicaRow, error)

	// SessionPut inserts r or replaces the row of r.ID.
	SessionPut(ctx context.Context, r SessionRow) error
	// SessionGet returns session id's row, or ErrNotFound.
	SessionGet(ctx context.Context, id string) (*SessionRow, error)
	// SessionDelete deletes session id's row if replica holds it
	// (replica "": whoever does); deleted is false otherwise.
	SessionDelete(ctx context.Context, id, replica string) (deleted bool, err error)
	// SessionSweep deletes the rows updated before before whose replica
	// is not registered (it stopped; paused rows, replica "", stay), and
	// returns how many.
	SessionSweep(ctx context.Context, before int64) (int, error)
	// SessionsOf lists the rows of (org, user), by CreatedAt then ID,
	// at most limit.
	SessionsOf(ctx context.Context, org, user string, limit int) ([]SessionRow, error)
}
