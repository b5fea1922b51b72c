package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// An op family registered in this test file alone, configured from its own
// section of moat-server.yaml (greeting:) with no edit to the server's
// Config: the section is decoded by the family's name into its type, by
// the strict decoder's rules, checked by its Validate where it was
// written, and provisioned in every host the server runs. Its capability,
// greeting (a flag), is its own, declared with it: no edit to policy.

type greetingConfig struct {
	Word  string `yaml:"word"`  // what the greeting says; default "hello"
	Times int    `yaml:"times"` // how many times; 1 to 3, default 1
}

func init() {
	ops.RegisterFamily(ops.Family{
		Name: "greeting", Capability: policy.CapabilitySpec{Name: "greeting", Shape: policy.Flag},
		Config: func() any { return &greetingConfig{} },
		Validate: func(cfg any) error {
			if c := cfg.(*greetingConfig); c.Times < 0 || c.Times > 3 {
				return fmt.Errorf("times is %d; give 1 to 3", c.Times)
			}
			return nil
		},
		Provision: func(_ *ops.ProvisionContext, cfg any) (any, error) {
			c := *cfg.(*greetingConfig)
			if c.Word == "" {
				c.Word = "hello"
			}
			c.Times = max(c.Times, 1)
			return &c, nil
		},
		Ops: []ops.Op{{Name: "greeting.say", Func: ops.Typed(func(env *ops.Env, _ *abi.Empty) (*struct {
			Text string `json:"text"`
		}, error) {
			c, ok := ops.ServiceOf[*greetingConfig](env, "greeting")
			if !ok {
				return nil, abi.Errorf(abi.CodeUnavailable, "greeting.say: no greeting here")
			}
			return &struct {
				Text string `json:"text"`
			}{strings.TrimSpace(strings.Repeat(c.Word+" ", c.Times)) + ", " + env.Principal.User}, nil
		})}},
	})
}

// TestFamilySection: a family's section of moat-server.yaml reaches its
// ops through moat serve (granted, and denied to a module that does not
// ask for the capability, each audited), and a mistake in it is refused
// on the line it was written, as any other section's.
func TestFamilySection(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"listen: 127.0.0.1:0\ngreeting:\n  wrod: hi\n", "cfg.yaml:3: greeting.wrod: unknown field; did you mean word?"},
		{"listen: 127.0.0.1:0\ngreeting:\n  word: hi\n  times: 9\n", "cfg.yaml:2: greeting: times is 9; give 1 to 3"},
		{"greeting: {word: a}\ngreeting: {word: b}\n", "defined twice (first at line 1)"},
		{"greetings:\n  word: hi\n", "cfg.yaml:1: greetings: unknown field"},
		{"secrets: {}\n", "cfg.yaml:1: secrets: unknown field"}, // nothing of it a file can set
	} {
		if _, err := server.ParseConfig("cfg.yaml", []byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v; want %q", tt.yaml, err, tt.want)
		}
	}

	parsed, err := server.ParseConfig("cfg.yaml", []byte("greeting:\n  word: hi\n  times: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := parsed.Families["greeting"].(*greetingConfig); !ok || c.Word != "hi" || c.Times != 2 {
		t.Fatalf("the section decoded as %#v", parsed.Families)
	}
	prof := filepath.Join(t.TempDir(), "profile.yaml")
	os.WriteFile(prof, []byte("name: greet\non_ungranted: deny_at_call\ndefault:\n  capabilities: {greeting: true}\n"), 0o644)
	ts := start(t, "", func(c *server.Config) { c.Families, c.Profile = parsed.Families, prof })
	ann := ts.key(t, "acme", "ann", "admin")
	wasm := testwasm.BuildGo(t, "./testdata/goguest", true)
	for name, caps := range map[string]string{"greeter": "capabilities: {greeting: true}\n", "mute": ""} {
		if r := ts.upload(t, ann, wasm, []byte("name: "+name+"\nversion: 1.0.0\nactions: [{name: call}]\n"+caps)); r.status != http.StatusCreated {
			t.Fatalf("upload %s: %d %s", name, r.status, r.body)
		}
	}
	r := ts.do(t, "POST", "/v1/modules/greeter/actions/call", ann, strings.NewReader("greeting.say {}"), server.HeaderRequestID, "greet-1")
	if r.status != http.StatusOK || string(r.body) != `{"text":"hi hi, ann"}` {
		t.Fatalf("granted: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/v1/modules/mute/actions/call", ann, strings.NewReader("greeting.say {}"), server.HeaderRequestID, "greet-2")
	if r.status == http.StatusOK || !strings.Contains(string(r.body), "denied") {
		t.Fatalf("denied: %d %s", r.status, r.body)
	}
	// The allowed call is audited as its invocation (an op that neither
	// mutates nor leaves the sandbox is not audited on its own); the
	// refusal as the op, with its decision.
	for cid, want := range map[string]string{"greet-1": "invocation allow", "greet-2": "op greeting.say deny"} {
		a := ts.do(t, "GET", "/v1/audit?correlation_id="+cid, ann, nil)
		var page struct {
			Events []struct {
				Kind     string `json:"kind"`
				Op       string `json:"op"`
				Decision string `json:"decision"`
			} `json:"events"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
			t.Fatalf("audit: %d %s", a.status, a.body)
		}
		found := false
		for _, ev := range page.Events {
			got := strings.Join(strings.Fields(ev.Kind+" "+ev.Op+" "+ev.Decision), " ")
			found = found || got == want
		}
		if !found {
			t.Errorf("%s: no event %q in %s", cid, want, a.body)
		}
	}
}
