package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// KeyPrefix starts every API key, so that a key pasted into the wrong place
// (a log, a repository) is recognizable and secret scanners can match it.
const KeyPrefix = "moat_sk_"

// NewAPIKey is what CreateAPIKey needs to know about a key's holder.
type NewAPIKey struct {
	Org, User string
	Roles     []string
	Name      string // a label: what the key is for
}

// CreateAPIKey makes a new API key for the principal in spec, stores its
// hash in st, and returns the key, which is shown once and never again.
//
// RATIONALE: keys are 256 random bits, so a plain SHA-256 of the key is
// enough to store: a slow password hash (bcrypt, argon2) defends
// low-entropy secrets against guessing, and there is nothing to guess
// here — whoever reads the table cannot invert the hash, and brute force
// over 2^256 keys is out of reach. A fast hash also lets every request be
// authenticated by one indexed lookup instead of a deliberately slow
// computation.
func CreateAPIKey(ctx context.Context, st *store.Store, spec NewAPIKey) (secret string, key store.APIKey, err error) {
	p := policy.Principal{Org: spec.Org, User: spec.User, Roles: spec.Roles}
	if err := p.Validate(); err != nil {
		return "", store.APIKey{}, fmt.Errorf("api key: %w", err)
	}
	for _, r := range spec.Roles {
		if err := (policy.Principal{Org: r, User: "x"}).Validate(); err != nil {
			return "", store.APIKey{}, fmt.Errorf("api key: role %q: use letters, digits and . _ - @ +", r)
		}
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", store.APIKey{}, fmt.Errorf("api key: random: %w", err)
	}
	secret = KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", store.APIKey{}, fmt.Errorf("api key: random: %w", err)
	}
	key = store.APIKey{
		ID: "key_" + hex.EncodeToString(id[:]), Hash: HashAPIKey(secret), Org: spec.Org, User: spec.User,
		Roles: append([]string{}, spec.Roles...), Name: spec.Name, CreatedAt: time.Now().UTC(),
	}
	if err := st.APIKeyCreate(ctx, key); err != nil {
		return "", store.APIKey{}, fmt.Errorf("api key: %w", err)
	}
	return secret, key, nil
}

// HashAPIKey is how a key is stored and looked up: hex SHA-256.
func HashAPIKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// keyCacheTTL is how long a verified key is trusted without asking the
// store again. Keys are revoked by `moat keys revoke`, another process, so
// the server cannot be told; a revocation takes effect within this time.
// A few seconds keeps the store out of the hot path of every request
// (one read per key per TTL instead of one per request) while keeping the
// window short.
const keyCacheTTL = 5 * time.Second

// authenticator resolves bearer tokens to principals.
type authenticator struct {
	st  *store.Store
	mu  sync.Mutex
	ttl time.Duration
	hit map[[sha256.Size]byte]cachedKey // by the key's SHA-256, as bytes: the hex form is made only to ask the store
}

type cachedKey struct {
	key     *store.APIKey // nil: no such key, or revoked
	expires time.Time
}

var errBadKey = errors.New("the API key is unknown or revoked")

func newAuthenticator(st *store.Store) *authenticator {
	return &authenticator{st: st, ttl: keyCacheTTL, hit: map[[sha256.Size]byte]cachedKey{}}
}

// principal returns the key for a bearer token, or errBadKey.
func (a *authenticator) principal(ctx context.Context, token string) (*store.APIKey, error) {
	if !strings.HasPrefix(token, KeyPrefix) {
		return nil, errBadKey
	}
	sum := sha256.Sum256([]byte(token))
	now := time.Now()
	a.mu.Lock()
	c, ok := a.hit[sum]
	a.mu.Unlock()
	if !ok || now.After(c.expires) {
		k, err := a.st.APIKeyByHash(ctx, hex.EncodeToString(sum[:]))
		switch {
		case errors.Is(err, store.ErrAPIKeyNotFound):
			k = nil
		case err != nil:
			return nil, err
		case !k.RevokedAt.IsZero():
			k = nil
		}
		c = cachedKey{key: k, expires: now.Add(a.ttl)}
		a.mu.Lock()
		if len(a.hit) > 100_000 { // bound the memory a flood of made-up keys can take
			clear(a.hit)
		}
		a.hit[sum] = c
		a.mu.Unlock()
	}
	if c.key == nil {
		return nil, errBadKey
	}
	return c.key, nil
}
