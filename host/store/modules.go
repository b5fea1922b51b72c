package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// ModuleVersion is one uploaded version of a module of an organization:
// the module's digest (its content address), the manifest and signature it
// came with, and who uploaded it when. The WebAssembly bytes are a blob of
// the store, by digest (ModuleBlobPut, ModuleBlobGet), so that replicas on
// different machines need no shared disk; a caller may keep them elsewhere
// as well.
type ModuleVersion struct {
	Org, Name  string
	Digest     string // hex SHA-256 of the module bytes
	Version    string // the manifest's version, "" without a manifest
	Size       int64
	Manifest   []byte // moat.yaml as uploaded; nil without one
	Signature  []byte // the .minisig file; nil when unsigned
	UploadedBy string
	UploadedAt time.Time
	Current    bool // the version invocations use
}

// ErrModuleNotFound is returned (wrapped) for an unknown module or version.
var ErrModuleNotFound = errors.New("no such module")

func fromModuleRow(r *driver.ModuleRow) ModuleVersion {
	return ModuleVersion{
		Org: r.Org, Name: r.Name, Digest: r.Digest, Version: r.Version, Size: r.Size,
		Manifest: r.Manifest, Signature: r.Signature, UploadedBy: r.UploadedBy,
		UploadedAt: fromNanos(r.UploadedAt), Current: r.Current,
	}
}

func fromModuleRows(rows []driver.ModuleRow) []ModuleVersion {
	out := make([]ModuleVersion, len(rows))
	for i := range rows {
		out[i] = fromModuleRow(&rows[i])
	}
	return out
}

// ModuleQuota bounds the module versions an organization keeps. Zero
// fields are unlimited.
//
// The pruning rule, applied by ModulePut in the transaction that stores a
// version: first each module of the organization keeps its newest
// KeepPerModule versions (by upload time; the current one counts among
// them), and older ones are pruned; then, while the organization is over
// Bytes or Versions, its oldest version that is not current is pruned,
// whatever its module. A current version is never pruned. When the
// organization is still over a limit with only current versions left, the
// upload is refused and nothing changes.
type ModuleQuota struct {
	Bytes         int64 // the sizes of all versions of all the organization's modules
	Versions      int   // versions of all the organization's modules
	KeepPerModule int   // versions kept of each module, the current one included
}

// QuotaError is a version that does not fit the organization's quota even
// after pruning every version that may be pruned. It wraps ErrQuota.
type QuotaError struct {
	Org   string
	Limit string // "bytes" or "versions": which of ModuleQuota's limits
	Max   int64  // the limit
	Need  int64  // what the current versions and the new one take
}

// ErrQuota is wrapped by every QuotaError.
var ErrQuota = errors.New("module quota exceeded")

func (e *QuotaError) Error() string {
	return fmt.Sprintf("organization %s would keep %d module %s, over its quota of %d, even with every version that is not current pruned",
		e.Org, e.Need, e.Limit, e.Max)
}

func (e *QuotaError) Unwrap() error { return ErrQuota }

// Pruned is what ModulePut removed to make room: the versions, and the
// digests no module of any organization refers to any more (their bytes
// may be deleted; the store has deleted its own blob of each).
type Pruned struct {
	Versions []ModuleVersion
	Orphans  []string
}

// ModulePut stores v as a version of its module and makes it the current
// one, in one transaction, pruning old versions of v's organization to
// keep it within q (see ModuleQuota for the rule). Uploading a digest the
// module already has replaces that version's manifest and signature and
// makes it the newest. A version that does not fit even after pruning is a
// *QuotaError, and changes nothing. Concurrent puts and deletes of one
// organization are serialized by the backend, so the quota holds across
// processes.
func (s *Store) ModulePut(ctx context.Context, v ModuleVersion, q ModuleQuota) (_ Pruned, err error) {
	if v.Org == "" || v.Name == "" {
		return Pruned{}, abi.Errorf(abi.CodeInvalidArgument, "module put: org and name must be set")
	}
	if !validHexSHA256(v.Digest) {
		return Pruned{}, abi.Errorf(abi.CodeInvalidArgument, "module put: digest must be 64 lowercase hex digits (a SHA-256)")
	}
	if v.UploadedAt.IsZero() {
		v.UploadedAt = time.Now().UTC()
	}
	at, ok := nanos(v.UploadedAt)
	if !ok {
		return Pruned{}, abi.Errorf(abi.CodeInvalidArgument, "module put: uploaded_at %s is out of range", v.UploadedAt)
	}
	row := driver.ModuleRow{
		Org: v.Org, Name: v.Name, Digest: v.Digest, Version: v.Version, Size: v.Size,
		Manifest: v.Manifest, Signature: v.Signature, UploadedBy: v.UploadedBy, UploadedAt: at,
	}
	pruned, orphans, err := s.b.ModulePut(ctx, row, func(all []driver.ModuleRow) ([]int, error) {
		return planPrune(v.Org, all, q)
	}, math.MaxInt64)
	var qe *QuotaError
	if errors.As(err, &qe) {
		return Pruned{}, err
	}
	if err != nil {
		return Pruned{}, fmt.Errorf("store: module.put %s/%s: %w", v.Org, v.Name, err)
	}
	out := Pruned{Orphans: orphans}
	if len(pruned) > 0 {
		out.Versions = fromModuleRows(pruned)
	}
	return out, nil
}

