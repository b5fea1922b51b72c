package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// newConfirmation returns a confirmation for alice in acme, created at now
// and valid for an hour.
func newConfirmation(token string, now time.Time) store.Confirmation {
	return store.Confirmation{
		TokenHash: tokenHash(token),
		Org:       "acme",
		User:      "alice",
		Module:    "billing",
		Action:    "refund",
		Input:     []byte(`{"amount":100}`),
		Summary:   "refund 100 to order 7",
		CreatedAt: now,
		ExpiresAt: now.Add(time.Hour),
		Binding:   testBinding,
	}
}

// testBinding is the binding of the module the test confirmations are for.
var testBinding = strings.Repeat("ab", 32)

func createConfirmation(t *testing.T, s *store.Store, c store.Confirmation) {
	t.Helper()
	if err := s.ConfirmationCreate(context.Background(), c); err != nil {
		t.Fatalf("ConfirmationCreate(%s): %v", c.TokenHash[:8], err)
	}
}

func (su suite) testConfirmationUse(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now().UTC()

	c := newConfirmation("tok-1", now)
	createConfirmation(t, s, c)

	// Another org or user is refused and does not use it up.
	for _, p := range []struct{ org, user string }{{"globex", "alice"}, {"acme", "bob"}, {"", ""}, {"alice", "acme"}} {
		_, err := s.ConfirmationUse(ctx, c.TokenHash, p.org, p.user, testBinding, now.Add(time.Minute))
		if !errors.Is(err, store.ErrConfirmationPrincipal) {
			t.Errorf("use by %s/%s: error = %v, want ErrConfirmationPrincipal", p.org, p.user, err)
		}
	}

	// The right principal uses it once.
	usedAt := now.Add(2 * time.Minute)
	got, err := s.ConfirmationUse(ctx, c.TokenHash, "acme", "alice", testBinding, usedAt)
	if err != nil {
		t.Fatalf("first use: %v", err)
	}
	sum := sha256.Sum256(c.Input)
	switch {
	case got.TokenHash != c.TokenHash, got.Org != c.Org, got.User != c.User, got.Module != c.Module,
		got.Action != c.Action, got.Summary != c.Summary, !bytes.Equal(got.Input, c.Input):
		t.Errorf("used confirmation = %+v, want the fields of %+v", got, c)
	case got.InputSHA256 != hex.EncodeToString(sum[:]):
		t.Errorf("InputSHA256 = %q, want the sha256 of the input", got.InputSHA256)
	case !got.CreatedAt.Equal(c.CreatedAt) || !got.ExpiresAt.Equal(c.ExpiresAt) || !got.UsedAt.Equal(usedAt):
		t.Errorf("times = %v, %v, %v; want %v, %v, %v", got.CreatedAt, got.ExpiresAt, got.UsedAt, c.CreatedAt, c.ExpiresAt, usedAt)
	}

	// A replay fails, also after expiry, also for another principal.
	tests := []struct {
		name      string
		hash      string
		org, user string
		at        time.Time
		want      error
	}{
		{"replay", c.TokenHash, "acme", "alice", usedAt, store.ErrConfirmationUsed},
		{"replay after expiry", c.TokenHash, "acme", "alice", now.Add(2 * time.Hour), store.ErrConfirmationUsed},
		{"replay by another principal", c.TokenHash, "acme", "bob", usedAt, store.ErrConfirmationPrincipal},
		{"unknown token", tokenHash("nope"), "acme", "alice", now, store.ErrConfirmationNotFound},
		{"raw token instead of hash", "tok-1", "acme", "alice", now, store.ErrConfirmationNotFound},
		{"empty hash", "", "acme", "alice", now, store.ErrConfirmationNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := s.ConfirmationUse(ctx, tt.hash, tt.org, tt.user, testBinding, tt.at)
			if !errors.Is(err, tt.want) || c != nil {
				t.Errorf("ConfirmationUse = %v, %v; want nil, %v", c, err, tt.want)
			}
		})
	}
}

