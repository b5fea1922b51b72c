package javascript_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

func residentManifest(t *testing.T, name string, actions ...string) *policy.Manifest {
	t.Helper()
	y := "name: " + name + "\nversion: 0.1.0\nlanguage: javascript\nkind: moat\ncapabilities: {kv: true}\nactions:\n"
	for _, a := range actions {
		y += "  - name: " + a + "\n"
	}
	mf, err := policy.ParseManifest("moat.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// TestResidentPlugin: a script that registers handlers starts once and
// serves many calls from one instance: a global counter rises from call to
// call, ops work inside a handler, a MoatError keeps its code and the
// instance survives it.
func TestResidentPlugin(t *testing.T) {
	m := suite.LoadScript(t, residentManifest(t, "resident-js", "echo", "count", "fail", "put"), "main.js", `
import * as moat from "./moat.js";
let calls = 0;
moat.action("echo", (s) => s);
moat.action("count", () => String(++calls));
moat.action("fail", () => { throw new moat.MoatError("invalid_argument", "no thanks"); });
moat.action("put", (s) => { moat.kv.put("k", s); return moat.kv.get("k"); });
`)
	ctx := context.Background()
	p := policy.Principal{User: "ann", Org: "acme"}
	call := func(action, in string) (string, error) {
		res, err := m.Invoke(ctx, host.Request{Action: action, Input: []byte(in), Principal: p})
		return string(res.Output), err
	}
	if out, err := call("echo", "hello\n"); err != nil || out != "hello\n" {
		t.Fatalf("echo: %q, %v", out, err)
	}
	for i := 1; i <= 3; i++ {
		if out, err := call("count", ""); err != nil || out != fmt.Sprint(i) {
			t.Fatalf("count %d: %q, %v: the instance did not stay", i, out, err)
		}
	}
	if _, err := call("fail", ""); host.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "no thanks") {
		t.Fatalf("fail: %v, want invalid_argument", err)
	}
	if out, err := call("count", ""); err != nil || out != "4" {
		t.Fatalf("count after a failed call: %q, %v: the instance should survive a guest error", out, err)
	}
	if out, err := call("put", "v1"); err != nil || out != "v1" {
		t.Fatalf("put: %q, %v", out, err)
	}
}
