package server_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/server"
)

// TestDashboardMatchesMetrics: the Grafana dashboard in deploy/grafana
// queries only metrics the server registers (a renamed metric would
// leave an on-call person an empty panel), shows every moat_ metric, and
// docs/OPERATIONS.md lists each of them.
func TestDashboardMatchesMetrics(t *testing.T) {
	ts := start(t, "", withMetricsToken)
	registered := server.MetricNames(ts.Server)
	slices.Sort(registered)
	registered = slices.Compact(registered)
	if !slices.Contains(registered, "moat_ops_total") || !slices.Contains(registered, "moat_tasks") {
		t.Fatalf("the registry's names look wrong: %v", registered)
	}
	b, err := os.ReadFile("../deploy/grafana/moat.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/moat.json: %v", err)
	}
	name := regexp.MustCompile(`\b((?:moat|process|go)_[a-z_]+)`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range name.FindAllStringSubmatch(tg.Expr, -1) {
				n := m[1]
				base := n
				for _, suf := range []string{"_bucket", "_count", "_sum"} {
					if strings.HasSuffix(n, suf) && slices.Contains(registered, strings.TrimSuffix(n, suf)) {
						base = strings.TrimSuffix(n, suf)
					}
				}
				if !slices.Contains(registered, base) {
					t.Errorf("panel %q queries %s, which the server does not register", p.Title, n)
				}
				used[base] = true
			}
		}
	}
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range registered {
		if !strings.HasPrefix(n, "moat_") {
			continue
		}
		if !used[n] {
			t.Errorf("the dashboard shows no panel of %s", n)
		}
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("docs/OPERATIONS.md does not list %s", n)
		}
	}
}
