package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// Sessions across replicas on PostgreSQL (driver.SessionBackend): the
// replicas of one moat serve share this database, so an image one
// replica paused is read by whichever resumes it, and the directory says
// which replica holds a live session. A commit or delete of an image
// takes a transaction-scoped advisory lock on (org, id), so that two
// replicas replacing the same image at once cannot both miss the other's
// chunks and leave one set behind.

var _ driver.SessionBackend = (*DB)(nil)

const imageLock = `SELECT pg_advisory_xact_lock(hashtextextended('moat session image ' || $1 || '/' || $2, 0))`

// ImageBegin implements driver.SessionBackend.
func (d *DB) ImageBegin(ctx context.Context, org, id, gen string, at int64) error {
	_, err := d.pool.Exec(ctx, `INSERT INTO session_image_uploads (gen, org, id, started_at) VALUES ($1, $2, $3, $4)`, gen, org, id, at)
	return conflict(err)
}

// ImageChunk implements driver.SessionBackend.
func (d *DB) ImageChunk(ctx context.Context, gen string, seq int, data []byte) error {
	_, err := d.pool.Exec(ctx, `INSERT INTO session_image_chunks (gen, seq, data) VALUES ($1, $2, $3)`, gen, int32(seq), data)
	return conflict(err)
}

// ImageCommit implements driver.SessionBackend.
func (d *DB) ImageCommit(ctx context.Context, r driver.ImageRow) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, imageLock, r.Org, r.ID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM session_image_uploads WHERE gen = $1`, r.Gen)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return driver.ErrNotFound // aborted or swept meanwhile
		}
		if _, err := tx.Exec(ctx, `DELETE FROM session_image_chunks WHERE gen = (SELECT gen FROM session_images WHERE org = $1 AND id = $2)`, r.Org, r.ID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO session_images (org, id, gen, size, chunk, created_at) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (org, id) DO UPDATE SET gen = excluded.gen, size = excluded.size, chunk = excluded.chunk, created_at = excluded.created_at`,
			r.Org, r.ID, r.Gen, r.Size, int32(r.Chunk), r.At)
		return err
	})
}

// ImageAbort implements driver.SessionBackend.
func (d *DB) ImageAbort(ctx context.Context, gen string) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM session_image_chunks WHERE gen = $1`, gen); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM session_image_uploads WHERE gen = $1`, gen)
		return err
	})
}

// ImageGet implements driver.SessionBackend.
func (d *DB) ImageGet(ctx context.Context, org, id string) (*driver.ImageRow, error) {
	r := driver.ImageRow{Org: org, ID: id}
	var chunk int32
	err := d.pool.QueryRow(ctx, `SELECT gen, size, chunk, created_at FROM session_images WHERE org = $1 AND id = $2`, org, id).Scan(&r.Gen, &r.Size, &chunk, &r.At)
	if err != nil {
		return nil, notFound(err)
	}
	r.Chunk = int(chunk)
	return &r, nil
}

// ImageReadChunk implements driver.SessionBackend.
func (d *DB) ImageReadChunk(ctx context.Context, gen string, seq int) ([]byte, error) {
	var data []byte
	err := d.pool.QueryRow(ctx, `SELECT data FROM session_image_chunks WHERE gen = $1 AND seq = $2`, gen, int32(seq)).Scan(&data)
	return data, notFound(err)
}

