package moat

import "github.com/moat-sandbox/moat/abi"

// KnowledgeBase is the module's knowledge: documents of text with
// metadata in named collections, searched by ranked full text, scoped by
// the host to the calling principal's organization and this module. Use
// the package variable [Knowledge]. A module reaches only the collections
// its manifest asks for and the profile grants (capabilities: {knowledge:
// [docs]}); the rules of words, queries, metadata and the limits are in
// package abi (abi/knowledge.go).
type KnowledgeBase struct{}

// Knowledge is the module's knowledge base.
var Knowledge KnowledgeBase

// Add stores a document in collection under id, replacing the document of
// that id there, and reports whether it replaced one. meta may be nil; its
// values are strings, numbers or booleans.
func (KnowledgeBase) Add(collection, id, text string, meta map[string]any) (replaced bool, err error) {
	var resp abi.KnowledgeAddResponse
	err = Call(abi.OpKnowledgeAdd, &abi.KnowledgeAddRequest{Collection: collection, ID: id, Text: text, Meta: meta}, &resp)
	return resp.Replaced, err
}

// Delete removes the document id from collection and reports whether it
// existed.
func (KnowledgeBase) Delete(collection, id string) (deleted bool, err error) {
	var resp abi.KnowledgeDeleteResponse
	err = Call(abi.OpKnowledgeDelete, &abi.KnowledgeDeleteRequest{Collection: collection, ID: id}, &resp)
	return resp.Deleted, err
}

// SearchOptions narrows a search: at most Limit hits (0 for
// abi.DefaultKnowledgeSearchLimit), and only documents whose meta holds
// every key of Filter with an equal value.
type SearchOptions struct {
	Limit  int
	Filter map[string]any
}

// Search returns the documents of collection holding every word of query,
// best first. query is plain text: quotes, operators and the like are not
// syntax, only separators between words.
func (KnowledgeBase) Search(collection, query string, opts SearchOptions) ([]abi.KnowledgeHit, error) {
	var resp abi.KnowledgeSearchResponse
	req := &abi.KnowledgeSearchRequest{Collection: collection, Query: query, Limit: opts.Limit, Filter: opts.Filter}
	if err := Call(abi.OpKnowledgeSearch, req, &resp); err != nil {
		return nil, err
	}
	if resp.Hits == nil {
		resp.Hits = []abi.KnowledgeHit{}
	}
	return resp.Hits, nil
}
