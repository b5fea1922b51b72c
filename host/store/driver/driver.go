// Package driver is the contract between package store and its storage
// backends, as database/sql/driver is for database/sql: the Backend
// interface a backend implements, the rows it stores, the errors it
// reports and the registry it joins.
//
// # Why a separate package
//
// Package store is the front every consumer uses (*store.Store): it owns
// the domain (scopes, validation, clamps, quota and pruning rules, time and
// JSON encodings) and calls a Backend only to run statements. A backend
// must not import store (store imports the default SQLite backend, so that
// every existing caller of store.Open keeps working with no new import),
// so what both sides share lives here, and nothing else does.
//
// # What a backend promises
//
// A backend stores what it is given and applies no policy of its own
// beyond the atomicity each method documents: every argument has been
// validated by the front (scopes are non-empty, keys are valid UTF-8,
// digests are hex SHA-256, times are unix nanoseconds). Every method is
// safe for concurrent use, also by several processes (or replicas) sharing
// one database: the quota of KVPutWithin, the claim of ConfirmationClaim,
// the pruning of ModulePut, the token bucket of RateTake, the eviction
// of CodePut and the quota of KnowledgeAdd are atomic across all of them.
// The package storetest holds every backend to this contract with one
// suite.
package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Errors a backend reports; the front maps them to its domain errors.
var (
	// ErrNotFound: the row the call names does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a row with the same unique key exists (a duplicate
	// insert), or a conditional update found the row changed.
	ErrConflict = errors.New("conflict")
	// ErrOverQuota: KVPutWithin refused a put by OverQuota.
	ErrOverQuota = errors.New("over quota")
)

// OverQuota is the kv quota rule, the one definition both backends apply
// inside their write transaction: a put that adds adds bytes (its key
// plus value, less the key and value it replaces) to a scope holding inUse
// bytes exceeds quota when it grows the scope past it. A put that does
// not grow the scope is always allowed, so a scope over a lowered quota
// can still shrink.
func OverQuota(quota, inUse, adds int64) bool { return adds > 0 && inUse+adds > quota }

// KeyRange is a range of kv keys in bytewise order: keys after From (or at
// it, when FromInclusive) and, when HasTo, before To.
type KeyRange struct {
	From          string
	FromInclusive bool
	To            string
	HasTo         bool
}

// AuditRow is an audit event as stored. Times are unix nanoseconds; Attrs
// is a JSON object, or "" for none (NULL).
type AuditRow struct {
	ID                              string
	Time                            int64
	Kind, Decision, CorrelationID   string
	Module, Action, Op, User, Org   string
	Rule, Reason, Code              string
	MutationID, TaskID, ModelCallID string
	DurationNS                      int64
	Attrs                           string
}

// AuditFilter selects audit rows: every non-empty string must match
// exactly; HasSince and HasUntil bound Time to [Since, Until). Rows come
// back newest first (time, then id, descending), at most Limit of them.
type AuditFilter struct {
	CorrelationID, Module, Decision, Kind, Org string
	User                                       string
	Since, Until                               int64
	HasSince, HasUntil                         bool
	Limit                                      int
}

// AuditSegment is a run of one organization's routine events (allowed
// invocations and ops) stored as one row: the store's front encodes them
// into Data and sums up what a query needs to skip the segment without
// decoding it (Org, the time range, Bloom, a filter over its correlation
// ids and modules). Times are unix nanoseconds. ID is assigned by the
// backend when the segment is stored; it only orders segments of the same
// TimeMax.
type AuditSegment struct {
	ID               int64
	Org              string
	TimeMin, TimeMax int64
	Count            int
	Bloom            []byte
	Data             []byte // empty in what AuditSegments returns
}

// AuditSegmentFilter selects segments: of Org when it is not empty,
// holding a time in [Since, Until) by their range when HasSince and
// HasUntil, and, when HasBefore, after (BeforeTime, BeforeID) in the
// order segments come back in: TimeMax, then ID, descending. At most
// Limit of them.
type AuditSegmentFilter struct {
	Org                  string
	Since, Until         int64
	HasSince, HasUntil   bool
	BeforeTime, BeforeID int64
	HasBefore            bool
	Limit                int
}

// ConfirmationRow is a confirmation as stored; times are unix
// nanoseconds and UsedAt is 0 while unused.
type ConfirmationRow struct {
	TokenHash, Org, User, Module, Action string
	Input                                []byte
	InputSHA256, Summary, Binding        string
	CreatedAt, ExpiresAt, UsedAt         int64
	// Roles is a JSON array: the requester's roles at request time.
	Roles string
	// DecidedBy and Decision are set by the claim that used the row.
	DecidedBy, Decision string
}