func (su suite) testConfirmationExpired(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now().UTC()
	c := newConfirmation("tok-exp", now)
	createConfirmation(t, s, c)

	for _, at := range []time.Time{c.ExpiresAt, c.ExpiresAt.Add(time.Nanosecond), c.ExpiresAt.Add(30 * time.Hour)} {
		if _, err := s.ConfirmationUse(ctx, c.TokenHash, "acme", "alice", testBinding, at); !errors.Is(err, store.ErrConfirmationExpired) {
			t.Errorf("use at expiry+%v: error = %v, want ErrConfirmationExpired", at.Sub(c.ExpiresAt), err)
		}
	}
	// Just before expiry it still works.
	if _, err := s.ConfirmationUse(ctx, c.TokenHash, "acme", "alice", testBinding, c.ExpiresAt.Add(-time.Nanosecond)); err != nil {
		t.Errorf("use just before expiry: %v", err)
	}
}

func (su suite) testConfirmationUseRace(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now().UTC()
	c := newConfirmation("tok-race", now)
	createConfirmation(t, s, c)

	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = s.ConfirmationUse(ctx, c.TokenHash, "acme", "alice", testBinding, now.Add(time.Second))
		})
	}
	close(start)
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrConfirmationUsed):
			t.Errorf("loser's error = %v, want ErrConfirmationUsed", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d of %d concurrent uses succeeded, want exactly 1", ok, n)
	}
}

func (su suite) testConfirmationsPending(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now().UTC()

	mk := func(token, org string, created time.Time, ttl time.Duration) store.Confirmation {
		c := newConfirmation(token, created)
		c.Org = org
		c.ExpiresAt = created.Add(ttl)
		createConfirmation(t, s, c)
		return c
	}
	mk("old", "acme", now.Add(-3*time.Minute), time.Hour)
	mk("mid", "acme", now.Add(-2*time.Minute), time.Hour)
	mk("new", "acme", now.Add(-1*time.Minute), time.Hour)
	mk("expired", "acme", now.Add(-2*time.Hour), time.Hour)
	mk("at-expiry", "acme", now.Add(-time.Hour), time.Hour) // expires exactly now
	used := mk("used", "acme", now.Add(-30*time.Second), time.Hour)
	mk("other-org", "globex", now, time.Hour)
	if _, err := s.ConfirmationUse(ctx, used.TokenHash, "acme", "alice", testBinding, now); err != nil {
		t.Fatal(err)
	}

	names := map[string]string{}
	for _, tok := range []string{"old", "mid", "new", "expired", "at-expiry", "used", "other-org"} {
		names[tokenHash(tok)] = tok
	}
	pending := func(org string, limit int) string {
		t.Helper()
		cs, err := s.ConfirmationsPending(ctx, org, now, limit)
		if err != nil {
			t.Fatalf("ConfirmationsPending(%q, %d): %v", org, limit, err)
		}
		var got []string
		for _, c := range cs {
			got = append(got, names[c.TokenHash])
		}
		return strings.Join(got, ",")
	}
	tests := []struct {
		org   string
		limit int
		want  string
	}{
		{"acme", 0, "new,mid,old"},
		{"acme", 2, "new,mid"},
		{"acme", -5, "new,mid,old"},
		{"globex", 10, "other-org"},
		{"initech", 10, ""},
	}
	for _, tt := range tests {
		if got := pending(tt.org, tt.limit); got != tt.want {
			t.Errorf("ConfirmationsPending(%q, %d) = %s, want %s", tt.org, tt.limit, got, tt.want)
		}
	}
	cs, _ := s.ConfirmationsPending(ctx, "globex", now, 0)
	if len(cs) == 1 && (string(cs[0].Input) != `{"amount":100}` || cs[0].Summary == "" || !cs[0].UsedAt.IsZero()) {
		t.Errorf("pending confirmation = %+v, want all its fields", cs[0])
	}

	if _, err := s.ConfirmationsPending(ctx, "", now, 0); err == nil {
		t.Error("ConfirmationsPending with an empty org succeeded")
	}
}

