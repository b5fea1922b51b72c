package abi

// The knowledge family: documents of text with metadata, in named
// collections, searched by ranked full text. Every document belongs to the
// caller's organization and the calling module; the host takes both from
// the invocation, never from the request, and a module reaches only the
// collections its grants name (capability knowledge, granted per
// collection like db's models). A collection the module's manifest
// declares scope: user (knowledge: {notes: {scope: user}}) belongs to the
// calling user too: another user of the organization finds, replaces and
// deletes none of its documents; the user is the invocation's as well.
//
// # Words, terms and queries
//
// A word is a run of letters, digits and combining marks; every other
// character separates words, and each Han, Hiragana or Katakana character
// is a word of its own (those scripts do not put spaces between words).
// A word's term is the word in compatibility decomposition (NFKD) with
// the diacritics of Latin, Greek and Cyrillic letters dropped and its
// letters in lower case, composed again (NFC), so "Résumé", "RESUME" and
// "résumé" are one term (the marks of other scripts, like the dakuten of
// で, stay). Terms longer than
// MaxKnowledgeTermBytes are neither indexed nor searched. There is no
// stemming and there are no stop words: "run" does not find "running".
//
// A query is plain text, never a query language: its terms are taken out
// of it as out of a document, so quotes, NEAR, col:, *, ^, AND, OR, NOT
// and parentheses are separators or ordinary words, on every backend.
// Every term of the query must occur in a document for it to be a hit.
// Hits are ranked by their full-text score (higher is better): BM25 over
// the collection on SQLite, ts_rank on PostgreSQL. Scores order the hits
// of one search; they are not comparable across searches or backends.
//
// # Metadata
//
// meta is a flat JSON object whose values are strings, numbers or
// booleans (no null, no arrays, no nested objects); keys are 1 to
// MaxKnowledgeMetaKeyLen characters of A-Z a-z 0-9 _ . : - starting with
// a letter, a digit or _. Numbers are compared as float64 values. A
// search's filter is the same kind of object: a hit's meta must hold
// every key of it with an equal value of the same type ("1" does not
// equal 1, true does not equal 1).

// Op names of the knowledge family.
const (
	OpKnowledgeAdd    = "knowledge.add"
	OpKnowledgeDelete = "knowledge.delete"
	OpKnowledgeSearch = "knowledge.search"
)

// Knowledge limits, enforced by the host. A request over one is refused
// with CodeTooLarge (sizes) or CodeInvalidArgument (shapes), never cut.
const (
	// MaxKnowledgeCollectionLen bounds a collection name: 1 to 64
	// characters a-z 0-9 _, the names a grant can list.
	MaxKnowledgeCollectionLen = 64
	// MaxKnowledgeIDLen bounds a document id: 1 to 256 bytes of UTF-8
	// without NUL.
	MaxKnowledgeIDLen = 256
	// MaxKnowledgeTextBytes bounds a document's text (UTF-8, no NUL).
	// Split a longer document into parts: smaller documents also rank and
	// quote better. The bound keeps the worst-case PostgreSQL tsvector of
	// a document well under its 1 MB limit.
	MaxKnowledgeTextBytes = 128 << 10
	// MaxKnowledgeMetaBytes bounds a document's meta as canonical JSON
	// (keys sorted, no spaces); MaxKnowledgeMetaKeys its keys.
	MaxKnowledgeMetaBytes = 4 << 10
	MaxKnowledgeMetaKeys  = 32
	// MaxKnowledgeMetaKeyLen bounds a key of meta or of a filter.
	MaxKnowledgeMetaKeyLen = 64
	// MaxKnowledgeQueryBytes bounds a query's text, and
	// MaxKnowledgeQueryTerms the distinct terms in it.
	MaxKnowledgeQueryBytes = 1 << 10
	MaxKnowledgeQueryTerms = 32
	// MaxKnowledgeTermBytes bounds a term (in UTF-8 bytes, after
	// normalization): a longer word is not indexed, and a query of
	// nothing but such words finds nothing to search for.
	MaxKnowledgeTermBytes = 128
	// MaxKnowledgeFilterKeys bounds the keys of a search's filter.
	MaxKnowledgeFilterKeys = 8
	// DefaultKnowledgeSearchLimit is the hits a search returns when its
	// limit is 0; MaxKnowledgeSearchLimit the most it may ask for.
	DefaultKnowledgeSearchLimit = 10
	MaxKnowledgeSearchLimit     = 50
	// MaxKnowledgeSnippetBytes bounds a hit's snippet, not counting the
	// "…" that marks text cut at either end.
	MaxKnowledgeSnippetBytes = 320
	// MaxKnowledgeDocuments is the most documents an organization's
	// module may hold, over all its collections. Their bytes (id, text
	// and meta) count against the module's disk limit (limits.disk in
	// moat.yaml and the profile), apart from its kv data.
	MaxKnowledgeDocuments = 100_000
)

// KnowledgeAddRequest stores a document in a collection, replacing the
// document of the same id there.
type KnowledgeAddRequest struct {
	Collection string         `json:"collection"`
	ID         string         `json:"id"`
	Text       string         `json:"text"`
	Meta       map[string]any `json:"meta,omitempty"`
}

// OpTarget is the collection: the grant is checked on it.
func (r *KnowledgeAddRequest) OpTarget() string { return r.Collection }

// KnowledgeAddResponse says whether the add replaced a document.
type KnowledgeAddResponse struct {
	Replaced bool `json:"replaced"`
}

// KnowledgeDeleteRequest removes one document.
type KnowledgeDeleteRequest struct {
	Collection string `json:"collection"`
	ID         string `json:"id"`
}

// OpTarget is the collection: the grant is checked on it.
func (r *KnowledgeDeleteRequest) OpTarget() string { return r.Collection }

// KnowledgeDeleteResponse says whether the document existed.
type KnowledgeDeleteResponse struct {
	Deleted bool `json:"deleted"`
}

// KnowledgeSearchRequest searches one collection: the documents holding
// every term of Query whose meta matches Filter, best first, at most Limit
// of them (0: DefaultKnowledgeSearchLimit; at most
// MaxKnowledgeSearchLimit).
type KnowledgeSearchRequest struct {
	Collection string         `json:"collection"`
	Query      string         `json:"query"`
	Limit      int            `json:"limit,omitempty"`
	Filter     map[string]any `json:"filter,omitempty"`
}

// OpTarget is the collection: the grant is checked on it.
func (r *KnowledgeSearchRequest) OpTarget() string { return r.Collection }

// KnowledgeSearchResponse answers a KnowledgeSearchRequest, best hit
// first; Hits is empty, not null, when nothing matched.
type KnowledgeSearchResponse struct {
	Hits []KnowledgeHit `json:"hits"`
}

// KnowledgeHit is one document found: its id, its score (higher is
// better), a snippet of its text around the terms found (at most
// MaxKnowledgeSnippetBytes, with "…" where the text was cut, runs of white
// space as one space) and its meta ({} when it has none).
type KnowledgeHit struct {
	ID      string         `json:"id"`
	Score   float64        `json:"score"`
	Snippet string         `json:"snippet"`
	Meta    map[string]any `json:"meta"`
}
