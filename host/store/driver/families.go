package driver

// Families lists the op families whose storage is an optional interface
// beside Backend, in the order `moat doctor` reports them. package store
// finds each once, when it opens a backend (store.Store.Families), and a
// family whose interface the backend lacks fails its ops with an error
// naming the backend and the family.
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
var Families = []Family{
	{"knowledge", "driver.KnowledgeBackend", func(b Backend) bool { _, ok := b.(KnowledgeBackend); return ok }},
	{"ai", "driver.AIBackend", func(b Backend) bool { _, ok := b.(AIBackend); return ok }},
	{"tasks", "driver.TaskBackend", func(b Backend) bool { _, ok := b.(TaskBackend); return ok }},
	{"secrets", "driver.SecretBackend", func(b Backend) bool { _, ok := b.(SecretBackend); return ok }},
	{"db", "driver.DocumentBackend", func(b Backend) bool { _, ok := b.(DocumentBackend); return ok }},
	{"media", "driver.MediaBackend", func(b Backend) bool { _, ok := b.(MediaBackend); return ok }},
}

// Family is one op family's storage: its name, the interface a backend
// implements for it, and the test of a backend for it.
type Family struct {
	Name      string // the op family, as the op table names it: "media"
	Interface string // "driver.MediaBackend", for messages
	// Implemented reports whether b implements the family's interface.
	Implemented func(b Backend) bool
}
