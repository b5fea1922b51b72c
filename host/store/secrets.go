package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// Secret is one of the operator's secrets as the store keeps it: sealed.
// The store never sees a value in the clear; package host/secrets seals
// and opens them (AES-256-GCM, the organization and name bound in as
// additional data, so a row copied under another organization or name
// does not open). Org "" is the operator's own (an AI provider's key);
// any other, that organization's (a header an http grant injects into its
// requests).
type Secret struct {
	Org, Name  string
	Ciphertext []byte // the sealed value with its tag; nil in a listing
	Nonce      []byte // nil in a listing
	KeyID      string // which key sealed it (package host/secrets' Key.ID)
	CreatedAt  time.Time
	UpdatedAt  time.Time
	CreatedBy  string // who stored the first value: "cli:USER" or "api:USER@ORG"
	UpdatedBy  string // who stored the current value
}

// MaxSecretsPerOrg bounds the secrets of one organization: an
// organization's admin may set them through the API.
const MaxSecretsPerOrg = 1000

// Bounds of a sealed value and of the fields a row carries.
const (
	maxSealedBytes  = abi.MaxSecretBytes + 64
	maxSecretKeyID  = 64
	maxSecretBy     = 300
	secretNonceSize = 12
)

// ErrSecretNotFound is returned (wrapped) for a name that has no secret
// in the organization.
var ErrSecretNotFound = errors.New("no such secret")

// ErrSecretQuota is returned (wrapped) when an organization already holds
// MaxSecretsPerOrg secrets.
var ErrSecretQuota = errors.New("too many secrets")

// checkSecretScope validates an organization ("" is the operator's own)
// and a secret name.
func checkSecretScope(op, org, name string) error {
	if err := checkSecretOrg(op, org); err != nil {
		return err
	}
	if err := abi.CheckSecretName(name); err != nil {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: %v", op, err)
	}
	return nil
}

// checkSecretOrg accepts "" (the operator's own) or an organization name
// as principals carry them: 1-128 characters of letters, digits and
// . _ - @ +.
func checkSecretOrg(op, org string) error {
	if len(org) > 128 {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: organization is %d bytes; the limit is 128", op, len(org))
	}
	for _, r := range org {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' || r == '@' || r == '+'
		if !ok {
			return abi.Errorf(abi.CodeInvalidArgument, "%s: organization %q: use letters, digits and . _ - @ +", op, org)
		}
	}
	return nil
}

// SecretPut stores a sealed secret, replacing the value of the same
// organization and name (whose CreatedAt and CreatedBy stay). UpdatedAt
// defaults to now, CreatedAt to UpdatedAt. It reports whether the secret
// is new. An organization holding MaxSecretsPerOrg secrets gets no new
// one (ErrSecretQuota, wrapped).
func (s *Store) SecretPut(ctx context.Context, sec Secret) (created bool, err error) {
	sb, err := s.secretBackend()
	if err != nil {
		return false, err
	}
	const op = "secret.put"
	if err := checkSecretScope(op, sec.Org, sec.Name); err != nil {
		return false, err
	}
	switch {
	case len(sec.Ciphertext) == 0 || len(sec.Ciphertext) > maxSealedBytes:
		return false, abi.Errorf(abi.CodeInvalidArgument, "%s %s: the sealed value is %d bytes; it must be 1 to %d", op, sec.Name, len(sec.Ciphertext), maxSealedBytes)
	case len(sec.Nonce) != secretNonceSize:
		return false, abi.Errorf(abi.CodeInvalidArgument, "%s %s: the nonce is %d bytes; it must be %d", op, sec.Name, len(sec.Nonce), secretNonceSize)
	case sec.KeyID == "" || len(sec.KeyID) > maxSecretKeyID:
		return false, abi.Errorf(abi.CodeInvalidArgument, "%s %s: the key id must be 1 to %d bytes", op, sec.Name, maxSecretKeyID)
	case len(sec.UpdatedBy) > maxSecretBy || len(sec.CreatedBy) > maxSecretBy:
		return false, abi.Errorf(abi.CodeInvalidArgument, "%s %s: who set it is over %d bytes", op, sec.Name, maxSecretBy)
	}
	if sec.UpdatedAt.IsZero() {
		sec.UpdatedAt = time.Now().UTC()
	}
	if sec.CreatedAt.IsZero() {
		sec.CreatedAt = sec.UpdatedAt
	}
	if sec.CreatedBy == "" {
		sec.CreatedBy = sec.UpdatedBy
	}
	upd, ok1 := nanos(sec.UpdatedAt)
	crt, ok2 := nanos(sec.CreatedAt)
	if !ok1 || !ok2 {
		return false, abi.Errorf(abi.CodeInvalidArgument, "%s %s: a time is out of range", op, sec.Name)
	}
	created, err = sb.SecretPut(ctx, driver.SecretRow{
		Org: sec.Org, Name: sec.Name, Ciphertext: sec.Ciphertext, Nonce: sec.Nonce, KeyID: sec.KeyID,
		CreatedAt: crt, UpdatedAt: upd, CreatedBy: sec.CreatedBy, UpdatedBy: sec.UpdatedBy,
	}, MaxSecretsPerOrg)
	if errors.Is(err, driver.ErrOverQuota) {
		return false, fmt.Errorf("store: %s org=%q %s: the organization holds %d secrets, the most one may; delete one first: %w",
			op, sec.Org, sec.Name, MaxSecretsPerOrg, ErrSecretQuota)
	}
	if err != nil {
		return false, fmt.Errorf("store: %s org=%q %s: %w", op, sec.Org, sec.Name, err)
	}
	return created, nil
}

