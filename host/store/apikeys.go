package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// APIKey is an API key of the server: who it authenticates (a user of an
// organization, with roles) and whether it is still valid. The key itself
// is never stored; Hash is the hex SHA-256 of it.
type APIKey struct {
	ID        string // public identifier, shown by `moat keys list` and used to revoke
	Hash      string // hex SHA-256 of the secret key
	Org, User string
	Roles     []string
	Name      string // a label for people: what the key is for
	CreatedAt time.Time
	RevokedAt time.Time // zero while the key is valid
}

// ErrAPIKeyNotFound is returned (wrapped) for an unknown key id or hash.
var ErrAPIKeyNotFound = errors.New("no such API key")

const apiKeyColumns = `id, hash, org, user, roles, name, created_at, revoked_at`

func scanAPIKey(r rowScanner) (*APIKey, error) {
	var (
		k       APIKey
		roles   string
		created int64
		revoked sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.Hash, &k.Org, &k.User, &roles, &k.Name, &created, &revoked); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(roles), &k.Roles); err != nil {
		return nil, fmt.Errorf("api key %s: roles column %q is not a JSON list: %w", k.ID, roles, err)
	}
	k.CreatedAt = fromNanos(created)
	if revoked.Valid {
		k.RevokedAt = fromNanos(revoked.Int64)
	}
	return &k, nil
}

// APIKeyCreate stores k. ID, Hash (64 lowercase hex digits), Org and User
// must be set; CreatedAt defaults to now. A duplicate ID or hash fails.
func (s *Store) APIKeyCreate(ctx context.Context, k APIKey) error {
	switch {
	case k.ID == "":
		return abi.Errorf(abi.CodeInvalidArgument, "api key create: id is empty")
	case !validHexSHA256(k.Hash):
		return abi.Errorf(abi.CodeInvalidArgument, "api key create: hash must be 64 lowercase hex digits (a SHA-256)")
	case k.Org == "" || k.User == "":
		return abi.Errorf(abi.CodeInvalidArgument, "api key create: org and user must be set")
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = time.Now().UTC()
	}
	if k.Roles == nil {
		k.Roles = []string{}
	}
	roles, err := json.Marshal(k.Roles)
	if err != nil {
		return fmt.Errorf("store: api_key.create %s: %w", k.ID, err)
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)`,
		k.ID, k.Hash, k.Org, k.User, string(roles), k.Name, k.CreatedAt.UnixNano()); err != nil {
		return fmt.Errorf("store: api_key.create %s: %w", k.ID, err)
	}
	return nil
}

// APIKeyByHash returns the key whose hash is hash, revoked or not; the
// caller checks RevokedAt. An unknown hash wraps ErrAPIKeyNotFound.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*APIKey, error) {
	k, err := scanAPIKey(s.r.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: api_key.by_hash: %w", ErrAPIKeyNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: api_key.by_hash: %w", err)
	}
	return k, nil
}

// APIKeys lists the keys of org (every organization when org is empty),
// oldest first, revoked ones included.
func (s *Store) APIKeys(ctx context.Context, org string) ([]APIKey, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE ? = '' OR org = ? ORDER BY created_at, id`, org, org)
	if err != nil {
		return nil, fmt.Errorf("store: api_keys.list org=%q: %w", org, err)
	}
	defer rows.Close()
	out := []APIKey{}
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("store: api_keys.list org=%q: %w", org, err)
		}
		out = append(out, *k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: api_keys.list org=%q: %w", org, err)
	}
	return out, nil
}

// APIKeyRevoke marks the key id revoked at now. Revoking a revoked key
// keeps its first revocation time and succeeds; an unknown id wraps
// ErrAPIKeyNotFound.
func (s *Store) APIKeyRevoke(ctx context.Context, id string, now time.Time) error {
	res, err := s.w.ExecContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, now.UnixNano(), id)
	if err != nil {
		return fmt.Errorf("store: api_key.revoke %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("store: api_key.revoke %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("store: api_key.revoke %s: %w", id, ErrAPIKeyNotFound)
	}
	return nil
}