// ImageDelete implements driver.SessionBackend.
func (d *DB) ImageDelete(ctx context.Context, org, id string) (deleted bool, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, imageLock, org, id); err != nil {
			return err
		}
		var gen string
		err := tx.QueryRow(ctx, `DELETE FROM session_images WHERE org = $1 AND id = $2 RETURNING gen`, org, id).Scan(&gen)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM session_image_chunks WHERE gen = $1`, gen)
		deleted = err == nil
		return err
	})
	return deleted, err
}

// ImageSweep implements driver.SessionBackend.
func (d *DB) ImageSweep(ctx context.Context, before int64) (n int, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM session_image_uploads WHERE started_at < $1 RETURNING gen`, before)
		if err != nil {
			return err
		}
		gens, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(gens) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM session_image_chunks WHERE gen = ANY($1)`, gens); err != nil {
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
	_, err := d.pool.Exec(ctx, `INSERT INTO replicas (id, url, mac, started_at, seen_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET url = excluded.url, mac = excluded.mac, seen_at = excluded.seen_at`, r.ID, r.URL, r.MAC, r.StartedAt, r.SeenAt)
	return err
}

// ReplicaGet implements driver.SessionBackend.
func (d *DB) ReplicaGet(ctx context.Context, id string) (*driver.ReplicaRow, error) {
	r := driver.ReplicaRow{ID: id}
	err := d.pool.QueryRow(ctx, `SELECT url, mac, started_at, seen_at FROM replicas WHERE id = $1`, id).Scan(&r.URL, &r.MAC, &r.StartedAt, &r.SeenAt)
	if err != nil {
		return nil, notFound(err)
	}
	return &r, nil
}

// ReplicaDelete implements driver.SessionBackend.
func (d *DB) ReplicaDelete(ctx context.Context, id string) error {
	_, err := d.pool.Exec(ctx, `DELETE FROM replicas WHERE id = $1`, id)
	return err
}

// Replicas implements driver.SessionBackend.
func (d *DB) Replicas(ctx context.Context, seenAfter, expireBefore int64) ([]driver.ReplicaRow, error) {
	if _, err := d.pool.Exec(ctx, `DELETE FROM replicas WHERE seen_at < $1`, expireBefore); err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, `SELECT id, url, mac, started_at, seen_at FROM replicas WHERE seen_at >= $1 ORDER BY id COLLATE "C"`, seenAfter)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.ReplicaRow, error) {
		var r driver.ReplicaRow
		err := row.Scan(&r.ID, &r.URL, &r.MAC, &r.StartedAt, &r.SeenAt)
		return r, err
	})
}

// SessionPut implements driver.SessionBackend.
func (d *DB) SessionPut(ctx context.Context, r driver.SessionRow) error {
	_, err := d.pool.Exec(ctx, `INSERT INTO session_directory (id, org, user_id, replica, info, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE SET org = excluded.org, user_id = excluded.user_id, replica = excluded.replica, info = excluded.info, updated_at = excluded.updated_at`,
		r.ID, r.Org, r.User, r.Replica, r.Info, r.CreatedAt, r.UpdatedAt)
	return err
}

const sessionColumns = `id, org, user_id, replica, info, created_at, updated_at`

func scanSessionRow(row pgx.Row) (driver.SessionRow, error) {
	var r driver.SessionRow
	err := row.Scan(&r.ID, &r.Org, &r.User, &r.Replica, &r.Info, &r.CreatedAt, &r.UpdatedAt)
	return r, err
}

// SessionGet implements driver.SessionBackend.
func (d *DB) SessionGet(ctx context.Context, id string) (*driver.SessionRow, error) {
	r, err := scanSessionRow(d.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM session_directory WHERE id = $1`, id))
	if err != nil {
		return nil, notFound(err)
	}
	return &r, nil
}

// SessionDelete implements driver.SessionBackend.
func (d *DB) SessionDelete(ctx context.Context, id, replica string) (bool, error) {
	tag, err := d.pool.Exec(ctx, `DELETE FROM session_directory WHERE id = $1 AND ($2 = '' OR replica = $2)`, id, replica)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// SessionSweep implements driver.SessionBackend.
func (d *DB) SessionSweep(ctx context.Context, before int64) (int, error) {
	tag, err := d.pool.Exec(ctx, `DELETE FROM session_directory WHERE updated_at < $1 AND replica <> '' AND replica NOT IN (SELECT id FROM replicas)`, before)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// SessionsOf implements driver.SessionBackend.
func (d *DB) SessionsOf(ctx context.Context, org, user string, limit int) ([]driver.SessionRow, error) {
	rows, err := d.pool.Query(ctx, `SELECT `+sessionColumns+` FROM session_directory WHERE org = $1 AND user_id = $2 ORDER BY created_at, id COLLATE "C" LIMIT $3`, org, user, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.SessionRow, error) { return scanSessionRow(row) })
}
