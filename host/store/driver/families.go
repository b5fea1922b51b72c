package driver

import (
	"fmt"
	"slices"
	"sync"
)

// Family is one op family's storage: its name, the interface a backend
// implements for it, and the test of a backend for it.
type Family struct {
	Name      string // the op family, as the op table names it: "media"
	Interface string // "driver.MediaBackend", for messages
	// Implemented reports whether b implements the family's interface.
	Implemented func(b Backend) bool
}

// FamilyOf is the Family of name whose storage is the interface T:
// RegisterFamily(FamilyOf[NotesBackend]("notes", "notes.Backend")).
func FamilyOf[T any](name, iface string) Family {
	return Family{Name: name, Interface: iface, Implemented: func(b Backend) bool { _, ok := b.(T); return ok }}
}

// The op families whose storage is an optional interface beside Backend,
// in the order `moat doctor` reports them: moat's own, then those
// registered (RegisterFamily). package store finds each once, when it
// opens a backend (store.Store.Families), and a family whose interface
// the backend lacks fails its ops with an error naming the backend and
// the family.
//
// # Why an interface per family
//
// Backend is what the host itself needs to run a module; a family's
// storage is that family's. Had every family joined Backend, a
// third-party backend would implement every family's methods (61 before
// it stored one key) and each new family would break every backend. Kept
// apart, a family's storage is four files (the front, its interface here,
// one per backend) and a backend grows into the families it chooses.
// DocumentBackend and MediaBackend were the pattern; the families that
// came before them (knowledge, ai, tasks, secrets) left Backend for it.
var (
	familiesMu sync.RWMutex
	families   = []Family{
		FamilyOf[KnowledgeBackend]("knowledge", "driver.KnowledgeBackend"),
		FamilyOf[AIBackend]("ai", "driver.AIBackend"),
		FamilyOf[TaskBackend]("tasks", "driver.TaskBackend"),
		FamilyOf[SecretBackend]("secrets", "driver.SecretBackend"),
		FamilyOf[DocumentBackend]("db", "driver.DocumentBackend"),
		FamilyOf[MediaBackend]("media", "driver.MediaBackend"),
	}
)

// Families lists the families with storage of their own: moat's, then
// those registered.
func Families() []Family {
	familiesMu.RLock()
	defer familiesMu.RUnlock()
	return slices.Clone(families)
}

// RegisterFamily adds an op family's storage to Families, so that stores
// report it and store.FamilyStorage finds it: a family outside this
// repository declares the interface its backends implement, as a backend
// declares its scheme (Register). Call it from init. It fails for a name
// already registered.
func RegisterFamily(f Family) error {
	if f.Name == "" || f.Implemented == nil {
		return fmt.Errorf("store/driver: RegisterFamily with an empty name or no Implemented test")
	}
	familiesMu.Lock()
	defer familiesMu.Unlock()
	if slices.ContainsFunc(families, func(o Family) bool { return o.Name == f.Name }) {
		return fmt.Errorf("store/driver: family %q registered twice", f.Name)
	}
	families = append(families, f)
	return nil
}
