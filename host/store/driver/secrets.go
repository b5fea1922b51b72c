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
}
