package policy_test

import (
	"fmt"
	"log"

	"github.com/moat-sandbox/moat/policy"
)

// A module asks for two HTTP targets and more memory than the operator
// allows; the operator's profile grants one of the targets to this module
// and loads it anyway (deny_at_call), so the other target is denied when the
// module tries it.
func ExampleProfile_Evaluate() {
	m, err := policy.ParseManifest("moat.yaml", []byte(`
name: hello-go
version: 1.2.0
capabilities:
  kv: true
  http: [https://api.example.com:443, https://tracker.example.net:443]
limits:
  memory: 256MiB
`))
	if err != nil {
		log.Fatal(err)
	}
	p, err := policy.ParseProfile("ops.yaml", []byte(`
name: ops
on_ungranted: deny_at_call
default:
  capabilities: {kv: true}
  limits: {memory: 128MiB, timeout: 30s}
modules:
  hello-go:
    capabilities: {http: [https://api.example.com:443]}
`))
	if err != nil {
		log.Fatal(err)
	}

	e := p.Evaluate(m, "") // unsigned
	fmt.Println("mode:", e.Mode)
	fmt.Println("kv:", e.Effective.KV)
	fmt.Println("http:", e.Effective.HTTP.Targets)
	fmt.Println("memory:", e.Limits.Memory, "timeout:", e.Limits.Timeout)
	for _, r := range e.Refusals {
		fmt.Println("refused:", r.Capability, "-", r.Reason)
	}
	fmt.Println("loads:", !e.Refused)
	fmt.Println(e.CheckOp("http.fetch", "https://api.example.com/v1/hello"))
	fmt.Println(e.CheckOp("http.fetch", "https://tracker.example.net/ping"))
	// Output:
	// mode: sandboxed
	// kv: true
	// http: [https://api.example.com:443]
	// memory: 128 MiB timeout: 30s
	// refused: http https://tracker.example.net:443 - no granted target covers it (granted: https://api.example.com:443)
	// refused: limits.memory 256 MiB - exceeds the profile's maximum 128 MiB
	// loads: true
	// <nil>
	// denied: module hello-go op http.fetch: http https://tracker.example.net:443 was requested but not granted: no granted target covers it (granted: https://api.example.com:443) (rule: profile ops: default + modules.hello-go grant)
}
