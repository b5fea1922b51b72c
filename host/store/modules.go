package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// ModuleVersion is one uploaded version of a module of an organization:
// the module's digest (its content address), the manifest and signature it
// came with, and who uploaded it when. The WebAssembly bytes are kept by
// the caller (the server keeps them in its data directory by digest).
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

const moduleVersionColumns = `v.org, v.name, v.digest, v.version, v.size, v.manifest, v.signature, v.uploaded_by, v.uploaded_at, m.digest IS NOT NULL`

func scanModuleVersion(r rowScanner) (*ModuleVersion, error) {
	var (
		v  ModuleVersion
		at int64
	)
	if err := r.Scan(&v.Org, &v.Name, &v.Digest, &v.Version, &v.Size, &v.Manifest, &v.Signature, &v.UploadedBy, &at, &v.Current); err != nil {
		return nil, err
	}
	v.UploadedAt = fromNanos(at)
	return &v, nil
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
// may be deleted).
type Pruned struct {
	Versions []ModuleVersion
	Orphans  []string
}

// ModulePut stores v as a version of its module and makes it the current
// one, in one transaction, pruning old versions of v's organization to
// keep it within q (see ModuleQuota for the rule). Uploading a digest the
// module already has replaces that version's manifest and signature and
// makes it the newest. A version that does not fit even after pruning is a
// *QuotaError, and changes nothing.
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
	fail := func(err error) (Pruned, error) {
		return Pruned{}, fmt.Errorf("store: module.put %s/%s: %w", v.Org, v.Name, err)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, `
INSERT INTO module_versions (org, name, digest, version, size, manifest, signature, uploaded_by, uploaded_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (org, name, digest) DO UPDATE SET version = excluded.version, size = excluded.size, manifest = excluded.manifest,
	signature = excluded.signature, uploaded_by = excluded.uploaded_by, uploaded_at = excluded.uploaded_at`,
		v.Org, v.Name, v.Digest, v.Version, v.Size, v.Manifest, v.Signature, v.UploadedBy, v.UploadedAt.UnixNano()); err != nil {
		return fail(err)
	}
	if _, err := tx.ExecContext(ctx, `
INSERT INTO modules (org, name, digest, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (org, name) DO UPDATE SET digest = excluded.digest, updated_at = excluded.updated_at`,
		v.Org, v.Name, v.Digest, v.UploadedAt.UnixNano()); err != nil {
		return fail(err)
	}
	pruned, err := prune(ctx, tx, v.Org, q)
	if err != nil {
		return Pruned{}, err
	}
	if err := tx.Commit(); err != nil {
		return fail(fmt.Errorf("commit: %w", err))
	}
	return pruned, nil
}

// prune applies q to org's versions within tx (see ModuleQuota).
func prune(ctx context.Context, tx *sql.Tx, org string, q ModuleQuota) (Pruned, error) {
	fail := func(err error) (Pruned, error) {
		return Pruned{}, fmt.Errorf("store: module.prune %s: %w", org, err)
	}
	// Newest first, so that the per-module rule keeps the head of each
	// module's list and the organization-wide rule takes from the tail.
	rows, err := tx.QueryContext(ctx, `
SELECT v.name, v.digest, v.version, v.size, v.uploaded_by, v.uploaded_at, m.digest IS NOT NULL
FROM module_versions v LEFT JOIN modules m USING (org, name, digest)
WHERE v.org = ? ORDER BY v.uploaded_at DESC, v.name, v.digest`, org)
	if err != nil {
		return fail(err)
	}
	var all []ModuleVersion
	for rows.Next() {
		v := ModuleVersion{Org: org}
		var at int64
		if err := rows.Scan(&v.Name, &v.Digest, &v.Version, &v.Size, &v.UploadedBy, &at, &v.Current); err != nil {
			rows.Close()
			return fail(err)
		}
		v.UploadedAt = fromNanos(at)
		all = append(all, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
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
		return Pruned{}, &QuotaError{Org: org, Limit: "bytes", Max: q.Bytes, Need: bytes}
	}
	if q.Versions > 0 && count > q.Versions {
		return Pruned{}, &QuotaError{Org: org, Limit: "versions", Max: int64(q.Versions), Need: int64(count)}
	}
	var out Pruned
	for i, v := range all {
		if !drop[i] {
			continue
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM module_versions WHERE org = ? AND name = ? AND digest = ?`, org, v.Name, v.Digest); err != nil {
			return fail(err)
		}
		out.Versions = append(out.Versions, v)
	}
	out.Orphans, err = findOrphans(ctx, tx, out.Versions)
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// findOrphans returns the digests of vs that no version of any module of any
// organization refers to any more.
func findOrphans(ctx context.Context, tx *sql.Tx, vs []ModuleVersion) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v.Digest] {
			continue
		}
		seen[v.Digest] = true
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM module_versions WHERE digest = ?`, v.Digest).Scan(&n); err != nil {
			return nil, err
		}
		if n == 0 {
			out = append(out, v.Digest)
		}
	}
	return out, nil
}

// ModuleDigestRefs counts the versions, of any module of any organization,
// whose bytes are digest.
func (s *Store) ModuleDigestRefs(ctx context.Context, digest string) (int, error) {
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM module_versions WHERE digest = ?`, digest).Scan(&n); err != nil {
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
	var u ModuleUsage
	if err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(size), 0), count(*) FROM module_versions WHERE org = ?`, org).Scan(&u.Bytes, &u.Versions); err != nil {
		return ModuleUsage{}, fmt.Errorf("store: module.usage %s: %w", org, err)
	}
	return u, nil
}

