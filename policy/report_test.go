package policy_test

import (
	"strings"
	"testing"
)

const reportManifest = `language: go
actions:
  - name: greet
    roles: [user, admin]
    permissions: [greet.run]
    timeout: 5s
  - name: wipe
    roles: [admin]
    confirm: true
  - name: ping
capabilities:
  kv: true
  db: [orders, secrets]
  http: [https://api.example.com:443]
  media: true
limits:
  memory: 256MiB
  timeout: 10s
`

func TestReport(t *testing.T) {
	for _, tt := range []struct {
		name, on, module, body, signer string
		want                           []string
	}{
		{"refused", "refuse", "plain", reportManifest, "", []string{
			"module   plain 1.0.0 (kind moat, plain.wasm, go)\n",
			"profile  test (test.yaml)\n",
			"mode     sandboxed: not signed by a trusted key\n",
			"  kv                                ✓ granted\n",
			"  db orders                         ✓ granted\n",
			"  db secrets                        ✗ refused (profile test: default grant): collection secrets is not granted (granted: orders)\n",
			"  http https://api.example.com:443  ✓ granted\n",
			"  media                             ✗ refused (profile test: default.trusted grant): granted only to modules signed by a trusted key\n",
			"  log, config                       ✓ always available\n",
			"  memory            256 MiB    128 MiB      128 MiB  ✗ clamped: exceeds the maximum\n",
			"  timeout           10s        30s          10s\n",
			"  disk              -          none         host default\n",
			"  greet  a role of user, admin; permissions greet.run  timeout 5s\n",
			"  wipe   a role of admin; confirmation\n",
			"  ping   nothing (any caller)\n",
			"\nverdict: REFUSED at load: 3 requests not granted (on_ungranted: refuse)\n",
		}},
		{"deny at call", "deny_at_call", "plain", reportManifest, "", []string{
			"\nverdict: LOADS; 2 requests will be denied at call time and 1 limit clamped to the profile's maximum (on_ungranted: deny_at_call)\n",
		}},
		{"trusted", "refuse", "plain", reportManifest, "acme", []string{
			"mode     trusted: signed by trusted key acme\n",
			"  media                             ✓ granted\n",
			"  memory            256 MiB    512 MiB      256 MiB\n",
			"\nverdict: REFUSED at load: 1 request not granted (on_ungranted: refuse)\n",
		}},
		{"loads", "refuse", "plain", "capabilities: {kv: true}\n", "", []string{
			"  kv           ✓ granted\n",
			"\nverdict: LOADS\n",
		}},
		{"files", "deny_at_call", "plain", "capabilities: {filesystem: [/data/in, /out/a:rw, /data/x:rw, /etc]}\n", "", []string{
			"  filesystem /data/in    ✓ granted read-only\n",
			"  filesystem /out/a:rw   ✓ granted read-write\n",
			"  filesystem /data/x:rw  ✗ refused (profile test: default grant): granted read-only (granted: /data, /out:rw), so it is mounted read-only; to let the module write, grant /data/x:rw or {path: /data/x, rw: true}\n",
			"  filesystem /etc        ✗ refused (profile test: default grant): not under a granted directory (granted: /data, /out:rw)\n",
			"\nverdict: LOADS; 2 requests will be denied at call time (on_ungranted: deny_at_call)\n",
		}},
		{"nothing requested", "refuse", "plain", "", "", []string{
			"  (none requested)\n",
			"\nverdict: LOADS\n",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := profile(t, tt.on)
			m := manifest(t, tt.module, tt.body)
			r := p.Evaluate(m, tt.signer).Report(m, p)
			for _, w := range tt.want {
				if !strings.Contains(r, w) {
					t.Errorf("report lacks %q:\n%s", w, r)
				}
			}
			if n := strings.Count(r, "\n"); n > 40 {
				t.Errorf("report is %d lines:\n%s", n, r)
			}
			if !strings.HasSuffix(r, "\n") || strings.Contains(r, " \n") {
				t.Errorf("report has trailing spaces or no final newline:\n%q", r)
			}
		})
	}
}

func TestReportRequireSignature(t *testing.T) {
	p := profile(t, "deny_at_call")
	p.RequireSignature = true
	m := manifest(t, "plain", "capabilities: {kv: true}\n")
	r := p.Evaluate(m, "").Report(m, p)
	for _, w := range []string{
		"  signature    ✗ required (profile test: require_signature): not signed by a trusted key; sign the module with one of acme, other\n",
		"verdict: REFUSED at load: not signed by a trusted key (require_signature: true)\n",
	} {
		if !strings.Contains(r, w) {
			t.Errorf("report lacks %q:\n%s", w, r)
		}
	}
}
