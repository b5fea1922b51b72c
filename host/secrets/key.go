// Package secrets keeps the operator's secrets: values a module's
// requests may use (a header an http grant injects, an AI provider's
// key) but that no guest ever reads. Each value is sealed before it
// reaches the store (package host/store keeps only ciphertext) and opened
// only when a request needs it.
//
// Sealing is AES-256-GCM under one key the operator holds outside the
// store ($MOAT_SECRETS_KEY, or a file only its owner can read), with the
// organization and the name as additional data: the tag covers where a
// value belongs, so a row copied under another organization or another
// name (by anyone who can write the database but not read the key) fails
// to open instead of handing one organization's credential to another.
// Each row records the id of the key that sealed it, so that a host
// started with another key says so rather than reporting a forgery.
//
// A Vault is the front the CLI (`moat secrets`), the server's admin
// routes and the host use: it validates, seals, stores, audits every
// change (who, which organization, which name; never the value) and, as
// an ops.SecretSource, opens a value for the request that injects it.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// EnvKey names the environment variable holding the key: the standard
// base64 of 32 random bytes (head -c 32 /dev/urandom | base64). It wins
// over a key file.
const EnvKey = "MOAT_SECRETS_KEY"

// KeySize is the key's length in bytes: AES-256.
const KeySize = 32

// ErrNoKey is returned (wrapped) by everything that needs the key when
// none is configured. Its message says how to configure one.
var ErrNoKey = errors.New("no secrets key is configured: set $" + EnvKey + " to the base64 of 32 random bytes (head -c 32 /dev/urandom | base64), " +
	"or secrets_key_file in the server config to a file holding it that only its owner can read (chmod 600)")

// Key seals and opens secrets. It is safe for concurrent use.
type Key struct {
	aead cipher.AEAD
	id   string
}

// ParseKey reads a key written as the standard base64 of KeySize bytes
// (surrounding white space ignored). Its errors never hold the key.
func ParseKey(s string) (*Key, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("secrets key: not standard base64 (make one with head -c 32 /dev/urandom | base64)")
	}
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secrets key: %d bytes once decoded; it must be %d (head -c 32 /dev/urandom | base64)", len(raw), KeySize)
	}
	return newKey(raw)
}

func newKey(raw []byte) (*Key, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	sum := sha256.Sum256(append([]byte("moat secrets key id v1\x00"), raw...))
	return &Key{aead: aead, id: hex.EncodeToString(sum[:8])}, nil
}

// LoadKeyFile reads a key from the first line of path. The file must be
// readable by its owner alone: a key file that group or others can read
// is refused, naming its mode and the fix, before its content is read.
func LoadKeyFile(path string) (*Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets key file %s has mode %04o: group or others can read it; make it readable by its owner only (chmod 600 %s)", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	k, err := ParseKey(line)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadKey is the key a process configures: $MOAT_SECRETS_KEY when set,
// else the file at file when file is not empty, else nil (no key: the
// secrets commands and routes, and any grant injecting a secret, refuse
// with ErrNoKey).
func LoadKey(file string) (*Key, error) {
	if v := os.Getenv(EnvKey); v != "" {
		k, err := ParseKey(v)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", EnvKey, err)
		}
		return k, nil
	}
	if file == "" {
		return nil, nil
	}
	return LoadKeyFile(file)
}

// ID names the key without revealing it: 16 hex digits of a hash of it.
// Rows record it, so that a value sealed under another key is reported as
// such.
func (k *Key) ID() string { return k.id }

// additional is what the tag binds a value to: a version, the
// organization and the name, each with its length.
func additional(org, name string) []byte {
	ad := make([]byte, 0, 32+len(org)+len(name))
	ad = append(ad, "moat secret v1\x00"...)
	ad = binary.BigEndian.AppendUint32(ad, uint32(len(org)))
	ad = append(ad, org...)
	ad = binary.BigEndian.AppendUint32(ad, uint32(len(name)))
	return append(ad, name...)
}

// Seal encrypts value for the secret name of org under a fresh random
// nonce.
func (k *Key) Seal(org, name string, value []byte) (ciphertext, nonce []byte, err error) {
	nonce = make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, fmt.Errorf("secrets: random nonce: %w", err)
	}
	return k.aead.Seal(nil, nonce, value, additional(org, name)), nonce, nil
}

// ErrTampered is returned (wrapped) for a sealed value that does not open
// under the key for its organization and name: changed, or copied from
// another row.
var ErrTampered = errors.New("the sealed value does not open")

// Open decrypts the value of the secret name of org. A value sealed for
// another organization or name, or changed, wraps ErrTampered.
func (k *Key) Open(org, name string, ciphertext, nonce []byte) ([]byte, error) {
	if len(nonce) != k.aead.NonceSize() {
		return nil, fmt.Errorf("secrets: secret %s of %s: a nonce of %d bytes: %w", name, orgName(org), len(nonce), ErrTampered)
	}
	v, err := k.aead.Open(nil, nonce, ciphertext, additional(org, name))
	if err != nil {
		return nil, fmt.Errorf("secrets: secret %s of %s: the tag does not verify for this organization and name (the row was changed or copied from another): %w",
			name, orgName(org), ErrTampered)
	}
	return v, nil
}

// orgName names an organization in messages; "" is the operator.
func orgName(org string) string {
	if org == "" {
		return "the operator"
	}
	return "organization " + org
}
