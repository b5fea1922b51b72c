package server_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
)

// TestSecretsRotateKeyReplicas: two replicas serve secrets while the
// secrets key rotates under them. They are configured as the rotation's
// second step has it (the new key seals, the old one opens); secrets set
// before under the old key, and one a replica sets during the rotation,
// read right on both replicas the whole time; the rotation stopped
// halfway is finished by running it again, and leaves every value under
// the new key.
func TestSecretsRotateKeyReplicas(t *testing.T) {
	testenv.Slow(t, "two servers on a PostgreSQL database")
	ctx := context.Background()
	db := pgtest.Database(t)
	oldKey, newKey := secretsKey(t), secretsKey(t)

	// Before: the secrets are sealed under the old key.
	pre := start(t, "", func(c *server.Config) { c.DatabaseURL = db; c.SecretsKey = oldKey })
	vault := secrets.NewVault(pre.Store(), oldKey, nil)
	const n = 60
	want := map[string]string{}
	for i := range n {
		org, name := fmt.Sprintf("org%02d", i%3), fmt.Sprintf("s%03d", i)
		v := fmt.Sprintf("value-%03d-of-%s", i, org)
		if _, err := vault.Set(ctx, secrets.Actor{Via: "cli", User: "op"}, org, name, []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[org+"/"+name] = v
	}
	pre.stop(t)

	cfg := func(c *server.Config) {
		c.DatabaseURL = db
		c.SecretsKey = newKey
		c.SecretsOldKeys = []*secrets.Key{oldKey}
	}
	a, b := start(t, "", cfg), start(t, "", cfg)

	var reads, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range []*testServer{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("org%02d/s%03d", i%n%3, i%n)
				org, name := k[:5], k[6:]
				got, err := server.SecretOf(ctx, r.Server, org, name)
				reads.Add(1)
				if err != nil || string(got) != want[k] {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%s: %q %v", k, got, err))
				}
			}
		}()
	}

	// A rotation that stops after a few values (its context ends), then
	// runs again to the end.
	who := secrets.Actor{Via: "cli", User: "op"}
	short, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	first, _ := secrets.Rotate(short, a.Store(), []*secrets.Key{oldKey}, newKey, who, nil)
	// A replica sets a secret during the rotation: sealed under the new key.
	if _, err := secrets.NewVault(b.Store(), newKey, nil).Set(ctx, who, "org00", "s000", []byte("changed-during-rotation")); err != nil {
		t.Fatal(err)
	}
	want["org00/s000"] = "changed-during-rotation"
	rest, err := secrets.Rotate(ctx, a.Store(), []*secrets.Key{oldKey}, newKey, who, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if f := failures.Load(); f > 0 {
		t.Errorf("%d of %d reads during the rotation failed; first: %v", f, reads.Load(), firstFailure.Load())
	}
	if first.Resealed+rest.Resealed+rest.Changed > n || first.Resealed+rest.Resealed < n-1 {
		t.Errorf("re-sealed %d then %d (%d changed), want %d in all", first.Resealed, rest.Resealed, rest.Changed, n)
	}
	if left, err := a.Store().SecretsNotUnder(ctx, newKey.ID(), "", "", 1000); err != nil || len(left) != 0 {
		t.Errorf("after the rotation %d secrets are under another key (%v)", len(left), err)
	}
	// Without the old key, every value opens: the rotation is done.
	done := secrets.NewVault(a.Store(), newKey, nil)
	for k, v := range want {
		got, err := done.Secret(ctx, k[:5], k[6:])
		if err != nil || string(got) != v {
			t.Errorf("%s under the new key alone: %q %v", k, got, err)
		}
	}
	t.Logf("%d reads on two replicas during the rotation; first pass re-sealed %d, the second %d", reads.Load(), first.Resealed, rest.Resealed)
}
