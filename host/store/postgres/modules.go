package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// moduleLock is the advisory lock every module write holds for its
// transaction ('moat' 'mod' in ASCII). Module writes are rare (uploads
// and deletions), so one lock for all organizations costs nothing, and
// it gives two things at once: pruning under a quota sees every version
// another replica stored, and the change log's seq order is commit order
// (see module_changes).
const moduleLock = 0x6d6f6174_6d6f64

const moduleVersionColumns = `v.org, v.name, v.digest, v.version, v.size, v.manifest, v.signature, v.uploaded_by, v.uploaded_at, m.digest IS NOT NULL`

func moduleDest(v *driver.ModuleRow) []any {
	return []any{&v.Org, &v.Name, &v.Digest, &v.Version, &v.Size, &v.Manifest, &v.Signature, &v.UploadedBy, &v.UploadedAt, &v.Current}
}

func collectModules(rows pgx.Rows, err error) ([]driver.ModuleRow, error) {
	if err != nil {
		return nil, err
	}
	out := []driver.ModuleRow{}
	var v driver.ModuleRow
	_, err = pgx.ForEachRow(rows, moduleDest(&v), func() error {
		out = append(out, v)
		return nil
	})
	return out, err
}

// ModulePut implements driver.Backend.
func (d *DB) ModulePut(ctx context.Context, v driver.ModuleRow, plan driver.PrunePlan, blobsBefore int64) (pruned []driver.ModuleRow, orphans []string, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(moduleLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO module_versions (org, name, digest, version, size, manifest, signature, uploaded_by, uploaded_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (org, name, digest) DO UPDATE SET version = excluded.version, size = excluded.size, manifest = excluded.manifest,
	signature = excluded.signature, uploaded_by = excluded.uploaded_by, uploaded_at = excluded.uploaded_at`,
			v.Org, v.Name, v.Digest, v.Version, v.Size, v.Manifest, v.Signature, v.UploadedBy, v.UploadedAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO modules (org, name, digest, updated_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (org, name) DO UPDATE SET digest = excluded.digest, updated_at = excluded.updated_at`,
			v.Org, v.Name, v.Digest, v.UploadedAt); err != nil {
			return err
		}
		all, err := collectModules(tx.Query(ctx, `
SELECT `+moduleVersionColumns+`
FROM module_versions v LEFT JOIN modules m USING (org, name, digest)
WHERE v.org = $1 ORDER BY v.uploaded_at DESC, v.name COLLATE "C", v.digest COLLATE "C"`, v.Org))
		if err != nil {
			return fmt.Errorf("prune: %w", err)
		}
		drop, err := plan(all)
		if err != nil {
			return err
		}
		for _, i := range drop {
			p := all[i]
			if _, err := tx.Exec(ctx, `DELETE FROM module_versions WHERE org = $1 AND name = $2 AND digest = $3`, p.Org, p.Name, p.Digest); err != nil {
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
	return pruned, orphans, nil
}

// dropOrphans returns the digests of vs no version refers to any more,
// and deletes their blobs written before blobsBefore.
func dropOrphans(ctx context.Context, tx pgx.Tx, vs []driver.ModuleRow, blobsBefore int64) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v.Digest] {
			continue
		}
		seen[v.Digest] = true
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM module_versions WHERE digest = $1`, v.Digest).Scan(&n); err != nil {
			return nil, err
		}
		if n == 0 {
			out = append(out, v.Digest)
			if _, err := tx.Exec(ctx, `DELETE FROM module_blobs WHERE digest = $1 AND written_at < $2`, v.Digest, blobsBefore); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// ModuleDelete implements driver.Backend.
func (d *DB) ModuleDelete(ctx context.Context, org, name string, blobsBefore int64) (orphans []string, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(moduleLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM modules WHERE org = $1 AND name = $2`, org, name); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `DELETE FROM module_versions WHERE org = $1 AND name = $2 RETURNING digest`, org, name)
		if err != nil {
			return err
		}
		var vs []driver.ModuleRow
		var dg string
		if _, err := pgx.ForEachRow(rows, []any{&dg}, func() error {
			vs = append(vs, driver.ModuleRow{Digest: dg})
			return nil
		}); err != nil {
			return err
		}
		if len(vs) == 0 {
			return driver.ErrNotFound
		}
		orphans, err = dropOrphans(ctx, tx, vs, blobsBefore)
		return err
	})
	return orphans, err
}

// ModuleDigestRefs implements driver.Backend.
func (d *DB) ModuleDigestRefs(ctx context.Context, digest string) (n int, err error) {
	err = d.pool.QueryRow(ctx, `SELECT count(*) FROM module_versions WHERE digest = $1`, digest).Scan(&n)
	return n, err
}

// ModuleUsage implements driver.Backend.
func (d *DB) ModuleUsage(ctx context.Context, org string) (bytes int64, versions int, err error) {
	err = d.pool.QueryRow(ctx, `SELECT coalesce(sum(size), 0)::bigint, count(*) FROM module_versions WHERE org = $1`, org).Scan(&bytes, &versions)
	return bytes, versions, err
}

// Modules implements driver.Backend.
func (d *DB) Modules(ctx context.Context, org string) ([]driver.ModuleRow, error) {
	return collectModules(d.pool.Query(ctx, `
SELECT `+moduleVersionColumns+` FROM modules m JOIN module_versions v USING (org, name, digest)
WHERE $1 = '' OR m.org = $1 ORDER BY m.org COLLATE "C", m.name COLLATE "C"`, org))
}

// ModuleVersions implements driver.Backend.
func (d *DB) ModuleVersions(ctx context.Context, org, name string) ([]driver.ModuleRow, error) {
	return collectModules(d.pool.Query(ctx, `
SELECT `+moduleVersionColumns+` FROM module_versions v LEFT JOIN modules m USING (org, name, digest)
WHERE v.org = $1 AND v.name = $2 ORDER BY v.uploaded_at DESC, v.digest COLLATE "C"`, org, name))
}

// ModuleBlobPut implements driver.Backend.
func (d *DB) ModuleBlobPut(ctx context.Context, digest string, data []byte, at int64) error {
	_, err := d.pool.Exec(ctx, `
INSERT INTO module_blobs AS b (digest, data, written_at) VALUES ($1, $2, $3)
ON CONFLICT (digest) DO UPDATE SET written_at = greatest(b.written_at, excluded.written_at)`, digest, data, at)
	return err
}

// ModuleBlobGet implements driver.Backend.
func (d *DB) ModuleBlobGet(ctx context.Context, org, digest string) (data []byte, err error) {
	err = d.pool.QueryRow(ctx, `
SELECT b.data FROM module_blobs b
WHERE b.digest = $1 AND EXISTS (SELECT 1 FROM module_versions v WHERE v.org = $2 AND v.digest = b.digest)`, digest, org).Scan(&data)
	if err != nil {
		return nil, notFound(err)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// ModuleBlobSweep implements driver.Backend. It holds moduleLock, so no
// version that refers to a blob is being written meanwhile.
func (d *DB) ModuleBlobSweep(ctx context.Context, before int64) (gone []string, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(moduleLock)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
DELETE FROM module_blobs b WHERE written_at < $1
	AND NOT EXISTS (SELECT 1 FROM module_versions v WHERE v.digest = b.digest)
RETURNING digest`, before)
		if err != nil {
			return err
		}
		var dg string
		_, err = pgx.ForEachRow(rows, []any{&dg}, func() error {
			gone = append(gone, dg)
			return nil
		})
		return err
	})
	return gone, err
}
