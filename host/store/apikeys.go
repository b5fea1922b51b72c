package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
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

func fromAPIKeyRow(r *driver.APIKeyRow) (*APIKey, error) {
	k := APIKey{ID: r.ID, Hash: r.Hash, Org: r.Org, User: r.User, Name: r.Name, CreatedAt: fromNanos(r.CreatedAt)}
	if err := json.Unmarshal([]byte(r.Roles), &k.Roles); err != nil {
		return nil, fmt.Errorf("api key %s: roles column %q is not a JSON list: %w", k.ID, r.Roles, err)
	}
	if r.RevokedAt != 0 {
		k.RevokedAt = fromNanos(r.RevokedAt)
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
	created, ok := nanos(k.CreatedAt)
	if !ok {
		return abi.Errorf(abi.CodeInvalidArgument, "api key create: created_at %s is out of range", k.CreatedAt)
	}
	if k.Roles == nil {
		k.Roles = []string{}
	}
	roles, err := json.Marshal(k.Roles)
	if err != nil {
		return fmt.Errorf("store: api_key.create %s: %w", k.ID, err)
	}
	err = s.b.APIKeyCreate(ctx, driver.APIKeyRow{ID: k.ID, Hash: k.Hash, Org: k.Org, User: k.User, Roles: string(roles), Name: k.Name, CreatedAt: created})
	if errors.Is(err, driver.ErrConflict) {
		return fmt.Errorf("store: api_key.create %s: a key with this id or hash exists: %w", k.ID, err)
	}
	if err != nil {
		return fmt.Errorf("store: api_key.create %s: %w", k.ID, err)
	}
	return nil
}

// APIKeyByHash returns the key whose hash is hash, revoked or not; the
// caller checks RevokedAt. An unknown hash wraps ErrAPIKeyNotFound.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*APIKey, error) {
	r, err := s.b.APIKeyByHash(ctx, hash)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("store: api_key.by_hash: %w", ErrAPIKeyNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: api_key.by_hash: %w", err)
	}
	k, err := fromAPIKeyRow(r)
	if err != nil {
		return nil, fmt.Errorf("store: api_key.by_hash: %w", err)
	}
	return k, nil
}

// APIKeys lists the keys of org (every organization when org is empty),
// oldest first, revoked ones included.
func (s *Store) APIKeys(ctx context.Context, org string) ([]APIKey, error) {
	rows, err := s.b.APIKeys(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("store: api_keys.list org=%q: %w", org, err)
	}
	out := make([]APIKey, len(rows))
	for i := range rows {
		k, err := fromAPIKeyRow(&rows[i])
		if err != nil {
			return nil, fmt.Errorf("store: api_keys.list org=%q: %w", org, err)
		}
		out[i] = *k
	}
	return out, nil
}

// APIKeyRevoke marks the key id revoked at now. Revoking a revoked key
// keeps its first revocation time and succeeds; an unknown id wraps
// ErrAPIKeyNotFound.
func (s *Store) APIKeyRevoke(ctx context.Context, id string, now time.Time) error {
	err := s.b.APIKeyRevoke(ctx, id, now.UnixNano())
	if errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("store: api_key.revoke %s: %w", id, ErrAPIKeyNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: api_key.revoke %s: %w", id, err)
	}
	return nil
}
