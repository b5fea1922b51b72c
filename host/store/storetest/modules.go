package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
)

// TestModuleQuota: ModulePut prunes by the stated rule (the newest
// keep_per_module versions of each module, then the organization's oldest
// versions that are not current) and refuses, changing nothing, what does
// not fit with only current versions left.
func (su suite) testModuleQuota(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	digest := func(i int) string { return fmt.Sprintf("%064x", i) }
	type put struct {
		org, name string
		size      int64
	}
	tests := []struct {
		name       string
		q          store.ModuleQuota
		before     []put // stored one minute apart, oldest first
		next       put
		wantPruned []int // indexes into before, oldest first
		wantErr    string
	}{
		{name: "keep newest 3 of a module", q: store.ModuleQuota{KeepPerModule: 3},
			before: []put{{"acme", "a", 1}, {"acme", "a", 1}, {"acme", "a", 1}}, next: put{"acme", "a", 1}, wantPruned: []int{0}},
		{name: "keep per module counts each module apart", q: store.ModuleQuota{KeepPerModule: 1},
			before: []put{{"acme", "a", 1}, {"acme", "b", 1}}, next: put{"acme", "a", 1}, wantPruned: []int{0}},
		{name: "bytes: oldest non-current version goes first", q: store.ModuleQuota{Bytes: 30},
			before: []put{{"acme", "a", 10}, {"acme", "b", 10}, {"acme", "a", 10}}, next: put{"acme", "b", 10}, wantPruned: []int{0}},
		{name: "bytes: a current version is never pruned", q: store.ModuleQuota{Bytes: 25},
			before: []put{{"acme", "a", 10}, {"acme", "b", 10}}, next: put{"acme", "c", 10}, wantErr: "organization acme would keep 30 module bytes, over its quota of 25"},
		{name: "versions: pruned across modules", q: store.ModuleQuota{Versions: 2},
			before: []put{{"acme", "a", 1}, {"acme", "b", 1}, {"acme", "a", 1}}, next: put{"acme", "b", 1}, wantPruned: []int{0, 1}},
		{name: "versions: only current ones left", q: store.ModuleQuota{Versions: 2},
			before: []put{{"acme", "a", 1}, {"acme", "b", 1}}, next: put{"acme", "c", 1}, wantErr: "would keep 3 module versions, over its quota of 2"},
		{name: "one version bigger than the quota", q: store.ModuleQuota{Bytes: 100},
			before: nil, next: put{"acme", "a", 101}, wantErr: "would keep 101 module bytes"},
		{name: "another organization's versions do not count", q: store.ModuleQuota{Versions: 1},
			before: []put{{"globex", "a", 1}, {"globex", "b", 1}}, next: put{"acme", "a", 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := su.open(t)
			var stored []store.ModuleVersion
			for i, p := range tt.before {
				v := store.ModuleVersion{Org: p.org, Name: p.name, Digest: digest(i + 1), Size: p.size, UploadedAt: t0.Add(time.Duration(i) * time.Minute)}
				if _, err := s.ModulePut(ctx, v, store.ModuleQuota{}); err != nil {
					t.Fatal(err)
				}
				stored = append(stored, v)
			}
			usage, _ := s.ModuleUsage(ctx, tt.next.org)
			next := store.ModuleVersion{Org: tt.next.org, Name: tt.next.name, Digest: digest(100), Size: tt.next.size, UploadedAt: t0.Add(time.Hour)}
			pruned, err := s.ModulePut(ctx, next, tt.q)
			if tt.wantErr != "" {
				var qe *store.QuotaError
				if !errors.As(err, &qe) || !errors.Is(err, store.ErrQuota) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a QuotaError with %q", err, tt.wantErr)
				}
				if after, _ := s.ModuleUsage(ctx, tt.next.org); after != usage {
					t.Errorf("a refused put changed the usage: %+v, was %+v", after, usage)
				}
				if _, err := s.ModuleVersions(ctx, next.Org, next.Name); err == nil && tt.next.name == "c" {
					t.Error("the refused version was stored")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, pv := range pruned.Versions {
				i := slices.IndexFunc(stored, func(v store.ModuleVersion) bool { return v.Digest == pv.Digest })
				got = append(got, i)
				if _, err := s.ModuleVersions(ctx, pv.Org, pv.Name); err == nil {
					vs, _ := s.ModuleVersions(ctx, pv.Org, pv.Name)
					if slices.ContainsFunc(vs, func(v store.ModuleVersion) bool { return v.Digest == pv.Digest }) {
						t.Errorf("pruned version %d is still listed", i)
					}
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.wantPruned) {
				t.Errorf("pruned %v, want %v", got, tt.wantPruned)
			}
			// Every pruned digest is an orphan here (one version each).
			if len(pruned.Orphans) != len(pruned.Versions) {
				t.Errorf("orphans %v for pruned %v", pruned.Orphans, got)
			}
			cur, _ := s.Modules(ctx, tt.next.org)
			for _, v := range cur {
				if slices.ContainsFunc(pruned.Versions, func(p store.ModuleVersion) bool { return p.Digest == v.Digest }) {
					t.Errorf("current version of %s was pruned", v.Name)
				}
			}
		})
	}
}

// TestConfirmationBinding: a confirmation used on a module with another
// binding is refused and used up, so swapping the module back cannot
// revive it.
func (su suite) testConfirmationBinding(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now().UTC()
	c := newConfirmation("tok-bind", now)
	createConfirmation(t, s, c)
	other := strings.Repeat("cd", 32)
	got, err := s.ConfirmationUse(ctx, c.TokenHash, "acme", "alice", other, now.Add(time.Second))
	if !errors.Is(err, store.ErrConfirmationStale) || got == nil || got.Action != "refund" || got.Binding != testBinding {
		t.Fatalf("use on another module: %+v, %v; want ErrConfirmationStale with the confirmation", got, err)
	}
	if !strings.Contains(err.Error(), "requested on module abababababab, used on cdcdcdcdcdcd") {
		t.Errorf("error %q does not name both bindings", err)
	}
	if _, err := s.ConfirmationUse(ctx, c.TokenHash, "acme", "alice", testBinding, now.Add(2*time.Second)); !errors.Is(err, store.ErrConfirmationUsed) {
		t.Errorf("after a stale use, the right module: %v, want ErrConfirmationUsed", err)
	}
	bad := newConfirmation("tok-unbound", now)
	bad.Binding = ""
	if err := s.ConfirmationCreate(ctx, bad); err == nil || !strings.Contains(err.Error(), "binding") {
		t.Errorf("an unbound confirmation: %v", err)
	}
}

func (su suite) testAPIKeys(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
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
	if err := s.APIKeyRotate(ctx, "k1", hash, strings.Repeat("ef", 32), time.Time{}); !errors.Is(err, store.ErrAPIKeyChanged) {
		t.Errorf("rotating a revoked key: %v, want ErrAPIKeyChanged", err)
	}

	// Scopes, expiry, rotation (a compare-and-swap) and last use.
	h1, h2, h3 := strings.Repeat("01", 32), strings.Repeat("02", 32), strings.Repeat("03", 32)
	exp := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.APIKeyCreate(ctx, store.APIKey{ID: "k4", Hash: h1, Org: "acme", User: "ann", Scopes: []string{"invoke:hello", "audit:read"}, ExpiresAt: exp}); err != nil {
		t.Fatal(err)
	}
	got, err = s.APIKeyByID(ctx, "k4")
	if err != nil || !slices.Equal(got.Scopes, []string{"invoke:hello", "audit:read"}) || !got.ExpiresAt.Equal(exp) || got.PrevHash != "" {
		t.Fatalf("APIKeyByID = %+v, %v", got, err)
	}
	if !got.Expired(exp) || got.Expired(exp.Add(-time.Nanosecond)) {
		t.Error("Expired is wrong at the edge")
	}
	if _, err := s.APIKeyByID(ctx, "nope"); !errors.Is(err, store.ErrAPIKeyNotFound) {
		t.Errorf("APIKeyByID(unknown): %v", err)
	}
	grace := at.Add(time.Minute)
	if err := s.APIKeyRotate(ctx, "k4", h1, h2, grace); err != nil {
		t.Fatal(err)
	}
	// The second of two rotations that read h1 loses.
	if err := s.APIKeyRotate(ctx, "k4", h1, h3, grace); !errors.Is(err, store.ErrAPIKeyChanged) {
		t.Errorf("a rotation from a stale hash: %v, want ErrAPIKeyChanged", err)
	}
	for _, h := range []string{h1, h2} {
		got, err := s.APIKeyByHash(ctx, h)
		if err != nil || got.ID != "k4" || got.Hash != h2 || got.PrevHash != h1 || !got.PrevUntil.Equal(grace) {
			t.Errorf("APIKeyByHash(%s…) after rotation = %+v, %v", h[:4], got, err)
		}
	}
	if _, err := s.APIKeyByHash(ctx, h3); !errors.Is(err, store.ErrAPIKeyNotFound) {
		t.Errorf("the losing rotation's hash was stored: %v", err)
	}
	used := at.Add(2 * time.Minute)
	if err := s.APIKeyTouch(ctx, "k4", used, "192.0.2.1:5555"); err != nil {
		t.Fatal(err)
	}
	if err := s.APIKeyTouch(ctx, "k4", at, "198.51.100.9:1"); err != nil { // older: kept out
		t.Fatal(err)
	}
	if got, _ := s.APIKeyByID(ctx, "k4"); !got.LastUsedAt.Equal(used) || got.LastUsedAddr != "192.0.2.1:5555" {
		t.Errorf("last use = %v %q, want %v 192.0.2.1:5555", got.LastUsedAt, got.LastUsedAddr, used)
	}
}

func (su suite) testModuleVersions(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
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
