package store

import (
	"errors"
	"fmt"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// families holds the backend's storage of each op family, found once at
// Open: nil for a family whose interface the backend does not implement.
type families struct {
	knowledge driver.KnowledgeBackend
	ai        driver.AIBackend
	tasks     driver.TaskBackend
	secrets   driver.SecretBackend
	docs      driver.DocumentBackend
	media     driver.MediaBackend
}

func findFamilies(b driver.Backend) families {
	var f families
	f.knowledge, _ = b.(driver.KnowledgeBackend)
	f.ai, _ = b.(driver.AIBackend)
	f.tasks, _ = b.(driver.TaskBackend)
	f.secrets, _ = b.(driver.SecretBackend)
	f.docs, _ = b.(driver.DocumentBackend)
	f.media, _ = b.(driver.MediaBackend)
	return f
}

// FamilySupport says whether the store's backend implements one op
// family's storage (driver.Families).
type FamilySupport struct {
	Name      string `json:"name"`      // the family: "media"
	Interface string `json:"interface"` // what a backend implements for it: "driver.MediaBackend"
	Supported bool   `json:"supported"`
}

// Families lists, for each op family with storage of its own, whether
// this store's backend implements it: what `moat doctor` reports. The
// backends of this repository implement every one.
func (s *Store) Families() []FamilySupport {
	fs := driver.Families()
	out := make([]FamilySupport, len(fs))
	for i, f := range fs {
		out[i] = FamilySupport{Name: f.Name, Interface: f.Interface, Supported: f.Implemented(s.b)}
	}
	return out
}

// Backend names the store's backend: the scheme it was opened with,
// "sqlite" or "postgres" (or a third party's).
func (s *Store) Backend() string { return s.scheme }

// ErrFamilyUnsupported is what an *UnsupportedError matches: the store's
// backend does not implement the storage of the family an op belongs to.
var ErrFamilyUnsupported = errors.New("store: the backend does not implement this family's storage")

// UnsupportedError is the error of every call of a family whose storage
// the backend lacks: it names the backend and the family, so that an
// operator who chose a third-party backend reads what it is missing.
type UnsupportedError struct {
	Backend   string // "sqlite", "postgres", ...
	Family    string // "media"
	Interface string // "driver.MediaBackend"
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("store: the %s storage backend does not implement the %s family's storage (%s), so the %s ops cannot run on it; store with a backend that implements it (`moat doctor --store` lists what this one does)",
		e.Backend, e.Family, e.Interface, e.Family)
}

// Is makes an *UnsupportedError match ErrFamilyUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrFamilyUnsupported }

func (s *Store) unsupported(family string) error {
	for _, f := range driver.Families() {
		if f.Name == family {
			return &UnsupportedError{Backend: s.scheme, Family: family, Interface: f.Interface}
		}
	}
	return &UnsupportedError{Backend: s.scheme, Family: family}
}

// FamilyStorage returns the store's backend as T, the storage interface
// of family (driver.RegisterFamily), or an *UnsupportedError naming the
// backend and the family when the backend does not implement it. It is
// how a family outside this package reaches its own storage: the front
// of a family is its own package's, over the backend's interface.
func FamilyStorage[T any](s *Store, family string) (T, error) {
	t, ok := s.b.(T)
	if !ok {
		return t, s.unsupported(family)
	}
	return t, nil
}

func (s *Store) knowledgeBackend() (driver.KnowledgeBackend, error) {
	if s.fam.knowledge == nil {
		return nil, s.unsupported("knowledge")
	}
	return s.fam.knowledge, nil
}

func (s *Store) aiBackend() (driver.AIBackend, error) {
	if s.fam.ai == nil {
		return nil, s.unsupported("ai")
	}
	return s.fam.ai, nil
}

func (s *Store) taskBackend() (driver.TaskBackend, error) {
	if s.fam.tasks == nil {
		return nil, s.unsupported("tasks")
	}
	return s.fam.tasks, nil
}

func (s *Store) secretBackend() (driver.SecretBackend, error) {
	if s.fam.secrets == nil {
		return nil, s.unsupported("secrets")
	}
	return s.fam.secrets, nil
}

func (s *Store) docs() (driver.DocumentBackend, error) {
	if s.fam.docs == nil {
		return nil, s.unsupported("db")
	}
	return s.fam.docs, nil
}

func (s *Store) media() (driver.MediaBackend, error) {
	if s.fam.media == nil {
		return nil, s.unsupported("media")
	}
	return s.fam.media, nil
}
