package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
)

// decision is an approver's decision on the test confirmations (org acme).
func decision(approver string, approve bool, now time.Time) store.ConfirmationDecision {
	return store.ConfirmationDecision{Org: "acme", Approver: approver, Approve: approve, Binding: testBinding, Now: now}
}

// Four-eyes approval: an approver of the organization decides a
// confirmation once; the requester's roles come back with it; another
// organization, the requester itself, a replay and an expired one are
// refused, each with its error.
func (su suite) testConfirmationDecide(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now().UTC()

	c := newConfirmation("decide-1", now)
	c.Roles = []string{"billing", "support"}
	createConfirmation(t, s, c)

	refusals := []struct {
		name string
		d    store.ConfirmationDecision
		want error
	}{
		{"another org", store.ConfirmationDecision{Org: "globex", Approver: "carol", Approve: true, Binding: testBinding, Now: now}, store.ErrConfirmationNotFound},
		{"the requester", decision("alice", true, now), store.ErrConfirmationSelf},
		{"the requester denying", decision("alice", false, now), store.ErrConfirmationSelf},
		{"unknown", decision("bob", true, now), store.ErrConfirmationNotFound},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			hash := c.TokenHash
			if tt.name == "unknown" {
				hash = tokenHash("no-such-token")
			}
			got, err := s.ConfirmationDecide(ctx, hash, tt.d)
			if !errors.Is(err, tt.want) || got != nil {
				t.Errorf("ConfirmationDecide = %v, %v; want nil, %v", got, err, tt.want)
			}
		})
	}
	// None of the refusals used it up.
	if pending, err := s.ConfirmationsPending(ctx, "acme", now, 0); err != nil || len(pending) != 1 {
		t.Fatalf("pending after refusals = %d, %v; want 1", len(pending), err)
	}
	if got, err := s.ConfirmationGet(ctx, "acme", c.TokenHash); err != nil || !got.UsedAt.IsZero() || got.Decision != "" {
		t.Fatalf("ConfirmationGet before = %+v, %v; want unused", got, err)
	}

	at := now.Add(time.Minute)
	got, err := s.ConfirmationDecide(ctx, c.TokenHash, decision("bob", true, at))
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
	switch {
	case got.User != "alice" || got.Org != "acme" || string(got.Input) != string(c.Input):
		t.Errorf("approved = %+v; want alice's confirmation with its input", got)
	case !slices.Equal(got.Roles, c.Roles):
		t.Errorf("roles = %v, want the requester's %v", got.Roles, c.Roles)
	case got.DecidedBy != "bob" || got.Decision != store.DecisionApproved || !got.UsedAt.Equal(at):
		t.Errorf("decided = %q %q at %v; want bob approved at %v", got.DecidedBy, got.Decision, got.UsedAt, at)
	}
	// The requester's status read sees the decision.
	if got, err := s.ConfirmationGet(ctx, "acme", c.TokenHash); err != nil || got.Decision != store.DecisionApproved || got.DecidedBy != "bob" {
		t.Errorf("ConfirmationGet after = %+v, %v; want approved by bob", got, err)
	}
	if _, err := s.ConfirmationGet(ctx, "globex", c.TokenHash); !errors.Is(err, store.ErrConfirmationNotFound) {
		t.Errorf("ConfirmationGet from another org: %v, want ErrConfirmationNotFound", err)
	}
	// Once: another approver, a denial and the requester's own token all
	// find it used.
	if _, err := s.ConfirmationDecide(ctx, c.TokenHash, decision("dave", true, at)); !errors.Is(err, store.ErrConfirmationUsed) {
		t.Errorf("second approval: %v, want ErrConfirmationUsed", err)
	}
	if _, err := s.ConfirmationDecide(ctx, c.TokenHash, decision("dave", false, at)); !errors.Is(err, store.ErrConfirmationUsed) {
		t.Errorf("denial after approval: %v, want ErrConfirmationUsed", err)
	}
	if _, err := s.ConfirmationUse(ctx, c.TokenHash, "acme", "alice", testBinding, at); !errors.Is(err, store.ErrConfirmationUsed) {
		t.Errorf("token after approval: %v, want ErrConfirmationUsed", err)
	}

	// A denial uses it up without a binding; the token is refused after.
	d := newConfirmation("decide-deny", now)
	createConfirmation(t, s, d)
	dd := decision("bob", false, at)
	dd.Binding = ""
	if got, err := s.ConfirmationDecide(ctx, d.TokenHash, dd); err != nil || got.Decision != store.DecisionDenied {
		t.Fatalf("deny = %+v, %v; want denied", got, err)
	}
	if _, err := s.ConfirmationUse(ctx, d.TokenHash, "acme", "alice", testBinding, at); !errors.Is(err, store.ErrConfirmationUsed) {
		t.Errorf("token after denial: %v, want ErrConfirmationUsed", err)
	}

	// Expiry: at ExpiresAt it is refused and stays unused.
	e := newConfirmation("decide-expired", now)
	createConfirmation(t, s, e)
	if _, err := s.ConfirmationDecide(ctx, e.TokenHash, decision("bob", true, e.ExpiresAt)); !errors.Is(err, store.ErrConfirmationExpired) {
		t.Errorf("approve at expiry: %v, want ErrConfirmationExpired", err)
	}

	// Another binding: the approval is used up as stale, never run.
	st := newConfirmation("decide-stale", now)
	createConfirmation(t, s, st)
	sd := decision("bob", true, at)
	sd.Binding = "cd" + testBinding[2:]
	got, err = s.ConfirmationDecide(ctx, st.TokenHash, sd)
	if !errors.Is(err, store.ErrConfirmationStale) || got == nil || got.Decision != store.DecisionStale {
		t.Errorf("approve on another binding = %+v, %v; want ErrConfirmationStale, used up", got, err)
	}
	if _, err := s.ConfirmationDecide(ctx, st.TokenHash, decision("bob", true, at)); !errors.Is(err, store.ErrConfirmationUsed) {
		t.Errorf("approve after stale: %v, want ErrConfirmationUsed", err)
	}

	// AllowSelf lets the requester decide its own.
	own := newConfirmation("decide-self", now)
	createConfirmation(t, s, own)
	sa := decision("alice", true, at)
	sa.AllowSelf = true
	if got, err := s.ConfirmationDecide(ctx, own.TokenHash, sa); err != nil || got.DecidedBy != "alice" {
		t.Errorf("self-approval allowed = %+v, %v; want approved by alice", got, err)
	}

	// Bad decisions are refused before the store is asked.
	for _, bad := range []store.ConfirmationDecision{{Approver: "bob", Now: now}, {Org: "acme", Now: now}} {
		if _, err := s.ConfirmationDecide(ctx, c.TokenHash, bad); err == nil {
			t.Errorf("ConfirmationDecide(%+v) = nil error", bad)
		}
	}
}