func (su suite) testConfirmationCreateValidation(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now().UTC()

	tests := []struct {
		name   string
		change func(c *store.Confirmation)
		field  string
	}{
		{"empty token hash", func(c *store.Confirmation) { c.TokenHash = "" }, "token hash"},
		{"raw token", func(c *store.Confirmation) { c.TokenHash = "secret-token" }, "token hash"},
		{"upper-case hash", func(c *store.Confirmation) { c.TokenHash = strings.ToUpper(c.TokenHash) }, "token hash"},
		{"empty org", func(c *store.Confirmation) { c.Org = "" }, "org"},
		{"empty user", func(c *store.Confirmation) { c.User = "" }, "user"},
		{"empty module", func(c *store.Confirmation) { c.Module = "" }, "module"},
		{"empty action", func(c *store.Confirmation) { c.Action = "" }, "action"},
		{"wrong input hash", func(c *store.Confirmation) { c.InputSHA256 = tokenHash("other input") }, "input_sha256"},
		{"no expiry", func(c *store.Confirmation) { c.ExpiresAt = time.Time{} }, "expires_at"},
		{"expires before created", func(c *store.Confirmation) { c.ExpiresAt = c.CreatedAt.Add(-time.Second) }, "expires_at"},
		{"already used", func(c *store.Confirmation) { c.UsedAt = now }, "used_at"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConfirmation(fmt.Sprintf("bad-%d", i), now)
			tt.change(&c)
			err := s.ConfirmationCreate(ctx, c)
			var ae *abi.Error
			if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
				t.Fatalf("error = %v, want *abi.Error %s", err, abi.CodeInvalidArgument)
			}
			if !strings.Contains(ae.Message, tt.field) {
				t.Errorf("message %q does not name %q", ae.Message, tt.field)
			}
		})
	}
	if cs, _ := s.ConfirmationsPending(ctx, "acme", now, 0); len(cs) != 0 {
		t.Errorf("%d confirmations stored after rejected creates", len(cs))
	}

	// A matching InputSHA256, a nil input and a zero CreatedAt are fine.
	c := newConfirmation("good", now)
	sum := sha256.Sum256(c.Input)
	c.InputSHA256 = hex.EncodeToString(sum[:])
	createConfirmation(t, s, c)
	c2 := newConfirmation("nil input", now)
	c2.Input, c2.CreatedAt = nil, time.Time{}
	createConfirmation(t, s, c2)
	got, err := s.ConfirmationUse(ctx, c2.TokenHash, "acme", "alice", testBinding, now)
	if err != nil || got.Input == nil || len(got.Input) != 0 || got.CreatedAt.IsZero() {
		t.Errorf("nil-input confirmation = %+v, %v", got, err)
	}

	// The same token hash twice is refused.
	if err := s.ConfirmationCreate(ctx, newConfirmation("good", now)); err == nil {
		t.Error("second ConfirmationCreate with the same token hash succeeded")
	}
}

// Creating a confirmation deletes ones that expired or were used more than
// 24 hours earlier, and keeps recent ones.
func (su suite) testConfirmationCleanup(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now().UTC()
	past := now.Add(-48 * time.Hour)

	stale := newConfirmation("stale", past) // expired 47 h ago
	createConfirmation(t, s, stale)
	usedLong := newConfirmation("used long ago", past)
	usedLong.ExpiresAt = now.Add(time.Hour)
	createConfirmation(t, s, usedLong)
	if _, err := s.ConfirmationUse(ctx, usedLong.TokenHash, "acme", "alice", testBinding, past.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	recent := newConfirmation("recently expired", now.Add(-2*time.Hour)) // expired 1 h ago
	createConfirmation(t, s, recent)

	createConfirmation(t, s, newConfirmation("trigger", now))

	for _, tt := range []struct {
		name string
		c    store.Confirmation
		want error
	}{
		{"expired 47 h ago", stale, store.ErrConfirmationNotFound},
		{"used 48 h ago", usedLong, store.ErrConfirmationNotFound},
		{"expired 1 h ago", recent, store.ErrConfirmationExpired},
	} {
		if _, err := s.ConfirmationUse(ctx, tt.c.TokenHash, "acme", "alice", testBinding, now); !errors.Is(err, tt.want) {
			t.Errorf("%s: use after cleanup: error = %v, want %v", tt.name, err, tt.want)
		}
	}
}
