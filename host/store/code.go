package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// CodeArtifact is compiled machine code that hosts sharing one store hand
// to each other, so that a module compiled by one replica loads on the
// others without compiling (host.Config.CodeKey). The store keeps it
// whole and unexamined: what Key stands for, and whether Data may be
// trusted, are the host's business (package host derives Key from
// everything that makes the code valid on a machine, and checks MAC
// before it writes a byte of Data anywhere). The store only bounds it.
type CodeArtifact struct {
	// Key names the artifact: 64 lowercase hex digits (a SHA-256).
	Key string
	// Data is the artifact itself, 1 to MaxCodeArtifactBytes bytes.
	Data []byte
	// MAC authenticates Key and Data: 32 bytes (an HMAC-SHA256). The
	// store stores it and never checks it.
	MAC []byte
	// StoredAt is when the artifact was stored; UsedAt when it was last
	// stored or fetched (the order in which CodePut evicts).
	StoredAt, UsedAt time.Time
}

// MaxCodeArtifactBytes bounds one artifact, stored or fetched: 256 MiB.
// wazero's compiled form of a module measured 3 to 4 times its
// WebAssembly (1.4 MB of QuickJS: 4.3 MB; the 3.5 MB Go guest: 13.7 MB),
// and moat serve accepts modules up to 64 MiB by default, so the bound
// holds the largest module the server takes by default with room; a
// larger artifact is not shared (its module is compiled by each host, as
// without sharing). The bound is also what a host may have to hold in
// memory for one fetch, whatever a writer of the database put there:
// CodeGet measures the stored bytes before it reads them.
const MaxCodeArtifactBytes = 256 << 20

// DefaultCodeBudget is the bytes of artifacts CodePut keeps when its
// caller gives no budget: 2 GiB, some 150 modules of the Go guest's size.
const DefaultCodeBudget = 2 << 30

// ErrCodeNotFound is returned (wrapped) by CodeGet for a key with no
// artifact.
var ErrCodeNotFound = errors.New("no such code artifact")

// ErrCodeTooLarge is wrapped by every CodeTooLargeError.
var ErrCodeTooLarge = errors.New("code artifact too large")

// CodeTooLargeError is an artifact over a bound: on CodePut, over
// MaxCodeArtifactBytes or the whole budget; on CodeGet, stored with more
// bytes than the caller's maxBytes (which only a writer of the database other
// than CodePut can have put there). It wraps ErrCodeTooLarge.
type CodeTooLargeError struct {
	Key       string
	Size, Max int64
}

func (e *CodeTooLargeError) Error() string {
	return fmt.Sprintf("code artifact %s is %d bytes, over the bound of %d", short(e.Key), e.Size, e.Max)
}

func (e *CodeTooLargeError) Unwrap() error { return ErrCodeTooLarge }

// CodeUsage is what the stored artifacts take.
type CodeUsage struct {
	Bytes     int64
	Artifacts int
}

// CodePut stores a, replacing the artifact stored under its key, and
// evicts the least recently used artifacts (by UsedAt, set to now for a)
// until those kept fit budget bytes (DefaultCodeBudget when budget <= 0),
// a itself always kept; it returns the keys it evicted. Puts from every
// process sharing the store are serialized, so the budget holds across
// replicas. An artifact over MaxCodeArtifactBytes or over the budget is a
// *CodeTooLargeError and changes nothing.
//
// Why least recently used and not "while a module version refers to it":
// an artifact is the compiled form of the bytes a host actually compiled,
// which are not always a stored module's (moat rewrites table limits
// before compiling; an interpreted plugin compiles its interpreter), so
// no column of the module tables names it. The bound keeps the table from
// growing; an artifact evicted while still wanted costs one compilation,
// after which it is stored again.
func (s *Store) CodePut(ctx context.Context, a CodeArtifact, budget int64) (evicted []string, err error) {
	if !validHexSHA256(a.Key) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "code put: key must be 64 lowercase hex digits (a SHA-256)")
	}
	if len(a.MAC) != 32 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "code put %s: mac is %d bytes; an HMAC-SHA256 is 32", short(a.Key), len(a.MAC))
	}
	if len(a.Data) == 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "code put %s: no data; an artifact is at least one byte", short(a.Key))
	}
	if budget <= 0 {
		budget = DefaultCodeBudget
	}
	if n := int64(len(a.Data)); n > MaxCodeArtifactBytes || n > budget {
		return nil, &CodeTooLargeError{Key: a.Key, Size: n, Max: min(budget, MaxCodeArtifactBytes)}
	}
	now := time.Now()
	if a.StoredAt.IsZero() {
		a.StoredAt = now
	}
	stored, ok := nanos(a.StoredAt)
	if !ok {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "code put %s: stored_at %s is out of range", short(a.Key), a.StoredAt)
	}
	used := stored
	if !a.UsedAt.IsZero() {
		if used, ok = nanos(a.UsedAt); !ok {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "code put %s: used_at %s is out of range", short(a.Key), a.UsedAt)
		}
	}
	row := driver.CodeRow{Key: a.Key, Data: a.Data, MAC: a.MAC, StoredAt: stored, UsedAt: used}
	evicted, err = s.b.CodePut(ctx, row, func(all []driver.CodeSize) []string {
		return planCodeEviction(a.Key, all, budget)
	})
	if err != nil {
		return nil, fmt.Errorf("store: code.put %s: %w", short(a.Key), err)
	}
	return evicted, nil
}

