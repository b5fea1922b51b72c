package policy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/moat-sandbox/moat/abi"
)

// KnowledgeCollection is what a manifest declares about one of the
// knowledge collections it uses (knowledge: in moat.yaml): whose
// documents a search finds.
//
//	capabilities:
//	  knowledge: [notes, handbook]
//	knowledge:
//	  notes:
//	    scope: user          # only the user who added a document finds it
//	  handbook:
//	    scope: org           # the default: every user of the organization
//
// The scope is the store's: a user-scoped collection is one collection
// per user, so a search, an add and a delete reach only the caller's own
// documents, whatever the request says. A collection the manifest does
// not declare is org-scoped, as it always was (docs/RATIONALE.md says why
// the default is org and not user).
type KnowledgeCollection struct {
	Scope string `yaml:"scope,omitempty"` // org (default) or user
}

// checkKnowledge validates m.Knowledge and fills in each default scope. A
// declared collection must be one the manifest asks for (or it asks for
// every collection): a declaration nothing uses is a misspelled name, and
// its scope would silently not apply to the collection meant.
func checkKnowledge(ix *index, m *Manifest) error {
	for _, name := range slices.Sorted(maps.Keys(m.Knowledge)) {
		kc := m.Knowledge[name]
		p := "knowledge." + name
		switch {
		case !collectionRE.MatchString(name):
			return ix.Errorf(p, "%q is not a collection name; use 1-64 characters a-z 0-9 _, like docs", name)
		case !nameCovered(m.Capabilities.Knowledge, name):
			return ix.Errorf(p, "collection %s is declared but not asked for; add it to capabilities.knowledge (asked for: %s)%s",
				name, list(m.Capabilities.Knowledge), didYouMean(name, m.Capabilities.Knowledge))
		}
		switch kc.Scope {
		case "":
			kc.Scope = abi.DBScopeOrg
		case abi.DBScopeOrg, abi.DBScopeUser:
		default:
			return ix.Errorf(p+".scope", "%q is not a scope; write org (every user of the organization finds its documents) or user (only the user who added one)", kc.Scope)
		}
		m.Knowledge[name] = kc
	}
	return nil
}

// KnowledgeScope is the scope of collection name in m: abi.DBScopeUser
// when m declares it so, else abi.DBScopeOrg.
func (m *Manifest) KnowledgeScope(name string) string {
	if m != nil && m.Knowledge[name].Scope == abi.DBScopeUser {
		return abi.DBScopeUser
	}
	return abi.DBScopeOrg
}

// Warnings are what `moat policy check` points out about m that is
// allowed but likely a mistake: today, a module whose db model keeps its
// documents per user (scope: user) and that indexes into an org-scoped
// knowledge collection, where every user of the organization finds what
// it indexed.
func (m *Manifest) Warnings() []string {
	var userModels []string
	for _, name := range slices.Sorted(maps.Keys(m.Models)) {
		if m.Models[name].Scope == abi.DBScopeUser {
			userModels = append(userModels, name)
		}
	}
	if len(userModels) == 0 {
		return nil
	}
	var out []string
	for _, c := range m.Capabilities.Knowledge {
		if m.KnowledgeScope(c) == abi.DBScopeUser {
			continue
		}
		name := c
		if c == AllCollections {
			name = "every collection not declared scope: user"
		} else {
			name = "collection " + c
		}
		out = append(out, fmt.Sprintf(
			"knowledge %s is org-scoped, but model %s keeps documents per user (scope: user): what the module indexes there every user of the organization finds; declare knowledge: {%s: {scope: user}} if it indexes per-user data",
			name, userModels[0], collectionOr(c, "NAME")))
	}
	return out
}

func collectionOr(c, alt string) string {
	if c == AllCollections {
		return alt
	}
	return c
}
