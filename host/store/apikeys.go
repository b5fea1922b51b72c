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
	// Scopes narrow what the key may reach (server.KeyScopes): empty for
	// everything its roles allow.
	Scopes    []string
	ExpiresAt time.Time // zero: never; refused after
	// PrevHash is the hash of the secret the key had before its last
	// rotation, accepted until PrevUntil (zero: not at all).
	PrevHash  string
	PrevUntil time.Time
	// LastUsedAt and LastUsedAddr are the latest use a server recorded;
	// servers write them at most once a minute per key, so they lag.
	LastUsedAt   time.Time
	LastUsedAddr string
}

// Expired says whether the key has expired at now.
func (k *APIKey) Expired(now time.Time) bool {
	return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt)
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
	if r.Scopes != "" {
		if err := json.Unmarshal([]byte(r.Scopes), &k.Scopes); err != nil {
			return nil, fmt.Errorf("api key %s: scopes column %q is not a JSON list: %w", k.ID, r.Scopes, err)
		}
	}
	if r.ExpiresAt != 0 {
		k.ExpiresAt = fromNanos(r.ExpiresAt)
	}
	k.PrevHash = r.PrevHash
	if r.PrevUntil != 0 {
		k.PrevUntil = fromNanos(r.PrevUntil)
	}
	if r.LastUsedAt != 0 {
		k.LastUsedAt = fromNanos(r.LastUsedAt)
	}
	k.LastUsedAddr = r.LastUsedAddr
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
	if k.Scopes == nil {
		k.Scopes = []string{}
	}
	scopes, err := json.Marshal(k.Scopes)
	if err != nil {
		return fmt.Errorf("store: api_key.create %s: %w", k.ID, err)
	}
	var expires int64
	if !k.ExpiresAt.IsZero() {
		if expires, ok = nanos(k.ExpiresAt); !ok {
			return abi.Errorf(abi.CodeInvalidArgument, "api key create: expires_at %s is out of range", k.ExpiresAt)
		}
	}
	err = s.b.APIKeyCreate(ctx, driver.APIKeyRow{ID: k.ID, Hash: k.Hash, Org: k.Org, User: k.User, Roles: string(roles), Name: k.Name, CreatedAt: created,
		Scopes: string(scopes), ExpiresAt: expires})
	if errors.Is(err, driver.ErrConflict) {
		return fmt.Errorf("store: api_key.create %s: a key with this id or hash exists: %w", k.ID, err)
	}
	if err != nil {
		return fmt.Errorf("store: api_key.create %s: %w", k.ID, err)
	}
	return nil
}

// APIKeyByHash returns the key whose hash (or previous hash, PrevHash) is
// hash, revoked or not; the caller checks RevokedAt, ExpiresAt and, when
// hash is PrevHash, PrevUntil. An unknown hash wraps ErrAPIKeyNotFound.
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

// APIKeyByID returns the key id; an unknown id wraps ErrAPIKeyNotFound.
func (s *Store) APIKeyByID(ctx context.Context, id string) (*APIKey, error) {
	r, err := s.b.APIKeyByID(ctx, id)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("store: api_key.by_id %s: %w", id, ErrAPIKeyNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: api_key.by_id %s: %w", id, err)
	}
	k, err := fromAPIKeyRow(r)
	if err != nil {
		return nil, fmt.Errorf("store: api_key.by_id %s: %w", id, err)
	}
	return k, nil
}

// ErrAPIKeyChanged is returned (wrapped) by APIKeyRotate when the key was
// rotated or revoked since the caller read it: two rotations that race
// both read the same hash, and only the first replaces it.
var ErrAPIKeyChanged = errors.New("the API key was rotated or revoked meanwhile")

// APIKeyRotate gives the valid key id the hash newHash in place of
// oldHash (the hash the caller read), keeping oldHash valid until
// prevUntil (zero: not at all). It is a compare-and-swap: when the key's
// hash is no longer oldHash or the key is revoked, it wraps
// ErrAPIKeyChanged and changes nothing.
func (s *Store) APIKeyRotate(ctx context.Context, id, oldHash, newHash string, prevUntil time.Time) error {
	if !validHexSHA256(newHash) || !validHexSHA256(oldHash) {
		return abi.Errorf(abi.CodeInvalidArgument, "api key rotate: hashes must be 64 lowercase hex digits (a SHA-256)")
	}
	var until int64
	if !prevUntil.IsZero() {
		var ok bool
		if until, ok = nanos(prevUntil); !ok {
			return abi.Errorf(abi.CodeInvalidArgument, "api key rotate: grace end %s is out of range", prevUntil)
		}
	}
	err := s.b.APIKeyRotate(ctx, id, oldHash, newHash, until)
	if errors.Is(err, driver.ErrConflict) {
		return fmt.Errorf("store: api_key.rotate %s: %w", id, ErrAPIKeyChanged)
	}
	if err != nil {
		return fmt.Errorf("store: api_key.rotate %s: %w", id, err)
	}
	return nil
}

// APIKeyTouch records that key id was used at at from addr (clipped to
// 128 bytes), unless a later use is recorded. Servers call it at most
// once a minute per key (see server's authenticator), not per request.
func (s *Store) APIKeyTouch(ctx context.Context, id string, at time.Time, addr string) error {
	n, ok := nanos(at)
	if !ok {
		return abi.Errorf(abi.CodeInvalidArgument, "api key touch: time %s is out of range", at)
	}
	if len(addr) > 128 {
		addr = addr[:128]
	}
	if err := s.b.APIKeyTouch(ctx, id, n, addr); err != nil {
		return fmt.Errorf("store: api_key.touch %s: %w", id, err)
	}
	return nil
}
