package sqlite

import (
	"context"
	"strings"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// ModuleChanges implements driver.Backend.
func (d *DB) ModuleChanges(ctx context.Context, after int64, limit int) ([]driver.ModuleChange, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT seq, org, name, digest, at FROM module_changes WHERE seq > ? ORDER BY seq LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.ModuleChange
	for rows.Next() {
		var c driver.ModuleChange
		if err := rows.Scan(&c.Seq, &c.Org, &c.Name, &c.Digest, &c.At); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ModuleChangeHead implements driver.Backend.
func (d *DB) ModuleChangeHead(ctx context.Context) (seq int64, err error) {
	err = d.r.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM module_changes`).Scan(&seq)
	return seq, err
}

// ModuleWake implements driver.Backend: SQLite has no notifications, so
// the channel hears the module writes of this *DB, after they commit;
// writes by other processes reach a watcher by its poll of the log.
func (d *DB) ModuleWake(ctx context.Context) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	d.wakeMu.Lock()
	d.wakes[ch] = struct{}{}
	d.wakeMu.Unlock()
	go func() {
		<-ctx.Done()
		d.wakeMu.Lock()
		delete(d.wakes, ch)
		d.wakeMu.Unlock()
		close(ch)
	}()
	return ch, nil
}

// wake tells ModuleWake's subscribers that a module write committed.
func (d *DB) wake() {
	d.wakeMu.Lock()
	defer d.wakeMu.Unlock()
	for ch := range d.wakes {
		select {
		case ch <- struct{}{}:
		default: // a wake is pending already
		}
	}
}

// rateTake is one token-bucket step in one statement (see
// driver.Backend.RateTake): ?1 key, ?2 rate per second, ?3 burst, ?4 now
// (unix nanoseconds). In an UPDATE every expression reads the row as it
// was, so LEVEL is what the bucket holds after refilling, before taking,
// and full_at (when the bucket is full again: store.RateSweep) is
// computed from what the step leaves. Times past 9e18 stay there (REAL
// arithmetic; a STRICT column takes the CAST).
var rateTake = strings.NewReplacer("LEVEL", `min(?3, tokens + max(0, ?4 - updated_at) * ?2 / 1e9)`).Replace(`
INSERT INTO rate_buckets (key, tokens, updated_at, taken, full_at) VALUES (?1, ?3 - 1, ?4, 1, CAST(min(9e18, ?4 + 1e9 / ?2) AS INTEGER))
ON CONFLICT (key) DO UPDATE SET
	tokens = LEVEL - (LEVEL >= 1),
	taken = LEVEL >= 1,
	updated_at = max(updated_at, ?4),
	full_at = CAST(min(9e18, max(updated_at, ?4) + (?3 - (LEVEL - (LEVEL >= 1))) * 1e9 / ?2) AS INTEGER)
RETURNING taken, tokens`)

// rateSweep deletes at most ?2 buckets full before ?1 (see
// driver.RateSweeper): no index on full_at, which every take would
// update; the sweep reads the table instead, rarely.
const rateSweep = `DELETE FROM rate_buckets WHERE key IN (SELECT key FROM rate_buckets WHERE full_at < ?1 LIMIT ?2)`

// RateSweep implements driver.RateSweeper.
func (d *DB) RateSweep(ctx context.Context, now int64, limit int) (int64, error) {
	r, err := d.w.ExecContext(ctx, rateSweep, now, limit)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// RateTake implements driver.Backend.
func (d *DB) RateTake(ctx context.Context, key string, rate float64, burst int, now int64) (ok bool, tokens float64, err error) {
	st, err := d.prepared(ctx, d.w, rateTake)
	if err != nil {
		return false, 0, err
	}
	err = st.QueryRowContext(ctx, key, rate, burst, now).Scan(&ok, &tokens)
	return ok, tokens, err
}
