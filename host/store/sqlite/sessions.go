package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// Sessions across replicas on SQLite (driver.SessionBackend): the same
// tables as on PostgreSQL. A file is one machine's, so on SQLite there
// is one replica; the images and the directory still work (a paused
// session resumes after a restart), and the routing finds every session
// local.

var _ driver.SessionBackend = (*DB)(nil)

// ImageBegin implements driver.SessionBackend.
func (d *DB) ImageBegin(ctx context.Context, org, id, gen string, at int64) error {
	_, err := d.w.ExecContext(ctx, `INSERT INTO session_image_uploads (gen, org, id, started_at) VALUES (?, ?, ?, ?)`, gen, org, id, at)
	if isConstraint(err) {
		return driver.ErrConflict
	}
	return err
}

// ImageChunk implements driver.SessionBackend.
func (d *DB) ImageChunk(ctx context.Context, gen string, seq int, data []byte) error {
	_, err := d.w.ExecContext(ctx, `INSERT INTO session_image_chunks (gen, seq, data) VALUES (?, ?, ?)`, gen, seq, data)
	if isConstraint(err) {
		return driver.ErrConflict
	}
	return err
}

// ImageCommit implements driver.SessionBackend.
func (d *DB) ImageCommit(ctx context.Context, r driver.ImageRow) error {
	return d.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM session_image_uploads WHERE gen = ?`, r.Gen)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return driver.ErrNotFound // aborted or swept meanwhile
		}
		var old string
		err = tx.QueryRowContext(ctx, `SELECT gen FROM session_images WHERE org = ? AND id = ?`, r.Org, r.ID).Scan(&old)
		switch {
		case err == nil:
			if _, err := tx.ExecContext(ctx, `DELETE FROM session_image_chunks WHERE gen = ?`, old); err != nil {
				return err
			}
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO session_images (org, id, gen, size, chunk, created_at) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (org, id) DO UPDATE SET gen = excluded.gen, size = excluded.size, chunk = excluded.chunk, created_at = excluded.created_at`,
			r.Org, r.ID, r.Gen, r.Size, r.Chunk, r.At)
		return err
	})
}

// ImageAbort implements driver.SessionBackend.
func (d *DB) ImageAbort(ctx context.Context, gen string) error {
	return d.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM session_image_chunks WHERE gen = ?`, gen); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM session_image_uploads WHERE gen = ?`, gen)
		return err
	})
}

// ImageGet implements driver.SessionBackend.
func (d *DB) ImageGet(ctx context.Context, org, id string) (*driver.ImageRow, error) {
	r := driver.ImageRow{Org: org, ID: id}
	err := d.r.QueryRowContext(ctx, `SELECT gen, size, chunk, created_at FROM session_images WHERE org = ? AND id = ?`, org, id).Scan(&r.Gen, &r.Size, &r.Chunk, &r.At)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// ImageReadChunk implements driver.SessionBackend.
func (d *DB) ImageReadChunk(ctx context.Context, gen string, seq int) ([]byte, error) {
	var data []byte
	err := d.r.QueryRowContext(ctx, `SELECT data FROM session_image_chunks WHERE gen = ? AND seq = ?`, gen, seq).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	return data, err
}

// ImageDelete implements driver.SessionBackend.
func (d *DB) ImageDelete(ctx context.Context, org, id string) (deleted bool, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		var gen string
		err := tx.QueryRowContext(ctx, `SELECT gen FROM session_images WHERE org = ? AND id = ?`, org, id).Scan(&gen)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM session_image_chunks WHERE gen = ?`, gen); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM session_images WHERE org = ? AND id = ?`, org, id); err != nil {
			return err
		}
		deleted = true
		return nil
	})
	return deleted, err
}

// ImageSweep implements driver.SessionBackend.
func (d *DB) ImageSweep(ctx context.Context, before int64) (n int, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT gen FROM session_image_uploads WHERE started_at < ?`, before)
		if err != nil {
			return err
		}
		var gens []string
		for rows.Next() {
			var g string
			if err := rows.Scan(&g); err != nil {
				rows.Close()
				return err
			}
			gens = append(gens, g)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, g := range gens {
			if _, err := tx.ExecContext(ctx, `DELETE FROM session_image_chunks WHERE gen = ?`, g); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM session_image_uploads WHERE gen = ?`, g); err != nil {
				return err
			}
		}
		n = len(gens)
		return nil
	})
	return n, err
}

