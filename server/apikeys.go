package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/host"
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
	// Scopes narrow what the key reaches (see KeyScopes); empty: all its
	// roles allow.
	Scopes []string
	// ExpiresAt is when the key stops working; zero: never.
	ExpiresAt time.Time
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
	scopes, err := ParseScopes(spec.Scopes)
	if err != nil {
		return "", store.APIKey{}, fmt.Errorf("api key: %w", err)
	}
	if len(spec.Name) > maxKeyName {
		return "", store.APIKey{}, fmt.Errorf("api key: the name is %d bytes; at most %d", len(spec.Name), maxKeyName)
	}
	now := time.Now().UTC()
	if !spec.ExpiresAt.IsZero() && !spec.ExpiresAt.After(now) {
		return "", store.APIKey{}, fmt.Errorf("api key: expires_at %s is not in the future", spec.ExpiresAt.Format(time.RFC3339))
	}
	secret, hash, err := newKeySecret()
	if err != nil {
		return "", store.APIKey{}, err
	}
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", store.APIKey{}, fmt.Errorf("api key: random: %w", err)
	}
	key = store.APIKey{
		ID: "key_" + hex.EncodeToString(id[:]), Hash: hash, Org: spec.Org, User: spec.User,
		Roles: append([]string{}, spec.Roles...), Name: spec.Name, CreatedAt: now,
		Scopes: scopes, ExpiresAt: spec.ExpiresAt.UTC(),
	}
	if spec.ExpiresAt.IsZero() {
		key.ExpiresAt = time.Time{}
	}
	if err := st.APIKeyCreate(ctx, key); err != nil {
		return "", store.APIKey{}, fmt.Errorf("api key: %w", err)
	}
	return secret, key, nil
}

// maxKeyName bounds a key's label.
const maxKeyName = 200

// MaxRotateGrace bounds how long a rotated key's previous secret may stay
// valid: long enough to roll a deployment, short enough that a rotation
// after a leak is a rotation.
const MaxRotateGrace = 24 * time.Hour

// RotateAPIKey gives the key k (as read from st) a new secret and returns
// it; the previous secret stays valid for grace (0: it stops at once;
// at most MaxRotateGrace). Two rotations of one key that race both read
// its hash and only the first succeeds; the second wraps
// store.ErrAPIKeyChanged, so no secret is handed out that never worked.
func RotateAPIKey(ctx context.Context, st *store.Store, k *store.APIKey, grace time.Duration) (string, error) {
	if grace < 0 || grace > MaxRotateGrace {
		return "", fmt.Errorf("api key rotate: grace %s is out of range: 0 to %s", grace, MaxRotateGrace)
	}
	secret, hash, err := newKeySecret()
	if err != nil {
		return "", err
	}
	var until time.Time
	if grace > 0 {
		until = time.Now().UTC().Add(grace)
	}
	if err := st.APIKeyRotate(ctx, k.ID, k.Hash, hash, until); err != nil {
		return "", fmt.Errorf("api key rotate: %w", err)
	}
	return secret, nil
}

func newKeySecret() (secret, hash string, err error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", fmt.Errorf("api key: random: %w", err)
	}
	secret = KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	return secret, HashAPIKey(secret), nil
}

// HashAPIKey is how a key is stored and looked up: hex SHA-256.
func HashAPIKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// keyCacheTTL is how long a verified key is trusted without asking the
// store again. A key is revoked on any replica (or by `moat keys revoke`,
// another process), and every other replica must refuse it within a
// second: each asks the store again for a key it has not read for
// keyCacheTTL. That costs one indexed primary-key read per key in use
// per replica per half second — nothing beside a request's own work —
// and needs no channel between replicas that could be lost. The replica
// that revokes forgets the key at once (forget).
const keyCacheTTL = 500 * time.Millisecond

// touchEvery is how often a server writes the last use of its keys: uses
// are gathered in memory and written once a minute (one UPDATE per key
// used in that minute), never per request.
const touchEvery = time.Minute

// authenticator resolves bearer tokens to principals.
type authenticator struct {
	st  *store.Store
	log *slog.Logger
	mu  sync.Mutex
	ttl time.Duration
	hit map[[sha256.Size]byte]cachedKey // by the key's SHA-256, as bytes: the hex form is made only to ask the store

	used      map[string]keyUse // by key id: the latest use since the last write
	lastTouch time.Time
	touching  sync.WaitGroup // background writes of uses; Add only under mu while !closed
	closed    bool
}