// planPrune applies q to all, the versions of org newest first (see
// ModuleQuota), and returns the indexes of the versions to delete.
func planPrune(org string, all []driver.ModuleRow, q ModuleQuota) ([]int, error) {
	drop := make([]bool, len(all))
	var bytes int64
	count := 0
	seen := map[string]int{}
	for i, v := range all {
		seen[v.Name]++
		if q.KeepPerModule > 0 && seen[v.Name] > q.KeepPerModule && !v.Current {
			drop[i] = true
			continue
		}
		bytes += v.Size
		count++
	}
	over := func() bool {
		return q.Bytes > 0 && bytes > q.Bytes || q.Versions > 0 && count > q.Versions
	}
	for i := len(all) - 1; i >= 0 && over(); i-- {
		if !drop[i] && !all[i].Current {
			drop[i] = true
			bytes -= all[i].Size
			count--
		}
	}
	if q.Bytes > 0 && bytes > q.Bytes {
		return nil, &QuotaError{Org: org, Limit: "bytes", Max: q.Bytes, Need: bytes}
	}
	if q.Versions > 0 && count > q.Versions {
		return nil, &QuotaError{Org: org, Limit: "versions", Max: int64(q.Versions), Need: int64(count)}
	}
	var out []int
	for i, d := range drop {
		if d {
			out = append(out, i)
		}
	}
	return out, nil
}

// ModuleDigestRefs counts the versions, of any module of any organization,
// whose bytes are digest.
func (s *Store) ModuleDigestRefs(ctx context.Context, digest string) (int, error) {
	n, err := s.b.ModuleDigestRefs(ctx, digest)
	if err != nil {
		return 0, fmt.Errorf("store: module.refs %s: %w", short(digest), err)
	}
	return n, nil
}

// ModuleUsage is what an organization's stored modules take.
type ModuleUsage struct {
	Bytes    int64
	Versions int
}

// ModuleUsage returns what org's module versions take, for quota messages
// and metrics.
func (s *Store) ModuleUsage(ctx context.Context, org string) (ModuleUsage, error) {
	b, n, err := s.b.ModuleUsage(ctx, org)
	if err != nil {
		return ModuleUsage{}, fmt.Errorf("store: module.usage %s: %w", org, err)
	}
	return ModuleUsage{Bytes: b, Versions: n}, nil
}

// Modules lists the current version of every module of org (of every
// organization when org is empty), by organization and name.
func (s *Store) Modules(ctx context.Context, org string) ([]ModuleVersion, error) {
	rows, err := s.b.Modules(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("store: modules.list org=%q: %w", org, err)
	}
	return fromModuleRows(rows), nil
}

// ModuleVersions lists every version of module name of org, newest first.
// A module with no versions wraps ErrModuleNotFound.
func (s *Store) ModuleVersions(ctx context.Context, org, name string) ([]ModuleVersion, error) {
	rows, err := s.b.ModuleVersions(ctx, org, name)
	if err != nil {
		return nil, fmt.Errorf("store: module.versions %s/%s: %w", org, name, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("store: module.versions %s/%s: %w", org, name, ErrModuleNotFound)
	}
	return fromModuleRows(rows), nil
}

// ModuleDelete removes module name of org and all its versions. It
// returns the digests that no module of any organization refers to any
// more, so the caller can delete bytes it keeps elsewhere (the store
// deletes its own blobs of them, as ModulePut does). An unknown module
// wraps ErrModuleNotFound.
func (s *Store) ModuleDelete(ctx context.Context, org, name string) (orphans []string, err error) {
	orphans, err = s.b.ModuleDelete(ctx, org, name, math.MaxInt64)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, ErrModuleNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, err)
	}
	return orphans, nil
}
