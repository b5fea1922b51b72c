package secrets_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/secrets"
)

// TestRotate: a rotation re-seals every organization's and the
// operator's secrets under the new key without their plaintexts; one that
// meets a value no given key opens stops there, naming it, with what it
// did kept, and run again with that key finishes; a vault holding the
// old key as an old key opens values under either; values re-sealed are
// not rewritten by a second run; the rotation is audited without values.
func TestRotate(t *testing.T) {
	ctx := context.Background()
	st, log := openStore(t)
	k1, _ := newKey(t)
	k2, _ := newKey(t)
	k3, _ := newKey(t)
	who := secrets.Actor{Via: "cli", User: "op"}
	want := map[string]string{}
	for i, org := range []string{"", "acme", "globex"} {
		for j := range 5 {
			name := fmt.Sprintf("s%d", j)
			key := k1
			if org == "globex" && j == 2 {
				key = k3 // sealed under a key the first run is not given
			}
			v := fmt.Sprintf("value-%d-%d-secret", i, j)
			if _, err := secrets.NewVault(st, key, nil).Set(ctx, who, org, name, []byte(v)); err != nil {
				t.Fatal(err)
			}
			want[org+"/"+name] = v
		}
	}
	r, err := secrets.Rotate(ctx, st, []*secrets.Key{k1}, k2, who, log)
	if err == nil || !strings.Contains(err.Error(), "s2 of organization globex") || !strings.Contains(err.Error(), k3.ID()) {
		t.Fatalf("a value under a key not given: %v", err)
	}
	if r.Resealed != 12 {
		t.Errorf("the first run re-sealed %d before it stopped, want 12", r.Resealed)
	}
	// Mid-rotation, a vault sealing under k2 with k1 and k3 as old keys
	// opens everything.
	mid := secrets.NewVault(st, k2, nil).WithOldKeys(k1, k3)
	for k, v := range want {
		org, name, _ := strings.Cut(k, "/")
		if got, err := mid.Secret(ctx, org, name); err != nil || string(got) != v {
			t.Errorf("mid-rotation %s: %q %v", k, got, err)
		}
	}
	r, err = secrets.Rotate(ctx, st, []*secrets.Key{k1, k3}, k2, who, log)
	if err != nil || r.Resealed != 3 {
		t.Fatalf("the second run: %+v %v; want the 3 left", r, err)
	}
	if r, err := secrets.Rotate(ctx, st, nil, k2, who, log); err != nil || r.Resealed != 0 {
		t.Errorf("a third run: %+v %v; want nothing to do", r, err)
	}
	done := secrets.NewVault(st, k2, nil)
	for k, v := range want {
		org, name, _ := strings.Cut(k, "/")
		if got, err := done.Secret(ctx, org, name); err != nil || string(got) != v {
			t.Errorf("after the rotation %s: %q %v", k, got, err)
		}
	}
	if _, err := secrets.NewVault(st, k1, nil).Secret(ctx, "acme", "s1"); err == nil {
		t.Error("the retired key still opens a value")
	}
	if err := log.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := log.Query(ctx, audit.Filter{Kind: audit.KindSecret, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	rotations := 0
	for _, e := range evs {
		if e.Rule == "secrets key rotate" {
			rotations++
		}
		for _, v := range want {
			if strings.Contains(e.Reason, v) || strings.Contains(fmt.Sprint(e.Attrs), v) {
				t.Errorf("a value is in the audit trail: %+v", e)
			}
		}
	}
	if rotations != 2 {
		t.Errorf("%d rotation events, want 2 (the runs that finished)", rotations)
	}
}