// SecretGet returns the sealed secret name of org; an unknown one wraps
// ErrSecretNotFound.
func (s *Store) SecretGet(ctx context.Context, org, name string) (*Secret, error) {
	sb, err := s.secretBackend()
	if err != nil {
		return nil, err
	}
	const op = "secret.get"
	if err := checkSecretScope(op, org, name); err != nil {
		return nil, err
	}
	r, err := sb.SecretGet(ctx, org, name)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("store: %s org=%q %s: %w", op, org, name, ErrSecretNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %s org=%q %s: %w", op, org, name, err)
	}
	sec := fromSecretRow(r)
	return &sec, nil
}

// Secrets lists org's secrets by name: names, key ids, times and who set
// them, never a value (Ciphertext and Nonce are nil).
func (s *Store) Secrets(ctx context.Context, org string) ([]Secret, error) {
	sb, err := s.secretBackend()
	if err != nil {
		return nil, err
	}
	const op = "secret.list"
	if err := checkSecretOrg(op, org); err != nil {
		return nil, err
	}
	rows, err := sb.Secrets(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("store: %s org=%q: %w", op, org, err)
	}
	out := make([]Secret, len(rows))
	for i := range rows {
		out[i] = fromSecretRow(&rows[i])
		out[i].Ciphertext, out[i].Nonce = nil, nil
	}
	return out, nil
}

// SecretDelete deletes the secret name of org; an unknown one wraps
// ErrSecretNotFound.
func (s *Store) SecretDelete(ctx context.Context, org, name string) error {
	sb, err := s.secretBackend()
	if err != nil {
		return err
	}
	const op = "secret.delete"
	if err := checkSecretScope(op, org, name); err != nil {
		return err
	}
	err = sb.SecretDelete(ctx, org, name)
	if errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("store: %s org=%q %s: %w", op, org, name, ErrSecretNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: %s org=%q %s: %w", op, org, name, err)
	}
	return nil
}

func fromSecretRow(r *driver.SecretRow) Secret {
	return Secret{Org: r.Org, Name: r.Name, Ciphertext: r.Ciphertext, Nonce: r.Nonce, KeyID: r.KeyID,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt), CreatedBy: r.CreatedBy, UpdatedBy: r.UpdatedBy}
}

// ErrSecretChanged is returned (wrapped) by SecretReseal when the secret
// was set or deleted since it was read.
var ErrSecretChanged = errors.New("the secret changed meanwhile")

// SecretsNotUnder returns up to limit secrets, sealed values included,
// that keyID did not seal, after (afterOrg, afterName) in (org, name)
// byte order, every organization's and the operator's: the pages of a
// key rotation (package host/secrets, Rotate).
func (s *Store) SecretsNotUnder(ctx context.Context, keyID, afterOrg, afterName string, limit int) ([]Secret, error) {
	sb, err := s.secretBackend()
	if err != nil {
		return nil, err
	}
	limit = min(max(limit, 1), 1000)
	rows, err := sb.SecretsNotUnder(ctx, keyID, afterOrg, afterName, limit)
	if err != nil {
		return nil, fmt.Errorf("store: secret.not_under %s: %w", keyID, err)
	}
	out := make([]Secret, len(rows))
	for i := range rows {
		out[i] = fromSecretRow(&rows[i])
	}
	return out, nil
}

// SecretReseal stores sec's new sealing (Ciphertext, Nonce, KeyID) of an
// unchanged value in place of the one read (oldKeyID, oldNonce): only
// while the row is still that one, so a value set meanwhile (by a
// replica, under either key) is never overwritten with an older one;
// then it wraps ErrSecretChanged. UpdatedAt and UpdatedBy stay: the
// value did not change.
func (s *Store) SecretReseal(ctx context.Context, sec Secret, oldKeyID string, oldNonce []byte) error {
	sb, err := s.secretBackend()
	if err != nil {
		return err
	}
	const op = "secret.reseal"
	if err := checkSecretScope(op, sec.Org, sec.Name); err != nil {
		return err
	}
	switch {
	case len(sec.Ciphertext) == 0 || len(sec.Ciphertext) > maxSealedBytes:
		return abi.Errorf(abi.CodeInvalidArgument, "%s %s: the sealed value is %d bytes; it must be 1 to %d", op, sec.Name, len(sec.Ciphertext), maxSealedBytes)
	case len(sec.Nonce) != secretNonceSize:
		return abi.Errorf(abi.CodeInvalidArgument, "%s %s: the nonce is %d bytes; it must be %d", op, sec.Name, len(sec.Nonce), secretNonceSize)
	case sec.KeyID == "" || len(sec.KeyID) > maxSecretKeyID:
		return abi.Errorf(abi.CodeInvalidArgument, "%s %s: the key id must be 1 to %d bytes", op, sec.Name, maxSecretKeyID)
	}
	err = sb.SecretReseal(ctx, driver.SecretRow{Org: sec.Org, Name: sec.Name, Ciphertext: sec.Ciphertext, Nonce: sec.Nonce, KeyID: sec.KeyID}, oldKeyID, oldNonce)
	if errors.Is(err, driver.ErrConflict) {
		return fmt.Errorf("store: %s org=%q %s: %w", op, sec.Org, sec.Name, ErrSecretChanged)
	}
	if err != nil {
		return fmt.Errorf("store: %s org=%q %s: %w", op, sec.Org, sec.Name, err)
	}
	return nil
}
