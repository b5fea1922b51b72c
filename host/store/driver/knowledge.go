package driver

import "context"

// KnowledgeDoc is a knowledge document as the front hands it to a
// backend: validated, its meta in canonical JSON, its text already split
// into the terms to index (package store's tokenizer), so that every
// backend indexes the same terms and no backend's own parser ever reads
// guest text.
//
// Collection, here and in every query, is the stored collection: the
// collection's name, or for a user-scoped one the name, a slash and the
// user (the front's partition), so that confining every statement to the
// collection confines it to the user as well. A backend treats it as an
// opaque key.
type KnowledgeDoc struct {
	Org, Module, Collection, ID string
	Owner                       string // the user who added it
	Text                        string
	Meta                        string // a JSON object of scalars, "{}" for none
	// Terms are the document's index terms in text order (repeats
	// included): each is 2 to 257 bytes of a-z 0-9 starting with a
	// letter, so any full-text parser reads each as one token.
	Terms []string
	Bytes int64 // what the document counts against the byte quota
	At    int64 // unix nanoseconds
	// Vector, when not nil, is the document's embedding (VectorModel's):
	// unit length, little-endian float32s. A document stored without one
	// loses any vector it had, which belonged to its old text.
	Vector      []byte
	VectorModel string
}

// KnowledgeQuery is a search as the front hands it to a backend.
type KnowledgeQuery struct {
	Org, Module, Collection string
	// Terms are distinct index terms (see KnowledgeDoc.Terms); a hit
	// holds every one of them.
	Terms []string
	// Filter is a JSON object of scalars, "{}" for none: a hit's meta
	// holds each key with an equal value of the same JSON type (numbers
	// compare as numbers).
	Filter string
	Limit  int
}

// KnowledgeCandidate is a hit as a backend finds it: the front makes the
// snippet from Text and decodes Meta.
type KnowledgeCandidate struct {
	ID    string
	Score float64 // higher is better
	Text  string
	Meta  string
}

// KnowledgeUsage is what an organization's module stores in knowledge:
// documents, and their bytes. As a quota, 0 in a field means no limit.
type KnowledgeUsage struct {
	Docs, Bytes int64
}

// OverKnowledgeQuota is the knowledge quota rule, the one definition
// every backend applies inside its write transaction: an add that adds
// adds to inUse exceeds quota when it grows either count past its limit
// (OverQuota on each; a limit of 0 is none). A replacement adds no
// document, and one that does not grow the bytes is always allowed, so a
// module over a lowered quota can still shrink.
func OverKnowledgeQuota(quota, inUse, adds KnowledgeUsage) bool {
	return quota.Docs > 0 && OverQuota(quota.Docs, inUse.Docs, adds.Docs) ||
		quota.Bytes > 0 && OverQuota(quota.Bytes, inUse.Bytes, adds.Bytes)
}

// KnowledgeBackend is what a backend implements for the knowledge family:
// it stores and searches knowledge documents. Every method confines
// itself to the org, module and collection it is given, in every
// statement it runs. Like every family's storage it is optional (see
// Families).
type KnowledgeBackend interface {
	// KnowledgeAdd stores d, replacing the document of the same id in
	// its collection, unless OverKnowledgeQuota(quota, inUse, adds)
	// holds (ErrOverQuota, nothing written); the check and the write are
	// one transaction, atomic across processes. It returns what it read,
	// also when it refuses.
	KnowledgeAdd(ctx context.Context, d KnowledgeDoc, quota KnowledgeUsage) (replaced bool, inUse, adds KnowledgeUsage, err error)
	KnowledgeDelete(ctx context.Context, org, module, collection, id string) (deleted bool, err error)
	// KnowledgeSearch returns at most q.Limit hits, best first (ties by
	// id, bytewise).
	KnowledgeSearch(ctx context.Context, q KnowledgeQuery) ([]KnowledgeCandidate, error)
	KnowledgeUsage(ctx context.Context, org, module string) (KnowledgeUsage, error)
	// KnowledgeVectors calls each with the id and vector of q's
	// documents that have a vector of q.Model and whose meta matches
	// q.Filter (as KnowledgeSearch's), the most recently updated first,
	// at most q.Limit; vec is valid only during the call. An error from
	// each ends the scan and is returned.
	KnowledgeVectors(ctx context.Context, q KnowledgeVectorQuery, each func(id string, vec []byte) error) error
	// KnowledgeDocs returns the documents of ids (those that exist) in
	// the collection, with Score 0, in no particular order.
	KnowledgeDocs(ctx context.Context, org, module, collection string, ids []string) ([]KnowledgeCandidate, error)
}

// KnowledgeVectorQuery selects the vectors of a collection a hybrid
// search compares with its query's.
type KnowledgeVectorQuery struct {
	Org, Module, Collection string
	Model                   string
	Filter                  string // as KnowledgeQuery's
	Limit                   int
}
