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
	driver.RateSweeper
}

var _ driver.Backend = coreOnly{}

func init() {
	driver.Register("coreonly", func(ctx context.Context, dsn string) (driver.Backend, error) {
		open, _ := driver.Lookup("sqlite")
		b, err := open(ctx, strings.TrimPrefix(dsn, "coreonly://"))
		if err != nil {
			return nil, err
		}
		return coreOnly{b, b.(driver.AuditPruner), b.(driver.KVBatcher), b.(driver.RateSweeper)}, nil
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
		if !f.Supported && f.Name != "notes" {
			t.Errorf("sqlite lacks %s (%s)", f.Name, f.Interface)
		}
	}
	if got := strings.Join(names, " "); got != "knowledge ai tasks secrets db media notes" {
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

// A family outside package store, with storage of its own: notes, whose
// backend interface notesBackend is registered with the driver, as a
// third-party family's would be, and implemented by a backend of this
// test (SQLite, with notes kept in its kv rows).
type notesBackend interface {
	NotePut(ctx context.Context, org, id, text string) error
	NoteGet(ctx context.Context, org, id string) (string, bool, error)
}

type notesDB struct{ driver.Backend }

var _ notesBackend = notesDB{}

func (b notesDB) NotePut(ctx context.Context, org, id, text string) error {
	return b.KVPut(ctx, org, "notes", id, []byte(text), time.Now().UnixNano())
}

func (b notesDB) NoteGet(ctx context.Context, org, id string) (string, bool, error) {
	v, found, err := b.KVGet(ctx, org, "notes", id)
	return string(v), found, err
}

func init() {
	if err := driver.RegisterFamily(driver.FamilyOf[notesBackend]("notes", "store_test.notesBackend")); err != nil {
		panic(err)
	}
	driver.Register("notesdb", func(ctx context.Context, dsn string) (driver.Backend, error) {
		open, _ := driver.Lookup("sqlite")
		b, err := open(ctx, strings.TrimPrefix(dsn, "notesdb://"))
		if err != nil {
			return nil, err
		}
		return notesDB{b}, nil
	})
}

// TestRegisteredFamily: a family registered from outside is reported per
// backend and reached through FamilyStorage, or refused by name.
func TestRegisteredFamily(t *testing.T) {
	ctx := context.Background()
	if err := driver.RegisterFamily(driver.FamilyOf[notesBackend]("notes", "again")); err == nil {
		t.Error("registered notes twice")
	}
	s, err := store.Open(ctx, "notesdb://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs := s.Families()
	if last := fs[len(fs)-1]; last.Name != "notes" || !last.Supported || last.Interface != "store_test.notesBackend" {
		t.Errorf("families: %+v", fs)
	}
	nb, err := store.FamilyStorage[notesBackend](s, "notes")
	if err != nil {
		t.Fatal(err)
	}
	if err := nb.NotePut(ctx, "acme", "n1", "hello"); err != nil {
		t.Fatal(err)
	}
	if text, found, err := nb.NoteGet(ctx, "acme", "n1"); text != "hello" || !found || err != nil {
		t.Errorf("NoteGet: %q %v %v", text, found, err)
	}

	plain, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, err = store.FamilyStorage[notesBackend](plain, "notes")
	if !errors.Is(err, store.ErrFamilyUnsupported) || !strings.Contains(err.Error(), "the sqlite storage backend does not implement the notes family's storage (store_test.notesBackend)") {
		t.Errorf("FamilyStorage on sqlite: %v", err)
	}
}