// Modules lists the current version of every module of org (of every
// organization when org is empty), by organization and name.
func (s *Store) Modules(ctx context.Context, org string) ([]ModuleVersion, error) {
	rows, err := s.r.QueryContext(ctx, `
SELECT `+moduleVersionColumns+` FROM modules m JOIN module_versions v USING (org, name, digest)
WHERE ? = '' OR m.org = ? ORDER BY m.org, m.name`, org, org)
	if err != nil {
		return nil, fmt.Errorf("store: modules.list org=%q: %w", org, err)
	}
	return collectVersions(rows, "modules.list org="+org)
}

// ModuleVersions lists every version of module name of org, newest first.
// A module with no versions wraps ErrModuleNotFound.
func (s *Store) ModuleVersions(ctx context.Context, org, name string) ([]ModuleVersion, error) {
	rows, err := s.r.QueryContext(ctx, `
SELECT `+moduleVersionColumns+` FROM module_versions v LEFT JOIN modules m USING (org, name, digest)
WHERE v.org = ? AND v.name = ? ORDER BY v.uploaded_at DESC, v.digest`, org, name)
	if err != nil {
		return nil, fmt.Errorf("store: module.versions %s/%s: %w", org, name, err)
	}
	out, err := collectVersions(rows, "module.versions "+org+"/"+name)
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("store: module.versions %s/%s: %w", org, name, ErrModuleNotFound)
	}
	return out, err
}

func collectVersions(rows *sql.Rows, what string) ([]ModuleVersion, error) {
	defer rows.Close()
	out := []ModuleVersion{}
	for rows.Next() {
		v, err := scanModuleVersion(rows)
		if err != nil {
			return nil, fmt.Errorf("store: %s: %w", what, err)
		}
		out = append(out, *v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	return out, nil
}

// ModuleDelete removes module name of org and all its versions. It
// returns the digests that no module of any organization refers to any
// more, so the caller can delete their bytes. An unknown module wraps
// ErrModuleNotFound.
func (s *Store) ModuleDelete(ctx context.Context, org, name string) (orphans []string, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	rows, err := tx.QueryContext(ctx, `SELECT digest FROM module_versions WHERE org = ? AND name = ?`, org, name)
	if err != nil {
		return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, err)
	}
	var digests []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, err)
		}
		digests = append(digests, d)
	}
	rows.Close()
	if len(digests) == 0 {
		return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, ErrModuleNotFound)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM modules WHERE org = ? AND name = ?`, org, name); err != nil {
		return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM module_versions WHERE org = ? AND name = ?`, org, name); err != nil {
		return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, err)
	}
	vs := make([]ModuleVersion, len(digests))
	for i, d := range digests {
		vs[i].Digest = d
	}
	if orphans, err = findOrphans(ctx, tx, vs); err != nil {
		return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("store: module.delete %s/%s: commit: %w", org, name, err)
	}
	return orphans, nil
}
