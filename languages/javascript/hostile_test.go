package javascript_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/budget"
)

// TestHostileDeviceFile drives /dev/moat/ops from QuickJS as a hostile
// script would (issue 12, class 8). Each case asserts what the script sees
// and bounds what the host allocated for it: before the per-invocation
// budget, the flood allocated 1.9 GB (470 MiB live) and the descriptors
// held 800 MiB.
func TestHostileDeviceFile(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		wantStdout string
		maxAlloc   uint64 // bytes allocated by the whole run, interpreter included
		check      func(t *testing.T, corr string)
	}{
		{
			name: "2 MB of invalid lines in one write",
			script: `const f = std.open(std.getenv("MOAT_OPS"), "r+");
f.puts("x\n".repeat(1 << 20)); f.flush();
let n = 0, line; while ((line = f.getline()) !== null) { if (JSON.parse(line).error.code === "invalid_argument") n++; }
print(n > 0 && n < 1000 ? "bounded" : "unbounded " + n);`,
			wantStdout: "bounded\n",
			maxAlloc:   64 << 20,
		},
		{
			name: "200 descriptors with a 4 MiB partial line each",
			script: `let opened = 0, refused = 0; const files = [];
const chunk = "y".repeat(4 << 20 - 4096);
for (let i = 0; i < 200; i++) {
  const err = {}; const f = std.open(std.getenv("MOAT_OPS"), "r+", err);
  if (!f) { refused++; continue; }
  opened++; files.push(f); f.puts(chunk); f.flush();
}
print(opened + " " + refused);`,
			wantStdout: "16 184\n",
			maxAlloc:   64 << 20,
		},
		{
			name: "10 000 denied ops",
			script: `import * as moat from "./moat.js";
const codes = {};
for (let i = 0; i < 10000; i++) { try { moat.kv.put("k", "v"); } catch (e) { codes[e.code] = (codes[e.code] || 0) + 1; } }
print(JSON.stringify(codes));`,
			wantStdout: `{"denied":1000,"resource_exhausted":9000}` + "\n",
			maxAlloc:   64 << 20,
			check: func(t *testing.T, _ string) {
				ctx := context.Background()
				evs, err := suite.Audit.Query(ctx, audit.Filter{Module: "js-test", Kind: audit.KindDecision, Decision: audit.Deny, Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, e := range evs {
					found = found || e.Rule == budget.KnobAuditRows && e.Code == string(abi.CodeResourceExhausted)
				}
				if !found {
					t.Fatalf("no audit row says the audit budget ran out: %+v", evs)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := build(t, "main.js", tt.script)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res, err := run(t, a, runOpts{Ops: true})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if res.Stdout != tt.wantStdout {
				t.Fatalf("stdout %q, stderr %q; want %q", res.Stdout, strings.TrimSpace(res.Stderr), tt.wantStdout)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("the run allocated %d MiB", alloc>>20)
			if alloc > tt.maxAlloc {
				t.Errorf("the run allocated %d MiB; the bound is %d MiB", alloc>>20, tt.maxAlloc>>20)
			}
			if tt.check != nil {
				tt.check(t, "")
			}
		})
	}
}