type cachedKey struct {
	key     *store.APIKey // nil: no such key, or revoked
	expires time.Time
}

type keyUse struct {
	at   time.Time
	addr string
}

var (
	errBadKey     = errors.New("the API key is unknown or revoked")
	errExpiredKey = errors.New("the API key has expired")
)

func newAuthenticator(st *store.Store, log *slog.Logger) *authenticator {
	return &authenticator{st: st, log: log, ttl: keyCacheTTL, hit: map[[sha256.Size]byte]cachedKey{},
		used: map[string]keyUse{}, lastTouch: time.Now()}
}

// principal returns the key for a bearer token, or errBadKey (unknown,
// revoked, or a previous secret past its grace) or errExpiredKey.
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
	k := c.key
	if k == nil {
		return nil, errBadKey
	}
	if hex.EncodeToString(sum[:]) != k.Hash {
		// The secret before the key's last rotation: valid until the
		// grace ends, and only if it is that secret (a store that
		// matched the hash to prev_hash said so; check it here too).
		if !now.Before(k.PrevUntil) || subtle.ConstantTimeCompare([]byte(hex.EncodeToString(sum[:])), []byte(k.PrevHash)) != 1 {
			return nil, errBadKey
		}
	}
	if k.Expired(now) {
		return nil, fmt.Errorf("%w (at %s); create a new one", errExpiredKey, k.ExpiresAt.Format(time.RFC3339))
	}
	return k, nil
}

// forget drops every cached entry of key id, so that this replica refuses
// it at once after revoking or rotating it.
func (a *authenticator) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for sum, c := range a.hit {
		if c.key != nil && c.key.ID == id {
			delete(a.hit, sum)
		}
	}
}

// use records a use of key id from addr; every touchEvery the uses
// gathered are written to the store, in the background.
func (a *authenticator) use(id, addr string, now time.Time) {
	a.mu.Lock()
	a.used[id] = keyUse{at: now, addr: addr}
	due := now.Sub(a.lastTouch) >= touchEvery && !a.closed
	var batch map[string]keyUse
	if due {
		batch, a.used, a.lastTouch = a.used, map[string]keyUse{}, now
		a.touching.Add(1)
	}
	a.mu.Unlock()
	if due {
		go func() {
			defer a.touching.Done()
			a.write(context.WithoutCancel(context.Background()), batch)
		}()
	}
}

// flush writes the uses gathered so far, now: before a listing shows
// them, and when the server closes.
func (a *authenticator) flush(ctx context.Context) {
	a.mu.Lock()
	batch := a.used
	a.used, a.lastTouch = map[string]keyUse{}, time.Now()
	a.mu.Unlock()
	a.write(ctx, batch)
}

func (a *authenticator) write(ctx context.Context, batch map[string]keyUse) {
	for id, u := range batch {
		// The client's address (clientAddr: the peer's, or behind one of
		// http.trusted_proxies the one it names; never a header from any
		// other peer).
		if err := a.st.APIKeyTouch(ctx, id, u.at, u.addr); err != nil && a.log != nil {
			a.log.Debug("api key: recording its last use", "key", id, "err", err)
		}
	}
}

// close waits for a background write of uses, then writes the rest.
func (a *authenticator) close(ctx context.Context) {
	a.mu.Lock()
	a.closed = true // no background write starts from here on
	a.mu.Unlock()
	a.touching.Wait()
	a.flush(ctx)
}

// The scopes of an API key: what routes and modules it may reach, beyond
// what its roles allow (a scope never grants what the roles do not). A
// key without scopes reaches everything its roles allow. The vocabulary
// is small on purpose, each scope a family of routes a holder would name:
//
//	invoke           call any module's actions, pages and key routes; list
//	                 modules and pages; answer confirmations
//	invoke:MODULE    the same for module MODULE only (no listing)
//	run              run code: /v1/runs, /v1/languages, sessions, E2B, Judge0
//	audit:read       read the audit trail (GET /v1/audit)
//	read             every GET route (audit included), nothing that changes
//	keys             manage API keys (/v1/keys), as the key's permission allows
//
// GET /v1/whoami answers every key. Everything else (uploading and
// deleting modules, rolling back, secrets, media changes) needs a key
// without scopes. The check is in one place, authenticate, for every
// route a key reaches, MCP tool calls included (each is a request to
// these routes).
var KeyScopes = []string{ScopeInvoke, ScopeRun, ScopeAuditRead, ScopeRead, ScopeKeys}

