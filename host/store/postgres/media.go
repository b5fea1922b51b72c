package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// The media family on PostgreSQL: each item's row in media_items, its
// bytes in media_chunks, mediaChunk bytes a row, written in the
// transaction that inserts the item (so no replica can read a row whose
// bytes are not all there) and read a chunk at a time: a Range request of
// a video reads the chunks it covers, and serving an item holds one chunk
// in memory, not the item. Every write locks the organization's
// media_usage row first: that serializes the writes of one organization
// across replicas, which makes the quota atomic and a put of bytes the
// organization already has find them.

var _ driver.MediaBackend = (*DB)(nil)

// mediaChunk is the bytes of a chunk. An item records the chunk size it
// was written with, so that changing this later leaves old items
// readable.
const mediaChunk = 1 << 20

// mediaLock locks org's usage row (creating it empty) and returns the
// bytes it holds.
const mediaLock = `
INSERT INTO media_usage AS u (org, items, bytes) VALUES ($1, 0, 0)
ON CONFLICT (org) DO UPDATE SET items = u.items
RETURNING bytes`

const mediaColumns = `id, type, size, width, height, module, user_id, created_at`

func scanMediaItem(sc pgx.Row, org string) (driver.MediaItem, error) {
	it := driver.MediaItem{Org: org}
	var w, h int32
	err := sc.Scan(&it.ID, &it.Type, &it.Size, &w, &h, &it.Module, &it.User, &it.At)
	it.Width, it.Height = int(w), int(h)
	return it, err
}

// MediaPut implements driver.MediaBackend.
func (d *DB) MediaPut(ctx context.Context, it driver.MediaItem, data []byte, quota int64) (stored driver.MediaItem, created bool, inUse int64, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, mediaLock, it.Org).Scan(&inUse); err != nil {
			return err
		}
		old, err := scanMediaItem(tx.QueryRow(ctx, `SELECT `+mediaColumns+` FROM media_items WHERE org = $1 AND id = $2`, it.Org, it.ID), it.Org)
		switch {
		case err == nil:
			stored = old
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if quota > 0 && driver.OverQuota(quota, inUse, it.Size) {
			return driver.ErrOverQuota
		}
		var rows [][]any
		for seq, off := 0, 0; off < len(data); seq, off = seq+1, off+mediaChunk {
			rows = append(rows, []any{it.Org, it.ID, int32(seq), data[off:min(off+mediaChunk, len(data))]})
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"media_chunks"}, []string{"org", "id", "seq", "data"}, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO media_items (org, `+mediaColumns+`, chunk) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			it.Org, it.ID, it.Type, it.Size, int32(it.Width), int32(it.Height), it.Module, it.User, it.At, int32(mediaChunk)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE media_usage SET items = items + 1, bytes = bytes + $2 WHERE org = $1`, it.Org, it.Size); err != nil {
			return err
		}
		stored, created = it, true
		return nil
	})
	return stored, created, inUse, err
}

// MediaGet implements driver.MediaBackend.
func (d *DB) MediaGet(ctx context.Context, org, id string) (*driver.MediaItem, error) {
	it, err := scanMediaItem(d.pool.QueryRow(ctx, `SELECT `+mediaColumns+` FROM media_items WHERE org = $1 AND id = $2`, org, id), org)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &it, nil
}

// MediaOpen implements driver.MediaBackend: a reader that reads the
// item's chunks one at a time, as its position needs them.
func (d *DB) MediaOpen(ctx context.Context, org, id string) (*driver.MediaItem, driver.MediaReader, error) {
	var chunk int32
	it := driver.MediaItem{Org: org}
	var w, h int32
	err := d.pool.QueryRow(ctx, `SELECT `+mediaColumns+`, chunk FROM media_items WHERE org = $1 AND id = $2`, org, id).
		Scan(&it.ID, &it.Type, &it.Size, &w, &h, &it.Module, &it.User, &it.At, &chunk)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, driver.ErrNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	if chunk <= 0 {
		return nil, nil, fmt.Errorf("media: item %s records a chunk size of %d", id, chunk)
	}
	it.Width, it.Height = int(w), int(h)
	return &it, &chunkReader{ctx: ctx, pool: d.pool, org: org, id: id, size: it.Size, chunk: int64(chunk), seq: -1}, nil
}

// chunkReader reads an item's chunks as its position reaches them. It
// keeps the context it was opened with: an io.Reader takes none, and the
// reads belong to the request that opened it.
type chunkReader struct {
	ctx         context.Context
	pool        *pgxpool.Pool
	org, id     string
	size, chunk int64
	pos         int64
	buf         []byte // chunk seq
	seq         int64
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	seq := r.pos / r.chunk
	if seq != r.seq {
		r.buf = r.buf[:0]
		err := r.pool.QueryRow(r.ctx, `SELECT data FROM media_chunks WHERE org = $1 AND id = $2 AND seq = $3`, r.org, r.id, int32(seq)).Scan(&r.buf)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("media: chunk %d of item %s is gone (the item was deleted)", seq, r.id)
		}
		if err != nil {
			return 0, err
		}
		if want := min(r.chunk, r.size-seq*r.chunk); int64(len(r.buf)) != want {
			return 0, fmt.Errorf("media: chunk %d of item %s holds %d bytes, not %d", seq, r.id, len(r.buf), want)
		}
		r.seq = seq
	}
	n := copy(p, r.buf[r.pos-seq*r.chunk:])
	r.pos += int64(n)
	return n, nil
}

func (r *chunkReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.size
	default:
		return 0, fmt.Errorf("media: seek: whence %d", whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("media: seek to %d, before the start", offset)
	}
	r.pos = offset
	return offset, nil
}

func (r *chunkReader) Close() error {
	r.buf, r.seq = nil, -1
	return nil
}

// MediaList implements driver.MediaBackend.
func (d *DB) MediaList(ctx context.Context, f driver.MediaFilter) ([]driver.MediaItem, error) {
	q := `SELECT ` + mediaColumns + ` FROM media_items WHERE org = $1`
	args := []any{f.Org}
	if f.Module != "" {
		args = append(args, f.Module)
		q += fmt.Sprintf(` AND module = $%d`, len(args))
	}
	if f.HasBefore {
		args = append(args, f.BeforeAt, f.BeforeID)
		q += fmt.Sprintf(` AND (created_at, id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	args = append(args, f.Limit)
	q += fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args))
	rows, err := d.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.MediaItem
	for rows.Next() {
		it, err := scanMediaItem(rows, f.Org)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// MediaDelete implements driver.MediaBackend.
func (d *DB) MediaDelete(ctx context.Context, org, id string) (deleted bool, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var inUse int64
		if err := tx.QueryRow(ctx, mediaLock, org).Scan(&inUse); err != nil {
			return err
		}
		var size int64
		err := tx.QueryRow(ctx, `DELETE FROM media_items WHERE org = $1 AND id = $2 RETURNING size`, org, id).Scan(&size)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM media_chunks WHERE org = $1 AND id = $2`, org, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE media_usage SET items = items - 1, bytes = bytes - $2 WHERE org = $1`, org, size); err != nil {
			return err
		}
		deleted = true
		return nil
	})
	return deleted, err
}

// MediaUsage implements driver.MediaBackend.
func (d *DB) MediaUsage(ctx context.Context, org string) (u driver.MediaUsage, err error) {
	err = d.pool.QueryRow(ctx, `SELECT items, bytes FROM media_usage WHERE org = $1`, org).Scan(&u.Items, &u.Bytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.MediaUsage{}, nil
	}
	return u, err
}
