package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/moat-sandbox/moat/host/store/driver"
)

const moduleVersionColumns = `v.org, v.name, v.digest, v.version, v.size, v.manifest, v.signature, v.uploaded_by, v.uploaded_at, m.digest IS NOT NULL`

func scanModuleRow(r rowScanner) (driver.ModuleRow, error) {
	var v driver.ModuleRow
	err := r.Scan(&v.Org, &v.Name, &v.Digest, &v.Version, &v.Size, &v.Manifest, &v.Signature, &v.UploadedBy, &v.UploadedAt, &v.Current)
	return v, err
}

func collectModuleRows(rows *sql.Rows, err error) ([]driver.ModuleRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []driver.ModuleRow{}
	for rows.Next() {
		v, err := scanModuleRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ModulePut implements driver.Backend. The IMMEDIATE transaction holds the
// file's write lock, which serializes it with every other module write.
func (d *DB) ModulePut(ctx context.Context, v driver.ModuleRow, plan driver.PrunePlan, blobsBefore int64) (pruned []driver.ModuleRow, orphans []string, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
INSERT INTO module_versions (org, name, digest, version, size, manifest, signature, uploaded_by, uploaded_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (org, name, digest) DO UPDATE SET version = excluded.version, size = excluded.size, manifest = excluded.manifest,
	signature = excluded.signature, uploaded_by = excluded.uploaded_by, uploaded_at = excluded.uploaded_at`,
			v.Org, v.Name, v.Digest, v.Version, v.Size, v.Manifest, v.Signature, v.UploadedBy, v.UploadedAt); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `
INSERT INTO modules (org, name, digest, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (org, name) DO UPDATE SET digest = excluded.digest, updated_at = excluded.updated_at`,
			v.Org, v.Name, v.Digest, v.UploadedAt); err != nil {
			return err
		}
		// Newest first, so that the per-module rule keeps the head of
		// each module's list and the organization-wide rule takes from
		// the tail.
		all, err := collectModuleRows(tx.QueryContext(ctx, `
SELECT `+moduleVersionColumns+`
FROM module_versions v LEFT JOIN modules m USING (org, name, digest)
WHERE v.org = ? ORDER BY v.uploaded_at DESC, v.name, v.digest`, v.Org))
		if err != nil {
			return fmt.Errorf("prune: %w", err)
		}
		drop, err := plan(all)
		if err != nil {
			return err
		}
		for _, i := range drop {
			p := all[i]
			if _, err := tx.ExecContext(ctx, `DELETE FROM module_versions WHERE org = ? AND name = ? AND digest = ?`, p.Org, p.Name, p.Digest); err != nil {
				return fmt.Errorf("prune: %w", err)
			}
			p.Manifest, p.Signature = nil, nil
			pruned = append(pruned, p)
		}
		orphans, err = dropOrphans(ctx, tx, pruned, blobsBefore)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	d.wake()
	return pruned, orphans, nil
}

// dropOrphans returns the digests of vs that no version of any module of
// any organization refers to any more, and deletes their blobs written
// before blobsBefore.
func dropOrphans(ctx context.Context, tx *sql.Tx, vs []driver.ModuleRow, blobsBefore int64) ([]string, error) {
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
			if _, err := tx.ExecContext(ctx, `DELETE FROM module_blobs WHERE digest = ? AND written_at < ?`, v.Digest, blobsBefore); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// ModuleDelete implements driver.Backend.
func (d *DB) ModuleDelete(ctx context.Context, org, name string, blobsBefore int64) (orphans []string, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT digest FROM module_versions WHERE org = ? AND name = ?`, org, name)
		if err != nil {
			return err
		}
		var vs []driver.ModuleRow
		for rows.Next() {
			var v driver.ModuleRow
			if err := rows.Scan(&v.Digest); err != nil {
				rows.Close()
				return err
			}
			vs = append(vs, v)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(vs) == 0 {
			return driver.ErrNotFound
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM modules WHERE org = ? AND name = ?`, org, name); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM module_versions WHERE org = ? AND name = ?`, org, name); err != nil {
			return err
		}
		orphans, err = dropOrphans(ctx, tx, vs, blobsBefore)
		return err
	})
	if err != nil {
		return nil, err
	}
	d.wake()
	return orphans, nil
}

// ModuleDigestRefs implements driver.Backend.
func (d *DB) ModuleDigestRefs(ctx context.Context, digest string) (n int, err error) {
	err = d.r.QueryRowContext(ctx, `SELECT count(*) FROM module_versions WHERE digest = ?`, digest).Scan(&n)
	return n, err
}

// ModuleUsage implements driver.Backend.
func (d *DB) ModuleUsage(ctx context.Context, org string) (bytes int64, versions int, err error) {
	err = d.r.QueryRowContext(ctx, `SELECT coalesce(sum(size), 0), count(*) FROM module_versions WHERE org = ?`, org).Scan(&bytes, &versions)
	return bytes, versions, err
}

// Modules implements driver.Backend.
func (d *DB) Modules(ctx context.Context, org string) ([]driver.ModuleRow, error) {
	return collectModuleRows(d.r.QueryContext(ctx, `
SELECT `+moduleVersionColumns+` FROM modules m JOIN module_versions v USING (org, name, digest)
WHERE ? = '' OR m.org = ? ORDER BY m.org, m.name`, org, org))
}

// ModuleVersions implements driver.Backend.
func (d *DB) ModuleVersions(ctx context.Context, org, name string) ([]driver.ModuleRow, error) {
	return collectModuleRows(d.r.QueryContext(ctx, `
SELECT `+moduleVersionColumns+` FROM module_versions v LEFT JOIN modules m USING (org, name, digest)
WHERE v.org = ? AND v.name = ? ORDER BY v.uploaded_at DESC, v.digest`, org, name))
}

// ModuleBlobPut implements driver.Backend.
func (d *DB) ModuleBlobPut(ctx context.Context, digest string, data []byte, at int64) error {
	_, err := d.w.ExecContext(ctx, `
INSERT INTO module_blobs (digest, data, written_at) VALUES (?, coalesce(?, x''), ?)
ON CONFLICT (digest) DO UPDATE SET written_at = max(written_at, excluded.written_at)`, digest, data, at)
	return err
}

// ModuleBlobGet implements driver.Backend.
func (d *DB) ModuleBlobGet(ctx context.Context, org, digest string) (data []byte, err error) {
	err = d.r.QueryRowContext(ctx, `
SELECT b.data FROM module_blobs b
WHERE b.digest = ? AND EXISTS (SELECT 1 FROM module_versions v WHERE v.org = ? AND v.digest = b.digest)`, digest, org).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	if data == nil && err == nil {
		data = []byte{}
	}
	return data, err
}

// ModuleBlobSweep implements driver.Backend.
func (d *DB) ModuleBlobSweep(ctx context.Context, before int64) (gone []string, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `
DELETE FROM module_blobs WHERE written_at < ?
	AND NOT EXISTS (SELECT 1 FROM module_versions v WHERE v.digest = module_blobs.digest)
RETURNING digest`, before)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var dg string
			if err := rows.Scan(&dg); err != nil {
				return err
			}
			gone = append(gone, dg)
		}
		return rows.Err()
	})
	return gone, err
}