// APIKeyRow is an API key as stored: Roles and Scopes are JSON arrays;
// times are unix nanoseconds, 0 for none (RevokedAt while the key is
// valid, ExpiresAt for a key that does not expire, PrevUntil when no
// previous secret is valid).
type APIKeyRow struct {
	ID, Hash, Org, User, Roles, Name string
	CreatedAt, RevokedAt             int64
	Scopes                           string
	ExpiresAt                        int64
	PrevHash                         string
	PrevUntil                        int64
	LastUsedAt                       int64
	LastUsedAddr                     string
}

// ModuleRow is a module version as stored; UploadedAt is unix
// nanoseconds. Current is read, never written.
type ModuleRow struct {
	Org, Name, Digest, Version string
	Size                       int64
	Manifest, Signature        []byte
	UploadedBy                 string
	UploadedAt                 int64
	Current                    bool
}

// ModuleChange is one entry of the module change log: module Name of Org
// now has current version Digest, or was deleted (Digest ""). Seq rises
// with every change; At is unix nanoseconds.
type ModuleChange struct {
	Seq       int64
	Org, Name string
	Digest    string
	At        int64
}

// CodeRow is a compiled-code artifact as stored (store.CodeArtifact);
// times are unix nanoseconds. Size is the length of Data as the database
// measures it, read by CodeGet even when Data is not.
type CodeRow struct {
	Key              string
	Data, MAC        []byte
	StoredAt, UsedAt int64
	Size             int64
}

// CodeSize is an artifact's key and the bytes of its data.
type CodeSize struct {
	Key  string
	Size int64
}

// CodePlan decides, inside CodePut's transaction, which artifacts to
// evict: it is given every stored one (the new one included), most
// recently used first (UsedAt descending, then Key), and returns the keys
// to delete.
type CodePlan func(all []CodeSize) (evict []string)

// PrunePlan decides, inside ModulePut's transaction, which of an
// organization's versions (all of them, newest first) to delete. It
// returns their indexes, or an error that aborts the put.
type PrunePlan func(all []ModuleRow) (drop []int, err error)

// ConfirmationCheck decides, inside ConfirmationClaim's transaction and
// with the row locked, whether the claim may go ahead, and sets the
// row's DecidedBy and Decision. An error aborts the claim and leaves the
// row unchanged.
type ConfirmationCheck func(c *ConfirmationRow) error

