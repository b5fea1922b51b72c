package policy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

// A collection's scope is declared under knowledge:, defaults to org, and
// applies only to a collection the manifest asks for.
func TestParseKnowledgeScope(t *testing.T) {
	m, err := policy.ParseManifest("moat.yaml", []byte(`name: a
version: 1.0.0
capabilities:
  knowledge: [notes, handbook, faq]
knowledge:
  notes: {scope: user}
  handbook: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"notes": "user", "handbook": "org", "faq": "org", "other": "org"} {
		if got := m.KnowledgeScope(name); got != want {
			t.Errorf("KnowledgeScope(%s) = %s, want %s", name, got, want)
		}
	}
	if m.Knowledge["handbook"].Scope != "org" {
		t.Errorf("the default scope is not filled in: %+v", m.Knowledge)
	}
	// knowledge: true asks for every collection: any may be declared.
	if _, err := policy.ParseManifest("moat.yaml", []byte("name: a\nversion: 1.0.0\ncapabilities: {knowledge: true}\nknowledge: {anything: {scope: user}}\n")); err != nil {
		t.Errorf("a declaration under knowledge: true: %v", err)
	}
}

func TestParseKnowledgeErrors(t *testing.T) {
	const head = "name: a\nversion: 1.0.0\ncapabilities: {knowledge: [notes]}\nknowledge:\n"
	for _, tt := range []struct {
		name, yaml  string
		line        int
		field, says string
	}{
		{"bad scope", "  notes: {scope: everyone}\n", 5, "knowledge.notes.scope", "write org"},
		{"scope of another user", "  notes: {scope: \"user:bob\"}\n", 5, "knowledge.notes.scope", "not a scope"},
		{"not asked for", "  nots: {scope: user}\n", 5, "knowledge.nots", "did you mean notes?"},
		{"bad name", "  \"No'tes\": {scope: user}\n", 5, "knowledge.No'tes", "not a collection name"},
		{"unknown key", "  notes: {scope: user, owner: bob}\n", 5, "knowledge.notes.owner", "unknown field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.ParseManifest("moat.yaml", []byte(head+tt.yaml))
			checkFileError(t, err, "moat.yaml", tt.line, tt.field, tt.says)
		})
	}
}

// policy check warns when a module keeping per-user documents indexes
// into an org-scoped collection, and only then.
func TestKnowledgeScopeWarnings(t *testing.T) {
	const userModel = "models: {notes: {scope: user, additional: true}}\n"
	const orgModel = "models: {notes: {additional: true}}\n"
	for _, tt := range []struct {
		name, yaml string
		warn       []string // a substring of each warning, in order
	}{
		{"user model, org collection by default", "capabilities: {knowledge: [docs]}\n" + userModel, []string{"knowledge collection docs is org-scoped"}},
		{"user model, declared org", "capabilities: {knowledge: [docs]}\nknowledge: {docs: {scope: org}}\n" + userModel, []string{"collection docs is org-scoped"}},
		{"user model, user collection", "capabilities: {knowledge: [docs]}\nknowledge: {docs: {scope: user}}\n" + userModel, nil},
		{"user model, one of each", "capabilities: {knowledge: [mine, shared]}\nknowledge: {mine: {scope: user}}\n" + userModel, []string{"collection shared"}},
		{"user model, every collection", "capabilities: {knowledge: true}\n" + userModel, []string{"every collection not declared scope: user"}},
		{"org model", "capabilities: {knowledge: [docs]}\n" + orgModel, nil},
		{"no knowledge", userModel, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := policy.ParseManifest("moat.yaml", []byte("name: a\nversion: 1.0.0\n"+tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			got := m.Warnings()
			if len(got) != len(tt.warn) {
				t.Fatalf("warnings %q, want %d", got, len(tt.warn))
			}
			for i, w := range tt.warn {
				if !strings.Contains(got[i], w) || !strings.Contains(got[i], "model notes") {
					t.Errorf("warning %q does not say %q and name the model", got[i], w)
				}
			}
			if again := m.Warnings(); !slices.Equal(again, got) {
				t.Errorf("warnings are not stable")
			}
			// policy check's report prints each, or no section at all.
			p, err := policy.ParseProfile("p.yaml", []byte("name: p\ndefault: {capabilities: {knowledge: true, db: [\"*\"]}}\n"))
			if err != nil {
				t.Fatal(err)
			}
			report := p.Evaluate(m, "").Report(m, p)
			if has := strings.Contains(report, "\nwarnings\n"); has != (len(got) > 0) {
				t.Errorf("report has a warnings section: %v, want %v:\n%s", has, len(got) > 0, report)
			}
			for _, w := range got {
				if !strings.Contains(report, "  ⚠ "+w+"\n") {
					t.Errorf("report lacks %q:\n%s", w, report)
				}
			}
		})
	}
}
