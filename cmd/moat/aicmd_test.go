package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
)

// TestAICmd: moat ai usage lists each organization's day, and moat ai
// budget set, show and reset change an organization's budgets in the
// store, over the defaults of the server configuration's ai.budgets.
func TestAICmd(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	ctx := context.Background()
	data := t.TempDir()
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		org, module string
		used        int64
	}{{"acme", "notes", 120}, {"acme", "sum\x1b[2J", 7}, {"globex", "spy", 40}} {
		r, err := st.AIReserve(ctx, store.Scope{Org: u.org, Module: u.module}, time.Now(), 10, store.AIBudget{OrgDailyTokens: 1000, ModuleDailyTokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.AISettle(ctx, r, u.used); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	conf := filepath.Join(t.TempDir(), "moat-server.yaml")
	if err := os.WriteFile(conf, []byte("data_dir: "+data+"\nai:\n  budgets: {org_daily_tokens: 5000, module_daily_tokens: 700}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	all := moat(t, "", "ai", "usage", "--config", conf)
	if all.code != 0 || !strings.Contains(all.stdout, "acme") || !strings.Contains(all.stdout, "globex") || !strings.Contains(all.stdout, "127") ||
		strings.Contains(all.stdout, "\x1b") || strings.Count(all.stdout, "\n") != 6 {
		t.Fatalf("ai usage: %d\n%q%s", all.code, all.stdout, all.stderr)
	}
	acme := moat(t, "", "ai", "usage", "--config", conf, "--org", "acme", "--json")
	// GET /v1/ai/usage's names, decoded strictly.
	type usageRow struct {
		Org string `json:"org"`
		server.AIUsageEntry
	}
	var rows []usageRow
	for _, line := range strings.Split(strings.TrimSpace(acme.stdout), "\n") {
		var u usageRow
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if dec.Decode(&u) != nil {
			t.Fatalf("ai usage --json: %q", acme.stdout)
		}
		rows = append(rows, u)
	}
	if acme.code != 0 || len(rows) != 3 || rows[0].Org != "acme" || rows[0].Module != "" || rows[0].Used != 127 {
		t.Errorf("ai usage --org acme --json: %d %+v %s", acme.code, rows, acme.stderr)
	}

	show := moat(t, "", "ai", "budget", "show", "--config", conf, "--org", "acme")
	if show.code != 0 || !strings.Contains(show.stdout, "5000 tokens a day, 700 per module, from the defaults") {
		t.Errorf("budget show: %d %q %s", show.code, show.stdout, show.stderr)
	}
	set := moat(t, "", "ai", "budget", "set", "--config", conf, "--org", "acme", "--module-daily-tokens", "2500")
	if set.code != 0 || !strings.Contains(set.stdout, "5000 tokens a day, 2500 per module, from an override") {
		t.Errorf("budget set: %d %q %s", set.code, set.stdout, set.stderr)
	}
	st, err = store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if b, found, err := st.AIBudgetGet(ctx, "acme"); err != nil || !found || b != (store.AIBudget{ModuleDailyTokens: 2500}) {
		t.Errorf("stored override %+v %v %v", b, found, err)
	}
	st.Close()
	reset := moat(t, "", "ai", "budget", "reset", "--config", conf, "--org", "acme", "--json")
	var got map[string]any
	if reset.code != 0 || json.Unmarshal([]byte(reset.stdout), &got) != nil || got["override"] != false || got["module_daily_tokens"] != 700.0 {
		t.Errorf("budget reset: %d %q %s", reset.code, reset.stdout, reset.stderr)
	}
	for _, args := range [][]string{
		{"ai", "budget", "set", "--config", conf, "--org", "acme"},
		{"ai", "budget", "set", "--config", conf, "--org", "acme", "--org-daily-tokens", "-5"},
		{"ai", "budget", "show", "--config", conf},
		{"ai", "budget", "show", "--config", conf, "--org", "a b"},
		{"ai", "usage", "--config", conf, "--days", "0"},
	} {
		if r := moat(t, "", args...); r.code != 2 {
			t.Errorf("moat %s: exit %d, want 2 (usage)\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}