// The scopes (KeyScopes).
const (
	ScopeInvoke    = "invoke"
	ScopeRun       = "run"
	ScopeAuditRead = "audit:read"
	ScopeRead      = "read"
	ScopeKeys      = "keys"
)

// maxScopes bounds a key's list of scopes.
const maxScopes = 32

// ParseScopes checks scopes against the vocabulary and returns them
// sorted without duplicates; an error names the bad one and the valid.
func ParseScopes(scopes []string) ([]string, error) {
	if len(scopes) > maxScopes {
		return nil, fmt.Errorf("%d scopes; at most %d", len(scopes), maxScopes)
	}
	out := make([]string, 0, len(scopes))
	for _, sc := range scopes {
		if mod, ok := strings.CutPrefix(sc, ScopeInvoke+":"); ok {
			if err := host.ValidateModuleName(mod); err != nil {
				return nil, fmt.Errorf("scope %q: %w", clipAttr(sc), err)
			}
		} else if !slices.Contains(KeyScopes, sc) {
			return nil, fmt.Errorf("scope %q is not one of %s, invoke:MODULE", clipAttr(sc), strings.Join(KeyScopes, ", "))
		}
		out = append(out, sc)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// scopeCovers says whether holding have lets one hold want: the same
// scope, or invoke over invoke:MODULE, or read over audit:read.
func scopeCovers(have, want string) bool {
	return have == want || have == ScopeInvoke && strings.HasPrefix(want, ScopeInvoke+":") || have == ScopeRead && want == ScopeAuditRead
}

// scopesWithin says whether a key with scopes want is no wider than one
// with have: an unscoped have covers anything; an unscoped want is
// covered only by an unscoped have.
func scopesWithin(want, have []string) bool {
	if len(have) == 0 {
		return true
	}
	if len(want) == 0 {
		return false
	}
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h string) bool { return scopeCovers(h, w) }) {
			return false
		}
	}
	return true
}

// routeFamily is what a route is, as the scopes see it: the scope that
// reaches it (or "" for none but an unscoped key; "*" for any key), and
// the module it touches, if one.
type routeFamily struct {
	scope  string
	module string
	read   bool // a GET: the scope read reaches it too
	// listing: a list of the organization's modules (GET /v1/modules,
	// /v1/pages), which a key scoped to one module (invoke:M) may read
	// too; the handler keeps to what its scopes reach (inScope).
	listing bool
}

// inScope says whether a key with scopes reaches module m: what a
// listing shows it (the modules and pages lists, and through them MCP's
// tools), so a key scoped to one module sees that module, and only it.
func inScope(scopes []string, m string) bool {
	ok, _ := scopeAllows(scopes, routeFamily{scope: ScopeInvoke, module: m, read: true})
	return ok
}

// scopeAllows says whether a key with scopes may make a request to the
// route f; when not, why, in words the holder can act on.
func scopeAllows(scopes []string, f routeFamily) (bool, string) {
	if len(scopes) == 0 || f.scope == "*" {
		return true, ""
	}
	for _, sc := range scopes {
		switch {
		case f.read && sc == ScopeRead:
			return true, ""
		case f.scope == "":
		case sc == f.scope:
			return true, ""
		case f.scope == ScopeInvoke && f.module != "" && sc == ScopeInvoke+":"+f.module:
			return true, ""
		case f.scope == ScopeInvoke && f.listing && strings.HasPrefix(sc, ScopeInvoke+":"):
			return true, ""
		case f.scope == ScopeAuditRead && sc == ScopeRead:
			return true, ""
		}
	}
	need := f.scope
	switch {
	case need == "":
		need = "no scopes at all (a key without scopes)"
		if f.read {
			need = "the scope read, or no scopes"
		}
	case need == ScopeInvoke && f.module != "":
		need = fmt.Sprintf("the scope invoke or invoke:%s", f.module)
	default:
		need = "the scope " + need
	}
	return false, fmt.Sprintf("this API key's scopes (%s) do not reach this route: it needs %s; create a key with the scope it needs", strings.Join(scopes, ", "), need)
}
