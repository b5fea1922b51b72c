package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/server"
)

// TestRunsResponseBounded: a batch whose every job floods both streams
// with '<' (six bytes each in JSON) is answered within
// server.MaxRunResponseBytes: the first jobs keep their output, the ones
// that no longer fit lose it (status output-limit) and, once the budget is
// spent, the rest do not run. Before the bound, 32 such jobs answered 89 MB.
// The profile allows 64 MiB of output per job (exec.output), so that the
// response's bound, not the job's, is what holds.
func TestRunsResponseBounded(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "wide.yaml")
	if err := os.WriteFile(prof, []byte("name: wide\nexec: {output: 64MiB}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exec := withExecutor(t)
	ts := start(t, "", func(c *server.Config) { exec(c); c.Profile = prof })
	if r := ts.do(t, "GET", "/api/v2/runtimes", "", nil); !strings.Contains(string(r.body), `"language":"bash"`) {
		testenv.Require(t, fmt.Sprintf("the bash language is not available: %s", r.body))
	}
	key := ts.key(t, "acme", "ann", "admin")
	job := `{"language":"bash","files":[{"name":"main.sh","content":"s=%s; for i in $(seq 18); do s=$s$s; done; for i in $(seq %d); do printf '%%s' \"$s\"; printf '%%s' \"$s\" >&2; done"}],"limits":{"max_output_bytes":%d}}`
	batch := func(n int, char string) string {
		return `{"runs":[` + strings.TrimSuffix(strings.Repeat(fmt.Sprintf(job, char, 4, 1<<20)+",", n), ",") + `]}`
	}
	tests := []struct {
		name      string
		body      string
		wantRuns  int
		wantFirst languages.Status
	}{
		{"one job printing 6 MiB per stream, asking for 64 MiB of output", fmt.Sprintf(job, "a", 24, 64<<20), 0, languages.StatusOutputLimit},
		{"8 jobs of 1 MiB of '<' per stream", batch(8, "'<'"), 8, languages.StatusOutputLimit},
		{"8 jobs of 1 MiB of 'a' per stream", batch(8, "a"), 8, languages.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(tt.body))
			if r.status != 200 {
				t.Fatalf("/v1/runs: %d %.300s", r.status, r.body)
			}
			if len(r.body) > server.MaxRunResponseBytes+64<<10 {
				t.Fatalf("the response is %d bytes; the bound is %d", len(r.body), server.MaxRunResponseBytes)
			}
			t.Logf("response %d bytes", len(r.body))
			if tt.wantRuns == 0 {
				var res server.RunResult
				json.Unmarshal(r.body, &res)
				if res.Status != tt.wantFirst || len(res.Stdout) > server.MaxRunResponseBytes/2 {
					t.Fatalf("status %s, message %q; want %s", res.Status, res.Message, tt.wantFirst)
				}
				return
			}
			var batch struct{ Runs []server.RunResult }
			if err := json.Unmarshal(r.body, &batch); err != nil || len(batch.Runs) != tt.wantRuns {
				t.Fatalf("batch: %v, %d runs", err, len(batch.Runs))
			}
			statuses := map[languages.Status]int{}
			for _, run := range batch.Runs {
				statuses[run.Status]++
			}
			last := batch.Runs[len(batch.Runs)-1]
			if batch.Runs[0].Status != tt.wantFirst || last.Status != languages.StatusOutputLimit {
				t.Fatalf("statuses %v, first %s, last %s %q", statuses, batch.Runs[0].Status, last.Status, last.Message)
			}
			t.Logf("statuses %v", statuses)
		})
	}
}
