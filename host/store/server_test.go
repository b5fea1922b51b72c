package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
)

func TestAPIKeys(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	hash := strings.Repeat("ab", 32)
	k := store.APIKey{ID: "k1", Hash: hash, Org: "acme", User: "ann", Roles: []string{"admin", "dev"}, Name: "ci"}
	if err := s.APIKeyCreate(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.APIKeyCreate(ctx, store.APIKey{ID: "k2", Hash: hash, Org: "acme", User: "bob"}); err == nil {
		t.Error("a second key with the same hash was stored")
	}
	for _, bad := range []store.APIKey{{Hash: hash, Org: "o", User: "u"}, {ID: "x", Hash: "nothex", Org: "o", User: "u"}, {ID: "x", Hash: strings.Repeat("cd", 32)}} {
		if err := s.APIKeyCreate(ctx, bad); err == nil {
			t.Errorf("APIKeyCreate(%+v) succeeded", bad)
		}
	}
	got, err := s.APIKeyByHash(ctx, hash)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "k1" || got.Org != "acme" || got.User != "ann" || !slices.Equal(got.Roles, k.Roles) || got.Name != "ci" || !got.RevokedAt.IsZero() {
		t.Errorf("APIKeyByHash = %+v", got)
	}
	if _, err := s.APIKeyByHash(ctx, strings.Repeat("00", 32)); !errors.Is(err, store.ErrAPIKeyNotFound) {
		t.Errorf("unknown hash: %v, want ErrAPIKeyNotFound", err)
	}
	if err := s.APIKeyCreate(ctx, store.APIKey{ID: "k3", Hash: strings.Repeat("cd", 32), Org: "other", User: "eve"}); err != nil {
		t.Fatal(err)
	}
	for org, want := range map[string]int{"": 2, "acme": 1, "other": 1, "none": 0} {
		list, err := s.APIKeys(ctx, org)
		if err != nil || len(list) != want {
			t.Errorf("APIKeys(%q) = %d keys, %v; want %d", org, len(list), err, want)
		}
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.APIKeyRevoke(ctx, "k1", at); err != nil {
		t.Fatal(err)
	}
	if err := s.APIKeyRevoke(ctx, "k1", at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.APIKeyByHash(ctx, hash); !got.RevokedAt.Equal(at) {
		t.Errorf("RevokedAt = %v, want the first revocation %v", got.RevokedAt, at)
	}
	if err := s.APIKeyRevoke(ctx, "nope", at); !errors.Is(err, store.ErrAPIKeyNotFound) {
		t.Errorf("revoke unknown: %v", err)
	}
}

func TestModuleVersions(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	d1, d2 := strings.Repeat("11", 32), strings.Repeat("22", 32)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	puts := []store.ModuleVersion{
		{Org: "acme", Name: "hello", Digest: d1, Version: "1.0.0", Size: 10, Manifest: []byte("name: hello"), UploadedBy: "ann", UploadedAt: t0},
		{Org: "acme", Name: "hello", Digest: d2, Version: "1.1.0", Size: 20, UploadedBy: "ann", UploadedAt: t0.Add(time.Minute)},
		{Org: "other", Name: "hello", Digest: d1, Version: "1.0.0", Size: 10, UploadedBy: "eve", UploadedAt: t0},
	}
	for _, v := range puts {
		if _, err := s.ModulePut(ctx, v, store.ModuleQuota{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ModulePut(ctx, store.ModuleVersion{Org: "acme", Name: "x", Digest: "short"}, store.ModuleQuota{}); err == nil {
		t.Error("a bad digest was stored")
	}
	mods, err := s.Modules(ctx, "acme")
	if err != nil || len(mods) != 1 || mods[0].Digest != d2 || !mods[0].Current || mods[0].Version != "1.1.0" {
		t.Fatalf("Modules(acme) = %+v, %v; want hello at %s", mods, err, d2)
	}
	vs, err := s.ModuleVersions(ctx, "acme", "hello")
	if err != nil || len(vs) != 2 || vs[0].Digest != d2 || !vs[0].Current || vs[1].Current || string(vs[1].Manifest) != "name: hello" {
		t.Fatalf("ModuleVersions = %+v, %v", vs, err)
	}
	// Re-uploading the first version makes it current again.
	if _, err := s.ModulePut(ctx, puts[0], store.ModuleQuota{}); err != nil {
		t.Fatal(err)
	}
	if mods, _ := s.Modules(ctx, "acme"); mods[0].Digest != d1 {
		t.Errorf("after re-upload the current digest is %s, want %s", mods[0].Digest, d1)
	}
	orphans, err := s.ModuleDelete(ctx, "acme", "hello")
	if err != nil {
		t.Fatal(err)
	}
	// d1 is still used by the other organization; d2 by no one.
	if !slices.Equal(orphans, []string{d2}) {
		t.Errorf("orphans = %v, want [%s]", orphans, d2)
	}
	if _, err := s.ModuleVersions(ctx, "acme", "hello"); !errors.Is(err, store.ErrModuleNotFound) {
		t.Errorf("versions after delete: %v", err)
	}
	if _, err := s.ModuleDelete(ctx, "acme", "hello"); !errors.Is(err, store.ErrModuleNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if all, _ := s.Modules(ctx, ""); len(all) != 1 || all[0].Org != "other" {
		t.Errorf("Modules(\"\") = %+v", all)
	}
}
