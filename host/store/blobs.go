package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// BlobGrace is how long ModuleBlobSweep keeps a module blob no version
// refers to: an upload stores the bytes (ModuleBlobPut) before the
// version that refers to them (ModulePut), and the sweep must not take
// them in between. A blob whose last version is pruned (ModulePut) or
// deleted (ModuleDelete) goes at once, in the same transaction, however
// young: kept for the grace, the blobs of pruned versions were outside
// every quota (an organization uploading 4 MiB versions in a loop kept an
// hour of them). An upload of the same bytes racing that deletion (another
// replica's, between its two calls) must check that its blob is there
// after its ModulePut and store it again if not, as moat serve does.
const BlobGrace = time.Hour

// ModuleBlobPut stores the bytes of a module under digest, their hex
// SHA-256, which is checked: a mismatch is an *abi.Error of
// abi.CodeInvalidArgument, so a blob can never be found under a digest
// that is not its own. Blobs are content-addressed and shared by every
// organization: storing bytes that are already there only marks them
// written now (see BlobGrace).
func (s *Store) ModuleBlobPut(ctx context.Context, digest string, data []byte) error {
	if !validHexSHA256(digest) {
		return abi.Errorf(abi.CodeInvalidArgument, "module blob put: digest must be 64 lowercase hex digits (a SHA-256)")
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != digest {
		return abi.Errorf(abi.CodeInvalidArgument, "module blob put: the bytes have sha256 %s, not the digest %s they are stored under", short(got), short(digest))
	}
	if data == nil {
		data = []byte{}
	}
	if err := s.b.ModuleBlobPut(ctx, digest, data, time.Now().UnixNano()); err != nil {
		return fmt.Errorf("store: module.blob_put %s: %w", short(digest), err)
	}
	return nil
}

// ModuleBlobGet returns the bytes stored under digest, if a version of a
// module of org refers to them: the blob table is shared, but an
// organization reads only the bytes of its own modules, so knowing a
// digest is not enough to fetch another organization's code. Otherwise
// (no such version, or the bytes were never stored) it wraps
// ErrModuleNotFound.
func (s *Store) ModuleBlobGet(ctx context.Context, org, digest string) ([]byte, error) {
	if org == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "module blob get: org is empty; name the organization whose module it is")
	}
	data, err := s.b.ModuleBlobGet(ctx, org, digest)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("store: module.blob_get %s %s: %w", org, short(digest), ErrModuleNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: module.blob_get %s %s: %w", org, short(digest), err)
	}
	return data, nil
}

// ModuleBlobSweep deletes the blobs no version refers to that were last
// written more than BlobGrace before now (the bytes of uploads that never
// got their version), and returns their digests.
func (s *Store) ModuleBlobSweep(ctx context.Context, now time.Time) ([]string, error) {
	gone, err := s.b.ModuleBlobSweep(ctx, now.Add(-BlobGrace).UnixNano())
	if err != nil {
		return nil, fmt.Errorf("store: module.blob_sweep: %w", err)
	}
	return gone, nil
}
