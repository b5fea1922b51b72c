package secrets

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
)

// Recorder is where a Vault writes its audit events (an *audit.Log).
type Recorder interface {
	Record(ctx context.Context, e audit.Event)
}

// Vault is the operator's secrets over a store, under a key. It is safe
// for concurrent use.
type Vault struct {
	st    *store.Store
	key   *Key // nil: no key configured (ErrNoKey)
	audit Recorder
	// old are keys that open values but seal none: the keys of a
	// rotation under way (see Rotate), by ID.
	old map[string]*Key
}

// WithOldKeys makes v open values sealed under any of keys as well as
// under its own, and returns v; it seals under its own key only. Call it
// before v is used. A rotation (Rotate) needs every replica to open
// values under both the key it retires and the one it brings in.
func (v *Vault) WithOldKeys(keys ...*Key) *Vault {
	for _, k := range keys {
		if k == nil || v.key != nil && k.ID() == v.key.ID() {
			continue
		}
		if v.old == nil {
			v.old = map[string]*Key{}
		}
		v.old[k.ID()] = k
	}
	return v
}

// NewVault returns the vault of st under key (nil: none configured, and
// every method refuses with ErrNoKey), auditing to rec.
func NewVault(st *store.Store, key *Key, rec Recorder) *Vault {
	return &Vault{st: st, key: key, audit: rec}
}

var _ ops.SecretSource = (*Vault)(nil)

// Actor is who changes a secret, for the rows and the audit trail:
// Via is "cli" or "api", User and Org the principal ("" Org for the
// operator at the command line).
type Actor struct {
	Via       string
	User, Org string
}

func (a Actor) String() string {
	s := a.Via + ":" + a.User
	if a.Org != "" {
		s += "@" + a.Org
	}
	return s
}

// Set stores value as the secret name of org ("" for the operator's own)
// and reports whether it is new. The value must pass abi.CheckSecretValue;
// no error ever holds it.
func (v *Vault) Set(ctx context.Context, who Actor, org, name string, value []byte) (created bool, err error) {
	if v.key == nil {
		return false, fmt.Errorf("secrets: set %s: %w", name, ErrNoKey)
	}
	if err := abi.CheckSecretName(name); err != nil {
		return false, abi.Errorf(abi.CodeInvalidArgument, "secrets: set: %v", err)
	}
	if err := abi.CheckSecretValue(value); err != nil {
		return false, abi.Errorf(abi.CodeInvalidArgument, "secrets: set %s: %v", name, err)
	}
	ct, nonce, err := v.key.Seal(org, name, value)
	if err != nil {
		return false, err
	}
	created, err = v.st.SecretPut(ctx, store.Secret{Org: org, Name: name, Ciphertext: ct, Nonce: nonce, KeyID: v.key.ID(),
		UpdatedAt: time.Now().UTC(), UpdatedBy: who.String()})
	if err != nil {
		return false, err
	}
	what := "replaced"
	if created {
		what = "created"
	}
	v.record(ctx, who, org, name, "secret set", fmt.Sprintf("secret %s of %s %s by %s", name, orgName(org), what, who), map[string]string{"created": strconv.FormatBool(created)})
	return created, nil
}

// Delete removes the secret name of org; an unknown one wraps
// store.ErrSecretNotFound.
func (v *Vault) Delete(ctx context.Context, who Actor, org, name string) error {
	if v.key == nil {
		return fmt.Errorf("secrets: delete %s: %w", name, ErrNoKey)
	}
	if err := v.st.SecretDelete(ctx, org, name); err != nil {
		return err
	}
	v.record(ctx, who, org, name, "secret delete", fmt.Sprintf("secret %s of %s deleted by %s", name, orgName(org), who), nil)
	return nil
}

// List returns the secrets of org: names, times and who set them, never
// a value.
func (v *Vault) List(ctx context.Context, org string) ([]store.Secret, error) {
	if v.key == nil {
		return nil, fmt.Errorf("secrets: list: %w", ErrNoKey)
	}
	return v.st.Secrets(ctx, org)
}

// Secret implements ops.SecretSource: the value of the secret name of org
// ("" the operator's). A name with no secret wraps ops.ErrSecretNotFound;
// with no key configured, ErrNoKey. The value must go nowhere but the
// request that needs it.
func (v *Vault) Secret(ctx context.Context, org, name string) ([]byte, error) {
	if v.key == nil {
		return nil, fmt.Errorf("secrets: secret %s of %s: %w", name, orgName(org), ErrNoKey)
	}
	sec, err := v.st.SecretGet(ctx, org, name)
	if errors.Is(err, store.ErrSecretNotFound) { // ops.ErrSecretNotFound is the same sentinel
		return nil, fmt.Errorf("secrets: %s has no secret %s: %w", orgName(org), name, store.ErrSecretNotFound)
	}
	if err != nil {
		return nil, err
	}
	k := v.key
	if sec.KeyID != k.ID() {
		if k = v.old[sec.KeyID]; k == nil {
			return nil, fmt.Errorf("secrets: secret %s of %s was sealed under key %s, and this host holds key %s: start it with the key that sealed it (as secrets_old_key_files during a rotation), or set the secret again",
				name, orgName(org), sec.KeyID, v.key.ID())
		}
	}
	return k.Open(org, name, sec.Ciphertext, sec.Nonce)
}

func (v *Vault) record(ctx context.Context, who Actor, org, name, rule, reason string, attrs map[string]string) {
	if v.audit == nil {
		return
	}
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs["name"], attrs["by"] = name, who.String()
	v.audit.Record(ctx, audit.Event{Kind: audit.KindSecret, Decision: audit.Allow, User: who.User, Org: org, Rule: rule, Reason: reason, Attrs: attrs})
}