// The roles stored with a confirmation are bounded.
func (su suite) testConfirmationRoles(t *testing.T) {
	s := su.open(t)
	c := newConfirmation("roles-many", time.Now().UTC())
	for i := range store.MaxConfirmationRoles + 1 {
		c.Roles = append(c.Roles, fmt.Sprintf("r%d", i))
	}
	if err := s.ConfirmationCreate(context.Background(), c); err == nil {
		t.Errorf("ConfirmationCreate with %d roles = nil, want an error", len(c.Roles))
	}
	c.Roles = nil
	createConfirmation(t, s, c)
	got, err := s.ConfirmationGet(context.Background(), "acme", c.TokenHash)
	if err != nil || got.Roles == nil || len(got.Roles) != 0 {
		t.Errorf("roles of a confirmation without = %#v, %v; want []", got.Roles, err)
	}
}

// Approvers and the requester's token race for one confirmation: exactly
// one wins, every loser sees it used.
func (su suite) testConfirmationDecideRace(t *testing.T) {
	s := su.open(t)
	raceDecide(t, []*store.Store{s})
}

func testSharedConfirmationDecide(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	stores := open(t, 3)
	warm(t, stores)
	raceDecide(t, stores)
}

func raceDecide(t *testing.T, stores []*store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	for round := range 3 {
		c := newConfirmation(fmt.Sprintf("decide-race-%d", round), now)
		createConfirmation(t, stores[round%len(stores)], c)
		const n = 12
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			s := stores[i%len(stores)]
			wg.Go(func() {
				<-start
				switch i % 3 {
				case 0:
					_, errs[i] = s.ConfirmationUse(ctx, c.TokenHash, "acme", "alice", testBinding, now.Add(time.Second))
				case 1:
					_, errs[i] = s.ConfirmationDecide(ctx, c.TokenHash, decision(fmt.Sprintf("approver%d", i), true, now.Add(time.Second)))
				default:
					_, errs[i] = s.ConfirmationDecide(ctx, c.TokenHash, decision(fmt.Sprintf("approver%d", i), false, now.Add(time.Second)))
				}
			})
		}
		close(start)
		wg.Wait()
		oneWinner(t, round, n, errs, "decisions")
	}
}
