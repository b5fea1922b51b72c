package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/driver"
	"github.com/moat-sandbox/moat/host/store/storetest"
)

// coreOnly is a backend that implements the host's own storage and no op
// family's: the SQLite backend seen through driver.Backend (and the
// core's own optional interfaces) alone, as a third-party backend that
// stores keys, audit and modules but none of the families would be.
type coreOnly struct {
	driver.Backend
	driver.AuditPruner
	driver.KVBatcher
}

var _ driver.Backend = coreOnly{}

func init() {
	driver.Register("coreonly", func(ctx context.Context, dsn string) (driver.Backend, error) {
		open, _ := driver.Lookup("sqlite")
		b, err := open(ctx, strings.TrimPrefix(dsn, "coreonly://"))
		if err != nil {
			return nil, err
		}
		return coreOnly{b, b.(driver.AuditPruner), b.(driver.KVBatcher)}, nil
	})
}

func openCoreOnly(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), "coreonly://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestFamiliesReported: a store reports, per family, whether its backend
// implements the family's storage: every one on SQLite, none on a
// backend of the core alone.
func TestFamiliesReported(t *testing.T) {
	s, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Backend() != "sqlite" {
		t.Errorf("Backend() = %q", s.Backend())
	}
	var names []string
	for _, f := range s.Families() {
		names = append(names, f.Name)
		if !f.Supported {
			t.Errorf("sqlite lacks %s (%s)", f.Name, f.Interface)
		}
	}
	if got := strings.Join(names, " "); got != "knowledge ai tasks secrets db media" {
		t.Errorf("families: %s", got)
	}
	for _, f := range openCoreOnly(t).Families() {
		if f.Supported {
			t.Errorf("coreonly implements %s", f.Name)
		}
	}
}

// TestFamilyUnsupported: on a backend without a family's storage, the
// family's calls fail with an error naming the backend and the family
// (no panic), and the host's own storage works.
func TestFamilyUnsupported(t *testing.T) {
	ctx := context.Background()
	s := openCoreOnly(t)
	sc := store.Scope{Org: "acme", Module: "mod"}
	if err := s.KVPut(ctx, sc, "k", []byte("v")); err != nil {
		t.Fatalf("kv on a core-only backend: %v", err)
	}
	calls := map[string]error{}
	_, calls["knowledge"] = s.KnowledgeUsage(ctx, sc)
	_, calls["ai"] = s.AIBudgetDelete(ctx, "acme")
	_, calls["tasks"] = s.TaskClaim(ctx, time.Now(), time.Minute, 1)
	_, calls["secrets"] = s.Secrets(ctx, "acme")
	_, calls["media"] = s.MediaUsage(ctx, "acme")
	for family, err := range calls {
		var ue *store.UnsupportedError
		if !errors.Is(err, store.ErrFamilyUnsupported) || !errors.As(err, &ue) || ue.Family != family || ue.Backend != "coreonly" ||
			!strings.Contains(err.Error(), "the coreonly storage backend does not implement the "+family+" family's storage") {
			t.Errorf("%s: %v", family, err)
		}
	}
}

// TestConformanceCoreOnly: the conformance suite holds a backend to what
// it implements: the core passes, and each family's tests are skipped.
func TestConformanceCoreOnly(t *testing.T) {
	storetest.Run(t, openCoreOnly)
}