// ReplicaBeat implements driver.SessionBackend.
func (d *DB) ReplicaBeat(ctx context.Context, r driver.ReplicaRow) error {
	_, err := d.w.ExecContext(ctx, `INSERT INTO replicas (id, url, mac, started_at, seen_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET url = excluded.url, mac = excluded.mac, seen_at = excluded.seen_at`, r.ID, r.URL, r.MAC, r.StartedAt, r.SeenAt)
	return err
}

// ReplicaGet implements driver.SessionBackend.
func (d *DB) ReplicaGet(ctx context.Context, id string) (*driver.ReplicaRow, error) {
	r := driver.ReplicaRow{ID: id}
	err := d.r.QueryRowContext(ctx, `SELECT url, mac, started_at, seen_at FROM replicas WHERE id = ?`, id).Scan(&r.URL, &r.MAC, &r.StartedAt, &r.SeenAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// ReplicaDelete implements driver.SessionBackend.
func (d *DB) ReplicaDelete(ctx context.Context, id string) error {
	_, err := d.w.ExecContext(ctx, `DELETE FROM replicas WHERE id = ?`, id)
	return err
}

// Replicas implements driver.SessionBackend.
func (d *DB) Replicas(ctx context.Context, seenAfter, expireBefore int64) ([]driver.ReplicaRow, error) {
	if _, err := d.w.ExecContext(ctx, `DELETE FROM replicas WHERE seen_at < ?`, expireBefore); err != nil {
		return nil, err
	}
	rows, err := d.r.QueryContext(ctx, `SELECT id, url, mac, started_at, seen_at FROM replicas WHERE seen_at >= ? ORDER BY id`, seenAfter)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.ReplicaRow
	for rows.Next() {
		var r driver.ReplicaRow
		if err := rows.Scan(&r.ID, &r.URL, &r.MAC, &r.StartedAt, &r.SeenAt); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// SessionPut implements driver.SessionBackend.
func (d *DB) SessionPut(ctx context.Context, r driver.SessionRow) error {
	_, err := d.w.ExecContext(ctx, `INSERT INTO session_directory (id, org, user_id, replica, info, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET org = excluded.org, user_id = excluded.user_id, replica = excluded.replica, info = excluded.info, updated_at = excluded.updated_at`,
		r.ID, r.Org, r.User, r.Replica, r.Info, r.CreatedAt, r.UpdatedAt)
	return err
}

const sessionColumns = `id, org, user_id, replica, info, created_at, updated_at`

func scanSessionRow(sc rowScanner) (driver.SessionRow, error) {
	var r driver.SessionRow
	err := sc.Scan(&r.ID, &r.Org, &r.User, &r.Replica, &r.Info, &r.CreatedAt, &r.UpdatedAt)
	return r, err
}

// SessionGet implements driver.SessionBackend.
func (d *DB) SessionGet(ctx context.Context, id string) (*driver.SessionRow, error) {
	r, err := scanSessionRow(d.r.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM session_directory WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// SessionDelete implements driver.SessionBackend.
func (d *DB) SessionDelete(ctx context.Context, id, replica string) (bool, error) {
	res, err := d.w.ExecContext(ctx, `DELETE FROM session_directory WHERE id = ? AND (? = '' OR replica = ?)`, id, replica, replica)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// SessionSweep implements driver.SessionBackend.
func (d *DB) SessionSweep(ctx context.Context, before int64) (int, error) {
	res, err := d.w.ExecContext(ctx, `DELETE FROM session_directory WHERE updated_at < ? AND replica <> '' AND replica NOT IN (SELECT id FROM replicas)`, before)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// SessionsOf implements driver.SessionBackend.
func (d *DB) SessionsOf(ctx context.Context, org, user string, limit int) ([]driver.SessionRow, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT `+sessionColumns+` FROM session_directory WHERE org = ? AND user_id = ? ORDER BY created_at, id LIMIT ?`, org, user, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.SessionRow
	for rows.Next() {
		r, err := scanSessionRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
