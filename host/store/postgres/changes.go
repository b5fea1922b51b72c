package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// ModuleChanges implements driver.Backend.
func (d *DB) ModuleChanges(ctx context.Context, after int64, limit int) ([]driver.ModuleChange, error) {
	rows, err := d.pool.Query(ctx, `SELECT seq, org, name, digest, at FROM module_changes WHERE seq > $1 ORDER BY seq LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	var out []driver.ModuleChange
	var c driver.ModuleChange
	_, err = pgx.ForEachRow(rows, []any{&c.Seq, &c.Org, &c.Name, &c.Digest, &c.At}, func() error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// ModuleChangeHead implements driver.Backend.
func (d *DB) ModuleChangeHead(ctx context.Context) (seq int64, err error) {
	err = d.pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM module_changes`).Scan(&seq)
	return seq, err
}

// notifyChannel is the channel module writes NOTIFY (see module_changes).
const notifyChannel = "moat_modules"

// ModuleWake implements driver.Backend: a connection of its own (LISTEN
// holds a session, so it cannot be a pooled one) waits for the
// notifications module writes send at commit, on any replica. When the
// connection drops it reconnects, with backoff; the watcher's poll covers
// the gap.
func (d *DB) ModuleWake(ctx context.Context) (<-chan struct{}, error) {
	listen := func() (*pgx.Conn, error) {
		conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
			conn.Close(context.Background())
			return nil, err
		}
		return conn, nil
	}
	conn, err := listen()
	if err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		backoff := 100 * time.Millisecond
		for {
			if conn == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 5*time.Second)
				if conn, err = listen(); err != nil {
					conn = nil
					continue
				}
				backoff = 100 * time.Millisecond
				select { // changes may have been missed meanwhile
				case ch <- struct{}{}:
				default:
				}
			}
			if _, err := conn.WaitForNotification(ctx); err != nil {
				conn.Close(context.Background())
				conn = nil
				if ctx.Err() != nil {
					return
				}
				continue
			}
			select {
			case ch <- struct{}{}:
			default: // a wake is pending already
			}
		}
	}()
	return ch, nil
}

// rateTake is one token-bucket step in one statement (see
// driver.Backend.RateTake): $1 key, $2 rate per second, $3 burst, $4 now
// (unix nanoseconds). In an UPDATE every expression reads the row as it
// was, so LEVEL is what the bucket holds after refilling, before taking,
// and full_at (when the bucket is full again: store.RateSweep) is
// computed from what the step leaves; ON CONFLICT makes the first take of
// a new key race-free.
var rateTake = strings.NewReplacer("LEVEL", `least($3::float8, b.tokens + greatest(0, $4::bigint - b.updated_at) * $2::float8 / 1e9::float8)`,
	"TAKEN", `CASE WHEN least($3::float8, b.tokens + greatest(0, $4::bigint - b.updated_at) * $2::float8 / 1e9::float8) >= 1 THEN 1 ELSE 0 END`).Replace(`
INSERT INTO rate_buckets AS b (key, tokens, updated_at, taken, full_at) VALUES ($1, $3::float8 - 1, $4, true, least(9e18, $4::bigint + 1e9 / $2::float8)::bigint)
ON CONFLICT (key) DO UPDATE SET
	tokens = LEVEL - TAKEN,
	taken = LEVEL >= 1,
	updated_at = greatest(b.updated_at, $4::bigint),
	full_at = least(9e18, greatest(b.updated_at, $4::bigint) + ($3::float8 - (LEVEL - TAKEN)) * 1e9 / $2::float8)::bigint
RETURNING taken, tokens`)

// rateSweep deletes at most $2 buckets full before $1 (see
// driver.RateSweeper), skipping rows a take holds: a bucket being taken
// from is not full.
const rateSweep = `DELETE FROM rate_buckets WHERE key IN (SELECT key FROM rate_buckets WHERE full_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`

// RateSweep implements driver.RateSweeper.
func (d *DB) RateSweep(ctx context.Context, now int64, limit int) (int64, error) {
	tag, err := d.pool.Exec(ctx, rateSweep, now, limit)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// RateTake implements driver.Backend.
func (d *DB) RateTake(ctx context.Context, key string, rate float64, burst int, now int64) (ok bool, tokens float64, err error) {
	err = d.pool.QueryRow(ctx, rateTake, key, rate, burst, now).Scan(&ok, &tokens)
	return ok, tokens, err
}