// planCodeEviction applies CodePut's rule to all, every stored artifact
// most recently used first: keep is kept and counted first, then the
// others in order while they fit budget; the rest are returned. An
// artifact that does not fit is evicted even when a smaller, older one
// after it would fit: least recently used first, strictly.
func planCodeEviction(keep string, all []driver.CodeSize, budget int64) []string {
	var used int64
	for _, a := range all {
		if a.Key == keep {
			used += a.Size
		}
	}
	var drop []string
	full := false
	for _, a := range all {
		if a.Key == keep {
			continue
		}
		if full || used+a.Size > budget {
			full = true
			drop = append(drop, a.Key)
			continue
		}
		used += a.Size
	}
	return drop
}

// CodeGet returns the artifact stored under key and marks it used now.
// An artifact of more than maxBytes (MaxCodeArtifactBytes when maxBytes <=
// 0 or above it) is not read: its size is measured in the database, and the
// call returns a *CodeTooLargeError, so a row a hostile writer made huge
// costs the caller no memory. No artifact wraps ErrCodeNotFound.
func (s *Store) CodeGet(ctx context.Context, key string, maxBytes int64) (CodeArtifact, error) {
	if !validHexSHA256(key) {
		return CodeArtifact{}, abi.Errorf(abi.CodeInvalidArgument, "code get: key must be 64 lowercase hex digits (a SHA-256)")
	}
	if maxBytes <= 0 || maxBytes > MaxCodeArtifactBytes {
		maxBytes = MaxCodeArtifactBytes
	}
	r, err := s.b.CodeGet(ctx, key, maxBytes, time.Now().UnixNano())
	if errors.Is(err, driver.ErrNotFound) {
		return CodeArtifact{}, fmt.Errorf("store: code.get %s: %w", short(key), ErrCodeNotFound)
	}
	if err != nil {
		return CodeArtifact{}, fmt.Errorf("store: code.get %s: %w", short(key), err)
	}
	if r.Size > maxBytes {
		return CodeArtifact{}, fmt.Errorf("store: code.get: %w", &CodeTooLargeError{Key: key, Size: r.Size, Max: maxBytes})
	}
	if int64(len(r.Data)) != r.Size {
		return CodeArtifact{}, fmt.Errorf("store: code.get %s: the backend returned %d bytes of an artifact of %d", short(key), len(r.Data), r.Size)
	}
	return CodeArtifact{Key: key, Data: r.Data, MAC: r.MAC, StoredAt: fromNanos(r.StoredAt), UsedAt: fromNanos(r.UsedAt)}, nil
}

// CodeUsage returns what the stored artifacts take, for metrics and
// tests.
func (s *Store) CodeUsage(ctx context.Context) (CodeUsage, error) {
	b, n, err := s.b.CodeUsage(ctx)
	if err != nil {
		return CodeUsage{}, fmt.Errorf("store: code.usage: %w", err)
	}
	return CodeUsage{Bytes: b, Artifacts: n}, nil
}
