package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// Writers on several handles race past one quota: the total never exceeds
// it, and exactly what fits succeeds.
func testSharedKVQuota(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ctx := context.Background()
	stores := open(t, 3)
	warm(t, stores)
	const (
		quota   = 1000
		writers = 60
		size    = 50 // key (3 bytes) plus value: exactly 20 fit
	)
	for round := range 3 {
		sc := store.Scope{Org: "acme", Module: fmt.Sprint("billing-", round)}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			ok      int
			unknown []error
		)
		start := make(chan struct{})
		for i := range writers {
			s := stores[i%len(stores)]
			wg.Go(func() {
				<-start
				key := fmt.Sprintf("k%02d", i)
				err := s.KVPutWithin(ctx, sc, key, make([]byte, size-len(key)), quota)
				var ae *abi.Error
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case !errors.As(err, &ae) || ae.Code != abi.CodeTooLarge:
					unknown = append(unknown, err)
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range unknown {
			t.Error(err)
		}
		if ok != quota/size {
			t.Errorf("round %d: %d puts succeeded, want %d", round, ok, quota/size)
		}
		for i, s := range stores {
			if n := usage(t, s, sc); n != quota {
				t.Errorf("round %d, handle %d: usage = %d, want exactly the quota %d", round, i, n, quota)
			}
		}
	}
}

// warm opens connections on every handle, so that racing goroutines race
// in the database rather than queue behind connection set-up.
func warm(t *testing.T, stores []*store.Store) {
	var wg sync.WaitGroup
	for _, s := range stores {
		for range 8 {
			wg.Go(func() {
				if _, _, err := s.KVGet(context.Background(), store.Scope{Org: "warm", Module: "up"}, "k"); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
}

// One confirmation, claimed from every handle at once: exactly one wins.
func testSharedConfirmationUse(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ctx := context.Background()
	stores := open(t, 3)
	warm(t, stores)
	now := time.Now().UTC()
	for round := range 5 {
		c := newConfirmation(fmt.Sprintf("shared-%d", round), now)
		createConfirmation(t, stores[round%len(stores)], c)
		const n = 12
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			s := stores[i%len(stores)]
			wg.Go(func() {
				<-start
				_, errs[i] = s.ConfirmationUse(ctx, c.TokenHash, "acme", "alice", testBinding, now.Add(time.Second))
			})
		}
		close(start)
		wg.Wait()
		oneWinner(t, round, n, errs, "uses across handles")
	}
}

// A change written through one handle reaches a watcher on another.
func testSharedWatchModules(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	stores := open(t, 2)
	watchChanges(t, stores[0], stores[1])
}

// Takers on several handles share one bucket.
func testSharedRateTake(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	stores := open(t, 3)
	warm(t, stores)
	raceRate(t, stores)
}

// Module uploads racing on several handles keep the organization within
// its version quota.
func testSharedModuleQuota(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ctx := context.Background()
	stores := open(t, 3)
	warm(t, stores)
	q := store.ModuleQuota{Versions: 4}
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	start := make(chan struct{})
	for i := range 24 {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			_, d := wasm(fmt.Sprint("racer ", i))
			v := store.ModuleVersion{Org: "acme", Name: fmt.Sprint("m", i%2), Digest: d, Size: 1,
				UploadedAt: time.Date(2030, 1, 1, 0, 0, i, 0, time.UTC)}
			if _, err := s.ModulePut(ctx, v, q); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	u, err := stores[0].ModuleUsage(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if u.Versions > q.Versions {
		t.Errorf("acme keeps %d versions, over its quota of %d", u.Versions, q.Versions)
	}
	mods, err := stores[1].Modules(ctx, "acme")
	if err != nil || len(mods) != 2 {
		t.Errorf("Modules = %+v, %v; want both modules, each with a current version", mods, err)
	}
}

// oneWinner checks a race of n single-use calls on one confirmation
// (ConfirmationUse across handles, ConfirmationDecide across approvers):
// exactly one succeeds, and every other one fails with
// ErrConfirmationUsed.
func oneWinner(t *testing.T, round, n int, errs []error, what string) {
	t.Helper()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConfirmationUsed):
			t.Errorf("round %d: loser's error = %v, want ErrConfirmationUsed", round, err)
		}
	}
	if won != 1 {
		t.Errorf("round %d: %d of %d %s succeeded, want exactly 1", round, won, n, what)
	}
}
