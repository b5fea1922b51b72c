package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// sealed is a stand-in for a sealed value (the store never opens one):
// distinct bytes per (org, name, version), of a valid shape.
func sealed(org, name string, version int) store.Secret {
	ct := []byte(fmt.Sprintf("ct|%s|%s|%d|", org, name, version))
	return store.Secret{Org: org, Name: name, Ciphertext: append(ct, bytes.Repeat([]byte{0xa5}, 16)...),
		Nonce: bytes.Repeat([]byte{byte(version)}, 12), KeyID: "k1", UpdatedBy: "cli:root"}
}

// testSecretsContract: a sealed secret comes back byte for byte under its
// organization and name only; storing it again replaces the value and
// keeps when and by whom it was created; a listing has names, times and
// authors but never a value; delete removes it, and a second delete is
// not found. The operator's own ("" organization) is a scope of its own.
func (su suite) testSecretsContract(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	if _, err := s.SecretGet(ctx, "acme", "github"); !errors.Is(err, store.ErrSecretNotFound) {
		t.Fatalf("SecretGet before any put = %v, want ErrSecretNotFound", err)
	}
	first := sealed("acme", "github", 1)
	first.UpdatedAt = time.Unix(1000, 0).UTC()
	if created, err := s.SecretPut(ctx, first); err != nil || !created {
		t.Fatalf("SecretPut = %v, %v; want created", created, err)
	}
	second := sealed("acme", "github", 2)
	second.UpdatedAt, second.UpdatedBy = time.Unix(2000, 0).UTC(), "api:ann@acme"
	if created, err := s.SecretPut(ctx, second); err != nil || created {
		t.Fatalf("second SecretPut = %v, %v; want an update", created, err)
	}
	got, err := s.SecretGet(ctx, "acme", "github")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Ciphertext, second.Ciphertext) || !bytes.Equal(got.Nonce, second.Nonce) || got.KeyID != "k1" ||
		!got.CreatedAt.Equal(first.UpdatedAt) || !got.UpdatedAt.Equal(second.UpdatedAt) || got.CreatedBy != "cli:root" || got.UpdatedBy != "api:ann@acme" {
		t.Fatalf("SecretGet = %+v", got)
	}
	for _, sc := range []struct{ org, name string }{{"", "github"}, {"acme2", "github"}, {"acme", "GitHub"}, {"acme", "github2"}} {
		if _, err := s.SecretGet(ctx, sc.org, sc.name); !errors.Is(err, store.ErrSecretNotFound) {
			t.Errorf("SecretGet(%q, %q) = %v, want ErrSecretNotFound", sc.org, sc.name, err)
		}
	}
	op := sealed("", "openai", 1)
	if _, err := s.SecretPut(ctx, op); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"zeta", "alpha", "Beta"} {
		if _, err := s.SecretPut(ctx, sealed("acme", name, 1)); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.Secrets(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range list {
		names = append(names, x.Name)
		if x.Ciphertext != nil || x.Nonce != nil || x.Org != "acme" {
			t.Errorf("a listing holds %+v: a value, or another organization", x)
		}
	}
	if strings.Join(names, ",") != "Beta,alpha,github,zeta" {
		t.Errorf("Secrets(acme) = %v, want Beta,alpha,github,zeta (bytewise order)", names)
	}
	if ops, err := s.Secrets(ctx, ""); err != nil || len(ops) != 1 || ops[0].Name != "openai" {
		t.Errorf("Secrets(\"\") = %+v, %v; want only the operator's openai", ops, err)
	}
	if err := s.SecretDelete(ctx, "acme", "github"); err != nil {
		t.Fatal(err)
	}
	if err := s.SecretDelete(ctx, "acme", "github"); !errors.Is(err, store.ErrSecretNotFound) {
		t.Errorf("a second delete = %v, want ErrSecretNotFound", err)
	}
	if err := s.SecretDelete(ctx, "", "github"); !errors.Is(err, store.ErrSecretNotFound) {
		t.Errorf("delete of the operator's github = %v, want ErrSecretNotFound", err)
	}
	if _, err := s.SecretGet(ctx, "", "openai"); err != nil {
		t.Errorf("the operator's secret after acme's delete: %v", err)
	}
}

// testSecretsValidation: names and organizations built to break SQL or a
// path, values of the wrong shape: each is refused with invalid_argument
// and nothing is stored.
func (su suite) testSecretsValidation(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	ok := sealed("acme", "good", 1)
	bad := map[string]store.Secret{}
	for _, name := range []string{"", "a b", "x'; DROP TABLE secrets; --", "../etc", ".hidden", "-dash", strings.Repeat("n", 65), "ü", "a\x00b", "a/b", "%2e"} {
		b := ok
		b.Name = name
		bad["name "+name] = b
	}
	for _, org := range []string{"a b", "o'r", "a/b", strings.Repeat("o", 129), "acme\n"} {
		b := ok
		b.Org = org
		bad["org "+org] = b
	}
	b := ok
	b.Ciphertext = nil
	bad["no ciphertext"] = b
	b = ok
	b.Ciphertext = make([]byte, abi.MaxSecretBytes+65)
	bad["ciphertext too long"] = b
	b = ok
	b.Nonce = b.Nonce[:8]
	bad["short nonce"] = b
	b = ok
	b.KeyID = ""
	bad["no key id"] = b
	for what, sec := range bad {
		_, err := s.SecretPut(ctx, sec)
		var ae *abi.Error
		if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
			t.Errorf("%s: SecretPut = %v, want invalid_argument", what, err)
		}
	}
	for _, org := range []string{"", "acme", "o'r"} {
		if list, _ := s.Secrets(ctx, org); len(list) != 0 {
			t.Errorf("Secrets(%q) = %v after refusals", org, list)
		}
	}
	if _, err := s.SecretGet(ctx, "acme", "x' OR '1'='1"); err == nil || errors.Is(err, store.ErrSecretNotFound) {
		t.Errorf("SecretGet with SQL in the name = %v, want invalid_argument", err)
	}
}

// testSecretsQuota: an organization holds at most store.MaxSecretsPerOrg
// secrets, even when puts race at the bound; replacing one at the bound
// is allowed; another organization is not counted.
func (su suite) testSecretsQuota(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	const racers = 24
	for i := range store.MaxSecretsPerOrg - 5 {
		if _, err := s.SecretPut(ctx, sealed("acme", fmt.Sprintf("s%04d", i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var stored, refused atomic.Int32
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.SecretPut(ctx, sealed("acme", fmt.Sprintf("race%02d", i), 1))
			switch {
			case err == nil:
				stored.Add(1)
			case errors.Is(err, store.ErrSecretQuota):
				refused.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if stored.Load() != 5 || refused.Load() != racers-5 {
		t.Fatalf("%d stored and %d refused at the bound; want 5 and %d", stored.Load(), refused.Load(), racers-5)
	}
	if list, err := s.Secrets(ctx, "acme"); err != nil || len(list) != store.MaxSecretsPerOrg {
		t.Fatalf("acme holds %d secrets (%v), want %d", len(list), err, store.MaxSecretsPerOrg)
	}
	if _, err := s.SecretPut(ctx, sealed("acme", "s0000", 2)); err != nil {
		t.Errorf("replacing a secret at the bound: %v", err)
	}
	if _, err := s.SecretPut(ctx, sealed("other", "s0000", 1)); err != nil {
		t.Errorf("another organization at acme's bound: %v", err)
	}
}