// Backend runs the statements of one database: the host's own storage
// (kv, audit, confirmations, API keys, modules, compiled code, rates),
// which every backend has. Each op family's storage is an optional
// interface beside it (Families), so a backend stores a key with the
// methods below and nothing more. See the package comment for what every
// method promises; the front (package store) documents what each means.
type Backend interface {
	// Location names the database for messages: a file path, or a
	// URL without its password.
	Location() string
	Close() error

	KVGet(ctx context.Context, org, module, key string) (value []byte, found bool, err error)
	KVPut(ctx context.Context, org, module, key string, value []byte, at int64) error
	// KVPutWithin is KVPut refused, with ErrOverQuota, when
	// OverQuota(quota, inUse, adds) holds; the check and the write are
	// one transaction. It returns what it read, also when it refuses.
	KVPutWithin(ctx context.Context, org, module, key string, value []byte, at, quota int64) (inUse, adds int64, err error)
	KVDelete(ctx context.Context, org, module, key string) (deleted bool, err error)
	// KVList returns at most limit keys of the scope in r, in bytewise
	// order.
	KVList(ctx context.Context, org, module string, r KeyRange, limit int) ([]string, error)
	// KVUsage is the bytes (keys in UTF-8 plus values) the scope
	// stores, kept in the same transaction as every write.
	KVUsage(ctx context.Context, org, module string) (int64, error)

	// AuditInsert stores rows and segments in one transaction: all or
	// none. A row's duplicate ID is ErrConflict (wrapped); segments get
	// IDs of the backend's choosing.
	AuditInsert(ctx context.Context, rows []AuditRow, segs []AuditSegment) error
	AuditQuery(ctx context.Context, f AuditFilter) ([]AuditRow, error)
	// AuditSegments returns the headers of the segments f selects,
	// without their Data: TimeMax, then ID, descending.
	AuditSegments(ctx context.Context, f AuditSegmentFilter) ([]AuditSegment, error)
	// AuditSegmentData returns the Data of the segments with the given
	// IDs; an ID not stored is left out of the map.
	AuditSegmentData(ctx context.Context, ids []int64) (map[int64][]byte, error)

	// ConfirmationCreate deletes at most sweepLimit confirmations that
	// expired, or were used, before sweepBefore, and stores c; a
	// duplicate token hash is ErrConflict.
	ConfirmationCreate(ctx context.Context, c ConfirmationRow, sweepBefore int64, sweepLimit int) error
	// ConfirmationClaim locks the row of tokenHash (ErrNotFound when
	// there is none), passes it to check, and sets its UsedAt to
	// usedAt, and its DecidedBy and Decision to what check left in
	// them, if it is still unused (ErrConflict otherwise): at most one
	// claim of a token ever succeeds, across processes.
	ConfirmationClaim(ctx context.Context, tokenHash string, usedAt int64, check ConfirmationCheck) (*ConfirmationRow, error)
	// ConfirmationGet returns the row of tokenHash, used or not
	// (ErrNotFound when there is none).
	ConfirmationGet(ctx context.Context, tokenHash string) (*ConfirmationRow, error)
	// ConfirmationsPending lists org's unused confirmations that
	// expire after now, newest first.
	ConfirmationsPending(ctx context.Context, org string, now int64, limit int) ([]ConfirmationRow, error)

	APIKeyCreate(ctx context.Context, k APIKeyRow) error // duplicate id or hash: ErrConflict
	APIKeyByHash(ctx context.Context, hash string) (*APIKeyRow, error)
	APIKeys(ctx context.Context, org string) ([]APIKeyRow, error) // org "": every organization
	APIKeyRevoke(ctx context.Context, id string, at int64) error  // keeps the first revocation
	APIKeyByID(ctx context.Context, id string) (*APIKeyRow, error)
	// APIKeyRotate replaces the hash of the valid key id from oldHash to
	// newHash, keeping oldHash as prev_hash until prevUntil; a key whose
	// hash is no longer oldHash (rotated meanwhile), or revoked: ErrConflict.
	APIKeyRotate(ctx context.Context, id, oldHash, newHash string, prevUntil int64) error
	// APIKeyTouch records the latest use of key id, keeping a later one.
	APIKeyTouch(ctx context.Context, id string, at int64, addr string) error

	// ModulePut stores v and makes it current, then deletes the
	// versions plan picks, in one transaction serialized with every
	// other ModulePut and ModuleDelete of the organization. It returns
	// the deleted versions and the digests no version of any
	// organization refers to any more, and deletes the blobs of those
	// digests that were last written before blobsBefore.
	ModulePut(ctx context.Context, v ModuleRow, plan PrunePlan, blobsBefore int64) (pruned []ModuleRow, orphans []string, err error)
	// ModuleDelete deletes every version of the module (ErrNotFound
	// when it has none), as ModulePut deletes pruned ones.
	ModuleDelete(ctx context.Context, org, name string, blobsBefore int64) (orphans []string, err error)
	ModuleDigestRefs(ctx context.Context, digest string) (int, error)
	ModuleUsage(ctx context.Context, org string) (bytes int64, versions int, err error)
	Modules(ctx context.Context, org string) ([]ModuleRow, error) // current versions; org "": all
	ModuleVersions(ctx context.Context, org, name string) ([]ModuleRow, error)

	// ModuleBlobPut stores data under digest (already checked), or
	// marks an existing blob written at at.
	ModuleBlobPut(ctx context.Context, digest string, data []byte, at int64) error
	// ModuleBlobGet returns the blob of digest if a version of org
	// refers to it (ErrNotFound otherwise).
	ModuleBlobGet(ctx context.Context, org, digest string) ([]byte, error)
	// ModuleBlobSweep deletes the blobs no version refers to that were
	// last written before before, and returns their digests.
	ModuleBlobSweep(ctx context.Context, before int64) ([]string, error)

	// ModuleChanges returns the changes after seq, oldest first, at
	// most limit; ModuleChangeHead the last seq (0 when none).
	ModuleChanges(ctx context.Context, after int64, limit int) ([]ModuleChange, error)
	ModuleChangeHead(ctx context.Context) (int64, error)
	// ModuleWake returns a channel that receives (without blocking the
	// sender; a full channel drops the wake) soon after a module
	// change commits, as far as the backend can tell; the front polls
	// ModuleChanges as well, so a backend that cannot see every writer
	// still delivers every change. The channel is closed when ctx ends.
	ModuleWake(ctx context.Context) (<-chan struct{}, error)

	// CodePut stores r, replacing the row of its key, then deletes the
	// rows plan picks, in one transaction serialized with every other
	// CodePut, and returns the keys it deleted.
	CodePut(ctx context.Context, r CodeRow, plan CodePlan) (evicted []string, err error)
	// CodeGet returns the row of key (ErrNotFound when there is none)
	// with Size, the length of its data measured by the database, and
	// Data only when Size <= maxBytes; it sets UsedAt to at when that is
	// later.
	CodeGet(ctx context.Context, key string, maxBytes, at int64) (*CodeRow, error)
	// CodeUsage is the bytes of data and the number of rows stored.
	CodeUsage(ctx context.Context) (bytes int64, n int, err error)

	// RateTake takes one token from the bucket key, which holds at
	// most burst tokens and gains rate tokens per second, at time now
	// (unix nanoseconds; a clock that goes back refills nothing), in
	// one atomic statement. ok reports whether a token was taken;
	// tokens is what the bucket holds afterwards.
	RateTake(ctx context.Context, key string, rate float64, burst int, now int64) (ok bool, tokens float64, err error)

	// An op family's storage is not here: each family's is an optional
	// interface of its own (KnowledgeBackend, AIBackend, TaskBackend,
	// SecretBackend, DocumentBackend, MediaBackend), listed in Families.
}

