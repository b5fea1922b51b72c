package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/driver"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// An op family registered in this test file alone, configured from its own
// section of moat-server.yaml (greeting:) with no edit to the server's
// Config: the section is decoded by the family's name into its type, by
// the strict decoder's rules, checked by its Validate where it was
// written, and provisioned in every host the server runs. Its capability,
// greeting (a flag), is its own, declared with it: no edit to policy. Its
// view of each module (Attach) is the module's name and the greeting its
// manifest's config names, and it counts greetings per module in its own
// storage: an interface of the backend's, registered with
// driver.RegisterFamily, reached with store.FamilyStorage.

// greetingStorage is the greeting family's storage (two of the
// backends' kv methods).
type greetingStorage interface {
	KVGet(ctx context.Context, org, module, key string) ([]byte, bool, error)
	KVPut(ctx context.Context, org, module, key string, value []byte, at int64) error
}

// greetingView is the family's view of one module.
type greetingView struct {
	module, word string // word: the module's config greeting_word, over the section's
	storage      greetingStorage
}

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
		Attach: func(ctx *ops.AttachContext, _ any) (any, error) {
			storage, err := store.FamilyStorage[greetingStorage](ctx.Store, "greeting")
			return &greetingView{module: ctx.Module.Name, word: ctx.Module.Manifest.Config["greeting_word"], storage: storage}, err
		},
		Ops: []ops.Op{{Name: "greeting.say", Func: ops.Typed(func(env *ops.Env, _ *abi.Empty) (*struct {
			Text string `json:"text"`
			N    int    `json:"n"`
		}, error) {
			c, ok := ops.ServiceOf[*greetingConfig](env, "greeting")
			v, ok2 := ops.ViewOf[*greetingView](env, "greeting")
			if !ok || !ok2 {
				return nil, abi.Errorf(abi.CodeUnavailable, "greeting.say: no greeting here")
			}
			word := c.Word
			if v.word != "" {
				word = v.word
			}
			key := "greetings:" + v.module
			b, _, err := v.storage.KVGet(env.Context, env.Principal.Org, "greeting", key)
			if err != nil {
				return nil, abi.Errorf(abi.CodeUnavailable, "greeting.say: the count is unavailable")
			}
			n, _ := strconv.Atoi(string(b))
			n++
			if err := v.storage.KVPut(env.Context, env.Principal.Org, "greeting", key, []byte(strconv.Itoa(n)), time.Now().UnixNano()); err != nil {
				return nil, abi.Errorf(abi.CodeUnavailable, "greeting.say: the count is unavailable")
			}
			return &struct {
				Text string `json:"text"`
				N    int    `json:"n"`
			}{strings.TrimSpace(strings.Repeat(word+" ", c.Times)) + ", " + env.Principal.User, n}, nil
		})}},
	})
	if err := driver.RegisterFamily(driver.FamilyOf[greetingStorage]("greeting", "server_test.greetingStorage")); err != nil {
		panic(err)
	}
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
		{"disable_families: [greeting, greetings]\n", `cfg.yaml:1: disable_families[1]: no op family "greetings"; the families are`},
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
	for name, caps := range map[string]string{"greeter": "capabilities: {greeting: true}\n", "mute": "", "howdy": "config: {greeting_word: howdy}\ncapabilities: {greeting: true}\n"} {
		if r := ts.upload(t, ann, wasm, []byte("name: "+name+"\nversion: 1.0.0\nactions: [{name: call}]\n"+caps)); r.status != http.StatusCreated {
			t.Fatalf("upload %s: %d %s", name, r.status, r.body)
		}
	}
	r := ts.do(t, "POST", "/v1/modules/greeter/actions/call", ann, strings.NewReader("greeting.say {}"), server.HeaderRequestID, "greet-1")
	if r.status != http.StatusOK || string(r.body) != `{"text":"hi hi, ann","n":1}` {
		t.Fatalf("granted: %d %s", r.status, r.body)
	}
	// Each module's own view (its config's word) and count (the family's
	// storage, per module).
	for i, want := range []string{`{"text":"howdy howdy, ann","n":1}`, `{"text":"howdy howdy, ann","n":2}`} {
		r := ts.do(t, "POST", "/v1/modules/howdy/actions/call", ann, strings.NewReader("greeting.say {}"), server.HeaderRequestID, fmt.Sprintf("howdy-%d", i))
		if r.status != http.StatusOK || string(r.body) != want {
			t.Fatalf("howdy %d: %d %s; want %s", i, r.status, r.body, want)
		}
	}
	r = ts.do(t, "POST", "/v1/modules/mute/actions/call", ann, strings.NewReader("greeting.say {}"), server.HeaderRequestID, "greet-2")
	if r.status == http.StatusOK || !strings.Contains(string(r.body), "denied") {
		t.Fatalf("denied: %d %s", r.status, r.body)
	}
	// The allowed call is audited as its invocation (an op that neither
	// mutates nor leaves the sandbox is not audited on its own); the
	// refusal as the op, with its decision.
	audited := func(ts *testServer, cid, want string) {
		t.Helper()
		a := ts.do(t, "GET", "/v1/audit?correlation_id="+cid, ann, nil)
		var page struct {
			Events []struct {
				Kind     string `json:"kind"`
				Op       string `json:"op"`
				Decision string `json:"decision"`
				Rule     string `json:"rule"`
			} `json:"events"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
			t.Fatalf("audit: %d %s", a.status, a.body)
		}
		found := false
		for _, ev := range page.Events {
			got := strings.Join(strings.Fields(ev.Kind+" "+ev.Op+" "+ev.Decision), " ")
			found = found || got == want || got+" ("+ev.Rule+")" == want
		}
		if !found {
			t.Errorf("%s: no event %q in %s", cid, want, a.body)
		}
	}
	for cid, want := range map[string]string{"greet-1": "invocation allow", "greet-2": "op greeting.say deny"} {
		audited(ts, cid, want)
	}

	// Disabled by the configuration (disable_families): the section is
	// still read, but the family's op is refused to a module granted it,
	// naming the family, and audited with the rule.
	parsed, err = server.ParseConfig("cfg.yaml", []byte("greeting:\n  word: hi\ndisable_families: [greeting]\n"))
	if err != nil {
		t.Fatal(err)
	}
	off := start(t, "", func(c *server.Config) {
		c.Families, c.DisableFamilies, c.Profile = parsed.Families, parsed.DisableFamilies, prof
	})
	ann = off.key(t, "acme", "ann", "admin")
	if r := off.upload(t, ann, wasm, []byte("name: greeter\nversion: 1.0.0\nactions: [{name: call}]\ncapabilities: {greeting: true}\n")); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	r = off.do(t, "POST", "/v1/modules/greeter/actions/call", ann, strings.NewReader("greeting.say {}"), server.HeaderRequestID, "greet-off")
	if r.status == http.StatusOK || !strings.Contains(string(r.body), "the greeting family is disabled on this host") {
		t.Fatalf("disabled: %d %s", r.status, r.body)
	}
	audited(off, "greet-off", "op greeting.say deny (host: family disabled)")
}
