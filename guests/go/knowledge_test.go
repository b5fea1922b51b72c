package moat

import (
	"errors"
	"reflect"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// TestKnowledge: the wrappers send the contract's requests and read its
// replies, and an op's error keeps its code.
func TestKnowledge(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	docs := map[string]abi.KnowledgeAddRequest{}
	typed(h, abi.OpKnowledgeAdd, func(r *abi.KnowledgeAddRequest) (*abi.KnowledgeAddResponse, error) {
		if r.Collection != "docs" {
			return nil, abi.Errorf(abi.CodeDenied, "op knowledge.add %s: not granted", r.Collection)
		}
		_, had := docs[r.ID]
		docs[r.ID] = *r
		return &abi.KnowledgeAddResponse{Replaced: had}, nil
	})
	typed(h, abi.OpKnowledgeDelete, func(r *abi.KnowledgeDeleteRequest) (*abi.KnowledgeDeleteResponse, error) {
		_, had := docs[r.ID]
		delete(docs, r.ID)
		return &abi.KnowledgeDeleteResponse{Deleted: had}, nil
	})
	var searched abi.KnowledgeSearchRequest
	typed(h, abi.OpKnowledgeSearch, func(r *abi.KnowledgeSearchRequest) (*abi.KnowledgeSearchResponse, error) {
		searched = *r
		var hits []abi.KnowledgeHit
		for id, d := range docs {
			hits = append(hits, abi.KnowledgeHit{ID: id, Score: 1.5, Snippet: d.Text, Meta: d.Meta})
		}
		return &abi.KnowledgeSearchResponse{Hits: hits}, nil
	})

	if replaced, err := Knowledge.Add("docs", "a", "hello", map[string]any{"n": 1}); err != nil || replaced {
		t.Fatalf("Add = %v, %v", replaced, err)
	}
	if replaced, err := Knowledge.Add("docs", "a", "hello again", nil); err != nil || !replaced {
		t.Fatalf("second Add = %v, %v", replaced, err)
	}
	hits, err := Knowledge.Search("docs", "hello", SearchOptions{Limit: 5, Filter: map[string]any{"lang": "en"}})
	want := []abi.KnowledgeHit{{ID: "a", Score: 1.5, Snippet: "hello again"}}
	if err != nil || !reflect.DeepEqual(hits, want) {
		t.Fatalf("Search = %+v, %v; want %+v", hits, err, want)
	}
	if searched.Collection != "docs" || searched.Query != "hello" || searched.Limit != 5 || searched.Filter["lang"] != "en" {
		t.Errorf("the host got %+v", searched)
	}
	if d, err := Knowledge.Delete("docs", "a"); err != nil || !d {
		t.Fatalf("Delete = %v, %v", d, err)
	}
	if hits, err := Knowledge.Search("docs", "hello", SearchOptions{}); err != nil || hits == nil || len(hits) != 0 {
		t.Fatalf("Search of nothing = %#v, %v; want an empty, non-nil list", hits, err)
	}
	_, err = Knowledge.Add("secrets", "x", "t", nil)
	var e *abi.Error
	if !errors.As(err, &e) || e.Code != abi.CodeDenied {
		t.Fatalf("Add to an ungranted collection = %v, want denied", err)
	}
}
