package sqlite

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// TestKnowledgeSearchPlan: a search reads the postings of its terms
// through fts5vocab's term index (idxNum bit 0x100, FTS5_VOCAB_TERM_EQ),
// one lookup per term of its own collection, never a scan of every
// organization's postings, and reaches documents by their key.
func TestKnowledgeSearchPlan(t *testing.T) {
	d, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rows, err := d.r.Query("EXPLAIN QUERY PLAN "+knowledgeSearch, "o", "m", "c", `["azebra","alion"]`, 2, 10, `{"k":"v"}`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	vocab := false
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
		if rest, ok := strings.CutPrefix(detail, "SCAN v VIRTUAL TABLE INDEX "); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(rest, ":"))
			vocab = err == nil && n&0x100 != 0
		}
		if strings.HasPrefix(detail, "SCAN d") || strings.HasPrefix(detail, "SCAN knowledge_docs") {
			t.Errorf("the search scans knowledge_docs: %q", detail)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !vocab {
		t.Errorf("knowledge_vocab is not read by term:\n%s", strings.Join(plan, "\n"))
	}
}
