package policy_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/policy"
)

// testProfile exercises every kind of grant: default, per module, per key,
// and the trusted parts of each.
const testProfile = `name: test
on_ungranted: ON_UNGRANTED
trusted_keys:
  - {name: acme, key: ` + acmeKey + `}
  - {name: other, key: ` + otherKey + `}
role_permissions:
  user: [greet.run]
  admin: [greet.run, orders.write]
default:
  capabilities:
    kv: true
    db: [orders]
    http: [https://api.example.com:443, "https://*.cdn.example.com:443", "http://intranet.local:*"]
    ai: [gpt-small]
    knowledge: [docs]
    filesystem: [/data, /out:rw]
  limits: {memory: 128MiB, timeout: 30s}
  trusted:
    capabilities: {media: true}
    limits: {memory: 512MiB}
modules:
  hello:
    capabilities: {db: [customers], tasks: true}
    limits: {timeout: 1m}
    trusted: {capabilities: {filesystem: [/srv/secret]}}
  anything:
    capabilities:
      db: ["*"]
      ai: ["*"]
      knowledge: true
      http: {targets: ["https://*:443"], allow_any: true}
keys:
  acme:
    capabilities: {knowledge: true}
`

func profile(t *testing.T, onUngranted string) *policy.Profile {
	t.Helper()
	p, err := policy.ParseProfile("test.yaml", []byte(strings.Replace(testProfile, "ON_UNGRANTED", onUngranted, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func manifest(t *testing.T, name, body string) *policy.Manifest {
	t.Helper()
	m, err := policy.ParseManifest("moat.yaml", []byte("name: "+name+"\nversion: 1.0.0\n"+body))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func refused(e *policy.Evaluation) []string {
	var out []string
	for _, r := range e.Refusals {
		out = append(out, r.Capability)
	}
	return out
}

func TestEvaluateCapabilities(t *testing.T) {
	p := profile(t, "refuse")
	allFlags := "capabilities: {kv: true, media: true, knowledge: true, tasks: true}\n"
	for _, tt := range []struct {
		name, module, body, signer string
		mode                       policy.Mode
		effective                  policy.Capabilities
		refused                    []string
	}{
		{"flags, sandboxed", "plain", allFlags, "", policy.ModeSandboxed,
			policy.Capabilities{KV: true}, []string{"media", "knowledge *", "tasks"}},
		{"flags, module grant", "hello", allFlags, "", policy.ModeSandboxed,
			policy.Capabilities{KV: true, Tasks: true}, []string{"media", "knowledge *"}},
		{"flags, trusted key with keys grant", "hello", allFlags, "acme", policy.ModeTrusted,
			policy.Capabilities{KV: true, Media: true, Knowledge: policy.Collections{"*"}, Tasks: true}, nil},
		{"flags, trusted key without keys grant", "hello", allFlags, "other", policy.ModeTrusted,
			policy.Capabilities{KV: true, Media: true, Tasks: true}, []string{"knowledge *"}},
		{"flags, untrusted signer", "hello", allFlags, "stranger", policy.ModeSandboxed,
			policy.Capabilities{KV: true, Tasks: true}, []string{"media", "knowledge *"}},
		{"nothing requested", "plain", "", "", policy.ModeSandboxed, policy.Capabilities{}, nil},

		{"db by name", "hello", "capabilities: {db: [orders, customers, secrets]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{DB: []string{"orders", "customers"}}, []string{"db secrets"}},
		{"db module grant is per module", "plain", "capabilities: {db: [orders, customers]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{DB: []string{"orders"}}, []string{"db customers"}},
		{"db star", "anything", "capabilities: {db: [orders, secrets]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{DB: []string{"orders", "secrets"}}, nil},
		{"ai by name", "plain", "capabilities: {ai: [gpt-small, gpt-big]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{AI: []string{"gpt-small"}}, []string{"ai gpt-big"}},
		{"ai star", "anything", "capabilities: {ai: [gpt-small, gpt-big]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{AI: []string{"gpt-small", "gpt-big"}}, nil},
		{"knowledge by name", "plain", "capabilities: {knowledge: [docs, faq]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{Knowledge: policy.Collections{"docs"}}, []string{"knowledge faq"}},
		{"knowledge star", "anything", "capabilities: {knowledge: [docs, faq]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{Knowledge: policy.Collections{"docs", "faq"}}, nil},
		{"knowledge true needs a grant of every collection", "plain", "capabilities: {knowledge: true}\n", "", policy.ModeSandboxed,
			policy.Capabilities{}, []string{"knowledge *"}},
		{"knowledge true granted", "anything", "capabilities: {knowledge: true}\n", "", policy.ModeSandboxed,
			policy.Capabilities{Knowledge: policy.Collections{"*"}}, nil},
		{"knowledge false", "plain", "capabilities: {knowledge: false}\n", "", policy.ModeSandboxed,
			policy.Capabilities{}, nil},

		{"filesystem prefixes", "plain", "capabilities: {filesystem: [/data/in, /database, /outside]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{Filesystem: []policy.FileGrant{{Path: "/data/in"}}}, []string{"filesystem /database", "filesystem /outside"}},
		{"filesystem the granted directory itself", "plain", "capabilities: {filesystem: [/data]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{Filesystem: []policy.FileGrant{{Path: "/data"}}}, nil},
		{"filesystem rw asked, ro granted: mounted read-only, refused as rw", "plain", "capabilities: {filesystem: [/data/x:rw]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{Filesystem: []policy.FileGrant{{Path: "/data/x"}}}, []string{"filesystem /data/x:rw"}},
		{"filesystem rw asked and granted", "plain", "capabilities: {filesystem: [{path: /out/a, rw: true}, /data]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{Filesystem: []policy.FileGrant{{Path: "/out/a", RW: true}, {Path: "/data"}}}, nil},
		{"filesystem ro asked under an rw grant stays ro", "plain", "capabilities: {filesystem: [/out]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{Filesystem: []policy.FileGrant{{Path: "/out"}}}, nil},
		{"filesystem trusted-only, sandboxed", "hello", "capabilities: {filesystem: [/srv/secret/x]}\n", "", policy.ModeSandboxed,
			policy.Capabilities{}, []string{"filesystem /srv/secret/x"}},
		{"filesystem trusted-only, trusted", "hello", "capabilities: {filesystem: [/srv/secret/x]}\n", "other", policy.ModeTrusted,
			policy.Capabilities{Filesystem: []policy.FileGrant{{Path: "/srv/secret/x"}}}, nil},
		{"trusted part of another module", "plain", "capabilities: {filesystem: [/srv/secret]}\n", "acme", policy.ModeTrusted,
			policy.Capabilities{}, []string{"filesystem /srv/secret"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := p.Evaluate(manifest(t, tt.module, tt.body), tt.signer)
			if e.Mode != tt.mode || e.Module != tt.module || e.Profile != "test" {
				t.Errorf("mode %s module %s profile %s", e.Mode, e.Module, e.Profile)
			}
			if want := map[bool]string{true: tt.signer, false: ""}[tt.mode == policy.ModeTrusted]; e.Signer != want {
				t.Errorf("Signer = %q, want %q", e.Signer, want)
			}
			if !reflect.DeepEqual(e.Effective, tt.effective) {
				t.Errorf("Effective = %+v\nwant        %+v", e.Effective, tt.effective)
			}
			if got := refused(e); !slices.Equal(got, tt.refused) {
				t.Errorf("refused %q, want %q", got, tt.refused)
			}
			if e.Refused != (len(tt.refused) > 0) {
				t.Errorf("Refused = %v with on_ungranted refuse", e.Refused)
			}
		})
	}
}

func TestEvaluateHTTP(t *testing.T) {
	p := profile(t, "refuse")
	for _, tt := range []struct {
		module, target string
		ok             bool
	}{
		{"plain", "https://api.example.com:443", true},
		{"plain", "http://api.example.com:443", false},   // scheme differs
		{"plain", "https://api.example.com:8443", false}, // port differs
		{"plain", "https://api.example.com:*", false},    // any port is more than 443
		{"plain", "https://img.cdn.example.com:443", true},
		{"plain", "https://a.b.cdn.example.com:443", true},
		{"plain", "https://*.eu.cdn.example.com:443", true}, // a narrower wildcard
		{"plain", "https://*.cdn.example.com:443", true},
		{"plain", "https://cdn.example.com:443", false}, // *.x does not cover x
		{"plain", "https://evilcdn.example.com:443", false},
		{"plain", "https://*.example.com:443", false}, // a wider wildcard
		{"plain", "http://intranet.local:8080", true}, // granted port *
		{"plain", "http://intranet.local:*", true},
		{"plain", "https://*:443", false},
		{"anything", "https://anywhere.example.org:443", true},
		{"anything", "https://*:443", true},
		{"anything", "https://*.example.org:443", true},
		{"anything", "http://anywhere.example.org:80", false},
		{"anything", "*", false},
	} {
		m := manifest(t, tt.module, "capabilities:\n  http: {targets: [\""+tt.target+"\"], allow_any: true}\n")
		e := p.Evaluate(m, "")
		if got := len(e.Effective.HTTP.Targets) == 1; got != tt.ok {
			t.Errorf("%s requesting %s: granted = %v, want %v (%v)", tt.module, tt.target, got, tt.ok, e.Refusals)
		}
	}
	// A "*" target in a grant covers everything.
	star, err := policy.ParseProfile("p.yaml", []byte("name: p\ndefault:\n  capabilities:\n    http: {targets: [\"*\"], allow_any: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := manifest(t, "a", "capabilities:\n  http: {targets: [\"*\", \"http://x.org:80\", \"https://*:*\"], allow_any: true}\n")
	if e := star.Evaluate(m, ""); len(e.Refusals) != 0 || !e.Effective.HTTP.AllowAny {
		t.Errorf("star grant: %+v", e)
	}
}

func TestEvaluateRefusalRules(t *testing.T) {
	p := profile(t, "refuse")
	m := manifest(t, "hello", "capabilities: {kv: true, media: true, db: [secrets], filesystem: [/srv/secret]}\n")
	e := p.Evaluate(m, "")
	want := []policy.Refusal{
		{"db secrets", "profile test: default + modules.hello grant", "collection secrets is not granted (granted: orders, customers)"},
		{"media", "profile test: default.trusted grant", "granted only to modules signed by a trusted key"},
		{"filesystem /srv/secret", "profile test: modules.hello.trusted grant", "granted only to modules signed by a trusted key"},
	}
	if !reflect.DeepEqual(e.Refusals, want) {
		t.Errorf("got  %q\nwant %q", e.Refusals, want)
	}
	e = p.Evaluate(manifest(t, "plain", "capabilities: {kv: true}\n"), "stranger")
	if e.Mode != policy.ModeSandboxed || !strings.Contains(e.ModeReason, `signer "stranger" is not a trusted key of profile test`) {
		t.Errorf("untrusted signer: %s: %s", e.Mode, e.ModeReason)
	}
	bare, err := policy.ParseProfile("bare.yaml", []byte("name: bare\n"))
	if err != nil {
		t.Fatal(err)
	}
	e = bare.Evaluate(manifest(t, "plain", "capabilities: {kv: true}\n"), "")
	if len(e.Refusals) != 1 || e.Refusals[0].Rule != "profile bare: no grant applies to this module" {
		t.Errorf("no grants: %+v", e.Refusals)
	}
}

func TestEvaluateLimits(t *testing.T) {
	p := profile(t, "refuse")
	sec := func(n int) policy.Duration { return policy.Duration(time.Duration(n) * time.Second) }
	for _, tt := range []struct {
		name, module, body, signer string
		want                       policy.Limits
		refused                    []string
	}{
		{"unset requests get the maximums", "plain", "", "",
			policy.Limits{Memory: 128 << 20, Timeout: sec(30)}, nil},
		{"requests under the maximums stay", "plain", "limits: {memory: 64MiB, timeout: 5s, disk: 1GiB, concurrency: 3}\n", "",
			policy.Limits{Memory: 64 << 20, Timeout: sec(5), Disk: 1 << 30, Concurrency: 3}, nil},
		{"requests over the maximums are clamped", "plain", "limits: {memory: 256MiB, timeout: 45s}\n", "",
			policy.Limits{Memory: 128 << 20, Timeout: sec(30)}, []string{"limits.memory 256 MiB", "limits.timeout 45s"}},
		{"a module grant raises a maximum", "hello", "limits: {memory: 256MiB, timeout: 45s}\n", "",
			policy.Limits{Memory: 128 << 20, Timeout: sec(45)}, []string{"limits.memory 256 MiB"}},
		{"a trusted grant raises a maximum", "hello", "limits: {memory: 256MiB, timeout: 2m}\n", "acme",
			policy.Limits{Memory: 256 << 20, Timeout: sec(60)}, []string{"limits.timeout 2m"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := p.Evaluate(manifest(t, tt.module, tt.body), tt.signer)
			if e.Limits != tt.want {
				t.Errorf("Limits = %+v, want %+v", e.Limits, tt.want)
			}
			if got := refused(e); !slices.Equal(got, tt.refused) {
				t.Errorf("refused %q, want %q", got, tt.refused)
			}
		})
	}
	e := p.Evaluate(manifest(t, "plain", "limits: {memory: 256MiB}\n"), "")
	want := policy.Refusal{Capability: "limits.memory 256 MiB", Rule: "profile test: default grant",
		Reason: "exceeds the profile's maximum 128 MiB; default.trusted allows it for modules signed by a trusted key"}
	if len(e.Refusals) != 1 || e.Refusals[0] != want {
		t.Errorf("got %+v, want %+v", e.Refusals, want)
	}
}

func TestEvaluateOnUngranted(t *testing.T) {
	m := manifest(t, "plain", "capabilities: {kv: true, tasks: true}\nlimits: {memory: 1GiB}\n")
	for _, tt := range []struct {
		on      string
		refused bool
	}{{"refuse", true}, {"deny_at_call", false}} {
		e := profile(t, tt.on).Evaluate(m, "")
		if e.Refused != tt.refused || len(e.Refusals) != 2 {
			t.Errorf("on_ungranted %s: Refused %v, refusals %v", tt.on, e.Refused, e.Refusals)
		}
		if !e.Effective.KV || e.Effective.Tasks || e.Limits.Memory != 128<<20 {
			t.Errorf("on_ungranted %s: effective %+v, limits %+v", tt.on, e.Effective, e.Limits)
		}
	}
	// Nothing refused: loads either way.
	ok := manifest(t, "plain", "capabilities: {kv: true}\n")
	if e := profile(t, "refuse").Evaluate(ok, ""); e.Refused || len(e.Refusals) != 0 {
		t.Errorf("%+v", e)
	}
}

func TestEvaluateRequireSignature(t *testing.T) {
	p := profile(t, "deny_at_call")
	p.RequireSignature = true
	m := manifest(t, "plain", "capabilities: {kv: true}\n")
	e := p.Evaluate(m, "")
	if !e.Refused || len(e.Refusals) != 1 || e.Refusals[0].Capability != "signature" ||
		e.Refusals[0].Rule != "profile test: require_signature" || !strings.Contains(e.Refusals[0].Reason, "sign the module with one of acme, other") {
		t.Errorf("unsigned: %+v", e)
	}
	if e := p.Evaluate(m, "other"); e.Refused || len(e.Refusals) != 0 || e.ModeReason != "signed by trusted key other" {
		t.Errorf("signed: %+v", e)
	}
}

func TestCheckOp(t *testing.T) {
	p := profile(t, "deny_at_call")
	m := manifest(t, "plain", `capabilities:
  kv: true
  db: [orders, secrets]
  http: [https://api.example.com:443, https://evil.com:443, "https://*.cdn.example.com:443"]
  ai: [gpt-small]
  media: true
  knowledge: [docs, faq]
`)
	e := p.Evaluate(m, "")
	for _, tt := range []struct {
		op, target string
		rule       string // "" means allowed
		reason     string
	}{
		{abi.OpLogWrite, "", "", ""},
		{abi.OpConfigGet, "", "", ""},
		{abi.OpKVGet, "", "", ""},
		{abi.OpKVPut, "", "", ""},
		{abi.OpKVDelete, "", "", ""},
		{abi.OpKVList, "", "", ""},
		{"db.get", "orders", "", ""},
		{"db.query", "secrets", "profile test: default grant", "db secrets was requested but not granted: collection secrets is not granted"},
		{"db.insert", "customers", "manifest capabilities", "db customers is not among the capabilities the module requests; add db: [customers] under capabilities in moat.yaml"},
		{"db.delete", "", "op db.delete", "names no collection"},
		{"http.fetch", "https://api.example.com/v1/greet?x=1", "", ""},
		{"http.fetch", "https://API.example.com:443/", "", ""},
		{"http.fetch", "https://img.cdn.example.com/logo.png", "", ""},
		{"http.fetch", "http://api.example.com/", "manifest capabilities", "add http: [http://api.example.com:80]"},
		{"http.fetch", "https://api.example.com:8443/", "manifest capabilities", "http https://api.example.com:8443 is not among"},
		{"http.fetch", "https://evil.com/steal", "profile test: default grant", "http https://evil.com:443 was requested but not granted: no granted target covers it"},
		{"http.fetch", "ftp://api.example.com/", "op http.fetch", "not an http or https URL"},
		{"http.fetch", "", "op http.fetch", "not an http or https URL"},
		{"ai.complete", "gpt-small", "", ""},
		{"ai.embed", "gpt-big", "manifest capabilities", "ai gpt-big is not among"},
		{"media.put", "", "profile test: default.trusted grant", "media was requested but not granted: granted only to modules signed by a trusted key"},
		{"knowledge.search", "docs", "", ""},
		{"knowledge.add", "docs", "", ""},
		{"knowledge.delete", "faq", "profile test: default grant", "knowledge faq was requested but not granted: collection faq is not granted (granted: docs)"},
		{"knowledge.search", "notes", "manifest capabilities", "knowledge notes is not among the capabilities the module requests; add knowledge: [notes] under capabilities"},
		{"knowledge.search", "*", "manifest capabilities", "add knowledge: [*]"},
		{"knowledge.add", "", "op knowledge.add", "names no collection"},
		{"task.enqueue", "", "manifest capabilities", "tasks is not among"},
		{"kv.remove", "", "unknown op", `no op is named "kv.remove"`},
		{"kv.gett", "", "unknown op", "did you mean kv.get?"},
		{"", "", "unknown op", "known ops are ai.complete"},
	} {
		err := e.CheckOp(tt.op, tt.target)
		if tt.rule == "" {
			if err != nil {
				t.Errorf("CheckOp(%s, %s) = %v, want nil", tt.op, tt.target, err)
			}
			continue
		}
		var d *policy.DeniedError
		if !errors.As(err, &d) {
			t.Errorf("CheckOp(%s, %s) = %v, want a *DeniedError", tt.op, tt.target, err)
			continue
		}
		if d.Rule != tt.rule || !strings.Contains(d.Reason, tt.reason) || d.Module != "plain" || d.Op != tt.op || d.Code() != abi.CodeDenied {
			t.Errorf("CheckOp(%s, %s) = %+v\nwant rule %q, reason containing %q", tt.op, tt.target, d, tt.rule, tt.reason)
		}
	}
	// A trusted module gets the trusted part at call time too.
	if err := p.Evaluate(m, "acme").CheckOp("media.put", ""); err != nil {
		t.Errorf("trusted media.put: %v", err)
	}
}

func TestCheckOpHandBuilt(t *testing.T) {
	e := &policy.Evaluation{Module: "m", Effective: policy.Capabilities{HTTP: policy.HTTPCaps{Targets: []string{"https://a.org:443"}}}}
	if err := e.CheckOp("http.fetch", "https://a.org/x"); err != nil {
		t.Error(err)
	}
	if err := e.CheckOp("http.fetch", "https://b.org/x"); err == nil {
		t.Error("b.org allowed")
	}
}

func TestAuthorize(t *testing.T) {
	p := profile(t, "refuse")
	m := manifest(t, "hello", `actions:
  - name: greet
    roles: [user, admin]
    permissions: [greet.run]
  - name: wipe
    roles: [admin]
    permissions: [orders.write]
    confirm: true
  - name: report
    roles: [user, intern]
    permissions: [greet.run]
  - name: open
`)
	who := func(user string, roles ...string) policy.Principal {
		return policy.Principal{User: user, Org: "acme", Roles: roles}
	}
	for _, tt := range []struct {
		action string
		who    policy.Principal
		want   string // "" means allowed; else the whole Error()
	}{
		{"greet", who("ann", "user"), ""},
		{"greet", who("bob", "admin"), ""},
		{"wipe", who("bob", "user", "admin"), ""},
		{"open", who("carl"), ""},
		{"open", who("carl", "guest"), ""},
		{"report", who("ann", "user"), ""},
		{"wipe", who("ann", "user"),
			"denied: module hello action wipe: requires one of roles [admin]; ann@acme has [user] (rule: manifest actions[1].roles)"},
		{"greet", who("dave"),
			"denied: module hello action greet: requires one of roles [user admin]; dave@acme has no roles (rule: manifest actions[0].roles)"},
		{"report", who("ivy", "intern"),
			"denied: module hello action report: requires permission greet.run, which none of ivy@acme's roles [intern] grants in profile test (rule: manifest actions[2].permissions)"},
		{"gret", who("ann", "user"),
			`denied: module hello action gret: action "gret" is not declared in moat.yaml (did you mean greet?); declared actions are greet, wipe, report, open (rule: manifest actions)`},
		{"greet", policy.Principal{User: "ann", Roles: []string{"user"}},
			"denied: module hello action greet: principal org is empty: set it (for example --org acme) (rule: principal)"},
	} {
		err := p.Authorize(m, tt.action, tt.who)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Authorize(%s, %s) = %v", tt.action, tt.who, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("Authorize(%s, %s)\ngot  %v\nwant %s", tt.action, tt.who, err, tt.want)
		}
		var d *policy.DeniedError
		if err != nil && (!errors.As(err, &d) || d.Code() != abi.CodeDenied || d.Action != tt.action) {
			t.Errorf("Authorize(%s, %s): %#v", tt.action, tt.who, err)
		}
	}

	cmd := manifest(t, "tool", "kind: wasi-command\n")
	if err := p.Authorize(cmd, "", who("ann")); err != nil {
		t.Errorf("command: %v", err)
	}
	if err := p.Authorize(cmd, "x", who("ann")); err == nil || !strings.Contains(err.Error(), "declares no actions") {
		t.Errorf("command action: %v", err)
	}
}

func TestDeniedErrorFormat(t *testing.T) {
	for _, tt := range []struct {
		err  policy.DeniedError
		want string
	}{
		{policy.DeniedError{Module: "m", Op: "kv.put", Rule: "r", Reason: "no"}, "denied: module m op kv.put: no (rule: r)"},
		{policy.DeniedError{Module: "m", Action: "a", Op: "kv.put", Reason: "no"}, "denied: module m action a op kv.put: no"},
		{policy.DeniedError{Reason: "no"}, "denied: no"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

// knowledge: true asks for every collection: a grant of every collection
// gives it any name, a grant of named ones gives it none (naming the
// collections is how a module gets fewer), and it marshals back as true.
func TestCheckOpKnowledgeAll(t *testing.T) {
	p := profile(t, "deny_at_call")
	all := manifest(t, "anything", "capabilities: {knowledge: true}\n")
	e := p.Evaluate(all, "")
	for _, coll := range []string{"docs", "faq", "anything_else"} {
		if err := e.CheckOp("knowledge.search", coll); err != nil {
			t.Errorf("granted every collection, %s: %v", coll, err)
		}
	}
	e = p.Evaluate(manifest(t, "plain", "capabilities: {knowledge: true}\n"), "")
	var d *policy.DeniedError
	if err := e.CheckOp("knowledge.search", "docs"); !errors.As(err, &d) || d.Rule != "profile test" || !strings.Contains(d.Reason, "knowledge docs was requested but the profile does not grant it") {
		t.Errorf("asked for every collection, granted docs: %v", err)
	}
	out, err := yaml.Marshal(all.Capabilities)
	if err != nil || !strings.Contains(string(out), "knowledge: true") {
		t.Errorf("marshalled %q, %v; want knowledge: true", out, err)
	}
	out, err = yaml.Marshal(policy.Capabilities{Knowledge: policy.Collections{"docs", "faq"}})
	if err != nil || !strings.Contains(string(out), "knowledge:\n    - docs\n    - faq") {
		t.Errorf("marshalled %q, %v; want the list", out, err)
	}
}
