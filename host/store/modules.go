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

// ModulePut stores v as a version of its module and makes it the current
// one, in one transaction. Uploading a digest the module already has
// replaces that version's manifest and signature.
func (s *Store) ModulePut(ctx context.Context, v ModuleVersion) (err error) {
	if v.Org == "" || v.Name == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "module put: org and name must be set")
	}
	if !validHexSHA256(v.Digest) {
		return abi.Errorf(abi.CodeInvalidArgument, "module put: digest must be 64 lowercase hex digits (a SHA-256)")
	}
	if v.UploadedAt.IsZero() {
		v.UploadedAt = time.Now().UTC()
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: module.put %s/%s: %w", v.Org, v.Name, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, `
INSERT INTO module_versions (org, name, digest, version, size, manifest, signature, uploaded_by, uploaded_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (org, name, digest) DO UPDATE SET version = excluded.version, manifest = excluded.manifest,
	signature = excluded.signature, uploaded_by = excluded.uploaded_by, uploaded_at = excluded.uploaded_at`,
		v.Org, v.Name, v.Digest, v.Version, v.Size, v.Manifest, v.Signature, v.UploadedBy, v.UploadedAt.UnixNano()); err != nil {
		return fmt.Errorf("store: module.put %s/%s: %w", v.Org, v.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `
INSERT INTO modules (org, name, digest, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (org, name) DO UPDATE SET digest = excluded.digest, updated_at = excluded.updated_at`,
		v.Org, v.Name, v.Digest, v.UploadedAt.UnixNano()); err != nil {
		return fmt.Errorf("store: module.put %s/%s: %w", v.Org, v.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: module.put %s/%s: commit: %w", v.Org, v.Name, err)
	}
	return nil
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
	for _, d := range digests {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM module_versions WHERE digest = ?`, d).Scan(&n); err != nil {
			return nil, fmt.Errorf("store: module.delete %s/%s: %w", org, name, err)
		}
		if n == 0 {
			orphans = append(orphans, d)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("store: module.delete %s/%s: commit: %w", org, name, err)
	}
	return orphans, nil
}
