package driver

import "context"

// SecretRow is an operator's secret as stored: the value sealed by the
// host (package host/secrets), never in the clear. Org "" is the
// operator's own. Times are unix nanoseconds.
type SecretRow struct {
	Org, Name            string
	Ciphertext, Nonce    []byte
	KeyID                string
	CreatedAt, UpdatedAt int64
	CreatedBy, UpdatedBy string
}

// SecretBackend is what a backend implements for the operator's secrets.
type SecretBackend interface {
	// SecretPut stores r under (Org, Name): a new row, or the new value
	// of an existing one, which keeps its CreatedAt and CreatedBy. A new
	// row is refused with ErrOverQuota when Org already holds maxPerOrg
	// secrets; the count and the insert are one transaction.
	SecretPut(ctx context.Context, r SecretRow, maxPerOrg int) (created bool, err error)
	// SecretGet returns the row of (org, name), or ErrNotFound.
	SecretGet(ctx context.Context, org, name string) (*SecretRow, error)
	// Secrets lists org's rows by name, without Ciphertext and Nonce.
	Secrets(ctx context.Context, org string) ([]SecretRow, error)
	// SecretDelete deletes the row of (org, name), or reports ErrNotFound.
	SecretDelete(ctx context.Context, org, name string) error
	// SecretsNotUnder returns up to limit rows, with Ciphertext and
	// Nonce, whose key_id is not keyID, after (afterOrg, afterName) in
	// (org, name) order: a key rotation's pages.
	SecretsNotUnder(ctx context.Context, keyID, afterOrg, afterName string, limit int) ([]SecretRow, error)
	// SecretReseal replaces the sealed value of (r.Org, r.Name) with r's
	// Ciphertext, Nonce and KeyID only while the row still has oldKeyID
	// and oldNonce (no one set it meanwhile); otherwise ErrConflict.
	SecretReseal(ctx context.Context, r SecretRow, oldKeyID string, oldNonce []byte) error
}
