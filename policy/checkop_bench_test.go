package policy_test

import (
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

// BenchmarkCheckOp is the gate every op passes, on the allowed path: a
// capability granted whole, one granted per name, and an http URL. The
// first two allocate nothing.
func BenchmarkCheckOp(b *testing.B) {
	m, err := policy.ParseManifest("moat.yaml", []byte("name: a\nversion: 1.0.0\ncapabilities: {kv: true, db: [orders], http: [https://api.example.com:443]}\n"))
	if err != nil {
		b.Fatal(err)
	}
	p, err := policy.ParseProfile("p.yaml", []byte("name: p\ndefault: {capabilities: {kv: true, db: [\"*\"], http: [https://api.example.com:443]}}\n"))
	if err != nil {
		b.Fatal(err)
	}
	e := p.Evaluate(m, "")
	for _, c := range []struct{ name, op, target string }{{"kv", "kv.get", ""}, {"db", "db.get", "orders"}, {"http", "http.fetch", "https://api.example.com/x"}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := e.CheckOp(c.op, c.target); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
