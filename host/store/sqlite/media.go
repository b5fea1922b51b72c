package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// The media family on SQLite: each item's row in media_items, its bytes
// in a file of their own beside the database,
//
//	dir/media/<sha256 of the org, hex>/<first two hex digits of the id>/<id>
//
// so the database stays small (a page cache full of video would evict the
// rows every invocation reads) and a Range request reads the file at an
// offset. The organization's directory is named by a hash: an org name
// never becomes a path. The bytes are written to dir/media/tmp first,
// synced, and renamed into place inside the write transaction that
// inserts the row, so a reader that finds the row finds the whole file,
// and a put and a delete of the same item (from any process sharing the
// file) cannot interleave: both hold SQLite's write lock.

var _ driver.MediaBackend = (*DB)(nil)

func (d *DB) mediaDir() string { return filepath.Join(filepath.Dir(d.path), "media") }

// mediaPath is where org's item id keeps its bytes. The id is checked
// again here, as it becomes part of a path.
func (d *DB) mediaPath(org, id string) (string, error) {
	if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("media: id %.70q is not 64 lowercase hex digits", id)
	}
	o := sha256.Sum256([]byte(org))
	return filepath.Join(d.mediaDir(), hex.EncodeToString(o[:]), id[:2], id), nil
}

const mediaColumns = `id, type, size, width, height, module, user_id, created_at`

func scanMediaItem(sc rowScanner, org string) (driver.MediaItem, error) {
	it := driver.MediaItem{Org: org}
	err := sc.Scan(&it.ID, &it.Type, &it.Size, &it.Width, &it.Height, &it.Module, &it.User, &it.At)
	return it, err
}

// MediaPut implements driver.MediaBackend.
func (d *DB) MediaPut(ctx context.Context, it driver.MediaItem, data []byte, quota int64) (stored driver.MediaItem, created bool, inUse int64, err error) {
	final, err := d.mediaPath(it.Org, it.ID)
	if err != nil {
		return stored, false, 0, err
	}
	tmp, err := writeTemp(filepath.Join(d.mediaDir(), "tmp"), data)
	if err != nil {
		return stored, false, 0, fmt.Errorf("media: write the item's bytes: %w", err)
	}
	defer os.Remove(tmp) // once renamed into place, this finds nothing
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		old, err := scanMediaItem(tx.QueryRowContext(ctx, `SELECT `+mediaColumns+` FROM media_items WHERE org = ? AND id = ?`, it.Org, it.ID), it.Org)
		switch {
		case err == nil:
			stored = old
			// The row is there; so must its bytes be (a file lost to an
			// operator's cleanup comes back with the same bytes).
			if _, err := os.Stat(final); errors.Is(err, fs.ErrNotExist) {
				return place(tmp, final)
			}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT bytes FROM media_usage WHERE org = ?`, it.Org).Scan(&inUse); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if quota > 0 && driver.OverQuota(quota, inUse, it.Size) {
			return driver.ErrOverQuota
		}
		if err := place(tmp, final); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO media_items (org, `+mediaColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			it.Org, it.ID, it.Type, it.Size, it.Width, it.Height, it.Module, it.User, it.At); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO media_usage (org, items, bytes) VALUES (?, 1, ?)
ON CONFLICT (org) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes`, it.Org, it.Size); err != nil {
			return err
		}
		stored, created = it, true
		return nil
	})
	return stored, created, inUse, err
}

// mediaTempGrace is how old a file in media/tmp must be before Open
// removes it: a put that died between writing its bytes and renaming
// them left it, while a younger one may be another process's put in
// flight.
const mediaTempGrace = time.Hour

// sweepMediaTemp removes what puts that died left in dir/media/tmp.
func sweepMediaTemp(dir string) {
	tmp := filepath.Join(dir, "media", "tmp")
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > mediaTempGrace {
			os.Remove(filepath.Join(tmp, e.Name()))
		}
	}
}

// writeTemp writes data to a new file in dir, synced to disk, and returns
// its path.
func writeTemp(dir string, data []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "put-*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// place renames tmp to final, making final's directory, and syncs the
// directory so the rename survives a crash as the row will.
func place(tmp, final string) error {
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// MediaGet implements driver.MediaBackend.
func (d *DB) MediaGet(ctx context.Context, org, id string) (*driver.MediaItem, error) {
	it, err := scanMediaItem(d.r.QueryRowContext(ctx, `SELECT `+mediaColumns+` FROM media_items WHERE org = ? AND id = ?`, org, id), org)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &it, nil
}

// MediaOpen implements driver.MediaBackend: the item's file, open.
func (d *DB) MediaOpen(ctx context.Context, org, id string) (*driver.MediaItem, driver.MediaReader, error) {
	it, err := d.MediaGet(ctx, org, id)
	if err != nil {
		return nil, nil, err
	}
	path, err := d.mediaPath(org, id)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Deleted between the row and the file: gone, as it would be a
		// moment later.
		if _, gerr := d.MediaGet(ctx, org, id); errors.Is(gerr, driver.ErrNotFound) {
			return nil, nil, driver.ErrNotFound
		}
		return nil, nil, fmt.Errorf("media: the item's row is stored but its file %s is missing: %w", path, err)
	}
	if err != nil {
		return nil, nil, err
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != it.Size {
		f.Close()
		return nil, nil, fmt.Errorf("media: the item's file %s does not hold its %d bytes (%v)", path, it.Size, err)
	}
	return it, f, nil
}

// MediaList implements driver.MediaBackend.
func (d *DB) MediaList(ctx context.Context, f driver.MediaFilter) ([]driver.MediaItem, error) {
	q := `SELECT ` + mediaColumns + ` FROM media_items WHERE org = ?`
	args := []any{f.Org}
	if f.Module != "" {
		q += ` AND module = ?`
		args = append(args, f.Module)
	}
	if f.HasBefore {
		q += ` AND (created_at < ? OR created_at = ? AND id < ?)`
		args = append(args, f.BeforeAt, f.BeforeAt, f.BeforeID)
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, f.Limit)
	rows, err := d.r.QueryContext(ctx, q, args...)
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

// MediaDelete implements driver.MediaBackend. The file goes inside the
// transaction, under the write lock, so a put of the same bytes waiting
// for the lock renames its own file into place after it.
func (d *DB) MediaDelete(ctx context.Context, org, id string) (deleted bool, err error) {
	path, err := d.mediaPath(org, id)
	if err != nil {
		return false, err
	}
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		var size int64
		err := tx.QueryRowContext(ctx, `DELETE FROM media_items WHERE org = ? AND id = ? RETURNING size`, org, id).Scan(&size)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE media_usage SET items = items - 1, bytes = bytes - ? WHERE org = ?`, size, org); err != nil {
			return err
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		deleted = true
		return nil
	})
	return deleted, err
}

// MediaUsage implements driver.MediaBackend.
func (d *DB) MediaUsage(ctx context.Context, org string) (u driver.MediaUsage, err error) {
	err = d.r.QueryRowContext(ctx, `SELECT items, bytes FROM media_usage WHERE org = ?`, org).Scan(&u.Items, &u.Bytes)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.MediaUsage{}, nil
	}
	return u, err
}