// KVWrite is one kv write of a group commit (KVBatcher): a put (with a
// quota when Quota > 0) or, when Delete, a delete. The backend fills in
// the results: InUse and Adds as KVPutWithin returns them, Deleted as
// KVDelete does, and Err = ErrOverQuota when the quota refused the put
// (nothing else; a failing statement is a *WriteError of the batch).
type KVWrite struct {
	Org, Module, Key string
	Value            []byte // never nil for a put
	Delete           bool
	At, Quota        int64

	InUse, Adds int64
	Deleted     bool
	Err         error
}

// WriteError reports that write Index of a KVWriteBatch failed with Err
// and that the batch was rolled back, so nothing of it is committed.
type WriteError struct {
	Index int
	Err   error
}

func (e *WriteError) Error() string { return fmt.Sprintf("write %d of the batch: %v", e.Index, e.Err) }
func (e *WriteError) Unwrap() error { return e.Err }

// KVBatcher is implemented by a backend that can commit many kv writes in
// one transaction (group commit: a commit costs the same for one write or
// a hundred, and it is most of a small write's cost). The front then sends
// every KVPut, KVPutWithin and KVDelete through one writer that gathers
// the writes of concurrent callers into a batch and wakes each caller only
// after the batch's commit.
type KVBatcher interface {
	// KVWriteBatch applies writes in order, in one transaction, and
	// commits it: each write sees the ones before it (a quota counts
	// the bytes the earlier puts of the batch add), and a put its quota
	// refuses sets its Err and writes nothing, the others going ahead.
	// A write whose statement fails rolls the whole batch back and is
	// reported as a *WriteError naming it; any other error (begin,
	// commit) also means nothing of the batch is committed. The
	// atomicity the Backend methods promise across processes holds for
	// the batch as a whole.
	KVWriteBatch(ctx context.Context, writes []KVWrite) error
}

// OpenFunc opens the database dsn names. The front passes the string its
// caller gave store.Open.
type OpenFunc func(ctx context.Context, dsn string) (Backend, error)

var (
	mu       sync.RWMutex
	backends = map[string]OpenFunc{}
)

// Register makes a backend available to store.Open under a URL scheme
// ("sqlite", "postgres"). Backends call it from init, as database/sql
// drivers and caddy modules do, so a program picks its backends by what
// it imports. Registering a scheme twice panics: two backends would
// otherwise race to own it.
func Register(scheme string, open OpenFunc) {
	if scheme == "" || open == nil {
		panic("store/driver: Register with an empty scheme or a nil open function")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := backends[scheme]; dup {
		panic(fmt.Sprintf("store/driver: backend %q registered twice", scheme))
	}
	backends[scheme] = open
}

// Lookup returns the backend registered under scheme.
func Lookup(scheme string) (OpenFunc, bool) {
	mu.RLock()
	defer mu.RUnlock()
	open, ok := backends[scheme]
	return open, ok
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(backends))
	for s := range backends {
		out = append(out, s)
	}
	sort.Strings(out)
	return slices.Clip(out)
}
