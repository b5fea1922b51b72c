package policy_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
	"gopkg.in/yaml.v3"
)

// Two well-formed minisign public keys (base64 of "Ed", key id, Ed25519 key).
const (
	acmeKey  = "RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3"
	otherKey = "RWQBAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fICEiIyQlJico"
)

const fullProfile = `name: minimal
require_signature: false
on_ungranted: refuse
confirm_ttl: 10m
sensitive_ops: [kv.delete]
trusted_keys:
  - name: acme-release
    key: ` + acmeKey + `
role_permissions:
  admin: [greet.run, orders.write]
  user: [greet.run]
default:
  capabilities: {kv: true}
  limits: {memory: 128MiB, timeout: 30s, disk: 100MiB, concurrency: 8, calls_per_minute: 6000}
modules:
  hello-go:
    capabilities: {http: [https://api.example.com:443]}
    trusted: {capabilities: {filesystem: [/srv/data]}}
keys:
  acme-release:
    capabilities: {ai: [gpt-small]}
`

func TestParseProfileFull(t *testing.T) {
	p, err := policy.ParseProfile("minimal.yaml", []byte(fullProfile))
	if err != nil {
		t.Fatal(err)
	}
	want := &policy.Profile{
		Name:            "minimal",
		OnUngranted:     policy.OnUngrantedRefuse,
		ConfirmTTL:      policy.Duration(10 * time.Minute),
		SensitiveOps:    []string{"kv.delete"},
		TrustedKeys:     []policy.TrustedKey{{Name: "acme-release", Key: acmeKey}},
		RolePermissions: map[string][]string{"admin": {"greet.run", "orders.write"}, "user": {"greet.run"}},
		Default: &policy.Grant{
			Capabilities: policy.Capabilities{KV: true},
			Limits: policy.Limits{Memory: 128 << 20, Timeout: policy.Duration(30 * time.Second), Disk: 100 << 20,
				Concurrency: 8, CallsPerMinute: 6000},
		},
		Modules: map[string]policy.Grant{"hello-go": {
			Capabilities: policy.Capabilities{HTTP: policy.HTTPCaps{Targets: []string{"https://api.example.com:443"}}},
			Trusted:      &policy.Grant{Capabilities: policy.Capabilities{Filesystem: []policy.FileGrant{{Path: "/srv/data"}}}},
		}},
		Keys: map[string]policy.Grant{"acme-release": {Capabilities: policy.Capabilities{AI: []string{"gpt-small"}}}},
		File: "minimal.yaml",
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got  %+v\nwant %+v", p, want)
	}
}

func TestParseProfileDefaults(t *testing.T) {
	p, err := policy.ParseProfile("p.yaml", []byte("name: bare\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.OnUngranted != policy.OnUngrantedRefuse || p.ConfirmTTL != policy.DefaultConfirmTTL || p.Default != nil {
		t.Errorf("defaults not applied: %+v", p)
	}
}

func TestBuiltinProfiles(t *testing.T) {
	if got := policy.BuiltinProfiles(); !slices.Equal(got, []string{"dev", "minimal"}) {
		t.Fatalf("BuiltinProfiles() = %v", got)
	}
	minimal, err := policy.LoadProfile("minimal")
	if err != nil {
		t.Fatal(err)
	}
	if minimal.OnUngranted != policy.OnUngrantedRefuse || minimal.RequireSignature || len(minimal.SensitiveOps) != 0 ||
		!reflect.DeepEqual(minimal.Default.Capabilities, policy.Capabilities{KV: true}) ||
		minimal.Default.Limits.Memory == 0 || minimal.Default.Limits.Timeout == 0 || minimal.Default.Limits.Disk == 0 ||
		minimal.Default.Limits.Concurrency == 0 || minimal.Default.Limits.CallsPerMinute == 0 {
		t.Errorf("minimal is not minimal: %+v %+v", minimal, minimal.Default)
	}
	dev, err := policy.LoadProfile("dev")
	if err != nil {
		t.Fatal(err)
	}
	c := dev.Default.Capabilities
	if dev.OnUngranted != policy.OnUngrantedDenyAtCall || !c.KV || !c.Media || !slices.Equal(c.Knowledge, policy.Collections{"*"}) || !c.Tasks ||
		!slices.Equal(c.DB, []string{"*"}) || !slices.Equal(c.AI, []string{"*"}) || !c.HTTP.AllowAny ||
		len(c.Filesystem) != 0 || dev.Default.Limits.Memory <= minimal.Default.Limits.Memory {
		t.Errorf("dev is not permissive: %+v %+v", dev, dev.Default)
	}
	if dev.File != "builtin/dev.yaml" {
		t.Errorf("dev.File = %q", dev.File)
	}
}

func TestLoadProfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(path, []byte(fullProfile), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := policy.LoadProfile(path)
	if err != nil || p.File != path || p.Name != "minimal" {
		t.Fatalf("LoadProfile(%s) = %+v, %v", path, p, err)
	}
	_, err = policy.LoadProfile("minimall")
	if err == nil || !strings.Contains(err.Error(), `no built-in profile "minimall" (did you mean minimal?); built-in profiles are dev, minimal`) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := policy.LoadProfile(filepath.Join(dir, "nope.yaml")); err == nil || !strings.Contains(err.Error(), "reading profile") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := policy.LoadProfile("nope.yaml"); err == nil || !strings.Contains(err.Error(), "reading profile") {
		t.Errorf("a name ending in .yaml is a path: %v", err)
	}
}

func TestParseProfileErrors(t *testing.T) {
	const head = "name: p\n" // line 1
	for _, tt := range []struct {
		name  string
		yaml  string
		line  int
		field string
		msg   string
	}{
		{"missing name", "on_ungranted: refuse\n", 1, "name", "required"},
		{"syntax", head + "default:\n  capabilities: {kv: true\n", 3, "", "YAML syntax"},
		{"unknown field", head + "trusted_key: []\n", 2, "trusted_key", "did you mean trusted_keys?"},
		{"unknown grant field", head + "default:\n  capabilites: {kv: true}\n", 3, "default.capabilites", "did you mean capabilities?"},
		{"on_ungranted", head + "on_ungranted: deny\n", 2, "on_ungranted", "write refuse (refuse the module at load) or deny_at_call"},
		{"confirm_ttl", head + "confirm_ttl: ten minutes\n", 2, "confirm_ttl", "is not a duration"},
		{"sensitive op", head + "sensitive_ops: [kv.remove]\n", 2, "sensitive_ops[0]", `"kv.remove" is not an op`},
		{"sensitive op typo", head + "sensitive_ops:\n  - kv.get\n  - kv.delet\n", 4, "sensitive_ops[1]", "did you mean kv.delete?"},
		{"bad key", head + "trusted_keys:\n  - name: acme\n    key: RWQnotakey\n", 4, "trusted_keys[0].key",
			"not a minisign public key (expected the base64 line starting with RW from a .pub file)"},
		{"short key", head + "trusted_keys:\n  - name: acme\n    key: RWQAAQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJQ==\n", 4, "trusted_keys[0].key", "not a minisign public key"},
		{"missing key", head + "trusted_keys:\n  - name: acme\n", 3, "trusted_keys[0].key", "required"},
		{"duplicate key name", head + "trusted_keys:\n  - {name: acme, key: " + acmeKey + "}\n  - {name: acme, key: " + otherKey + "}\n", 4, "trusted_keys[1].name", "already the name of trusted_keys[0]"},
		{"duplicate key", head + "trusted_keys:\n  - {name: a, key: " + acmeKey + "}\n  - {name: b, key: " + acmeKey + "}\n", 4, "trusted_keys[1].key", "the same key as trusted_keys[0]"},
		{"signature without keys", head + "require_signature: true\n", 2, "require_signature", "trusted_keys is empty"},
		{"keys names unknown key", head + "trusted_keys:\n  - {name: acme-release, key: " + acmeKey + "}\nkeys:\n  acme-relase:\n    capabilities: {kv: true}\n", 5, "keys.acme-relase", "no trusted key is named acme-relase (did you mean acme-release?); trusted keys are acme-release"},
		{"keys without trusted keys", head + "keys:\n  acme: {}\n", 3, "keys.acme", "trusted_keys is empty"},
		{"bad module name", head + "modules:\n  Hello:\n    capabilities: {kv: true}\n", 3, "modules.Hello", "not a valid module name"},
		{"nested trusted", head + "default:\n  trusted:\n    trusted: {capabilities: {kv: true}}\n", 4, "default.trusted.trusted", "cannot be nested"},
		{"grant star host", head + "default:\n  capabilities:\n    http: [\"https://*:443\"]\n", 4, "default.capabilities.http[0]", "allow_any: true"},
		{"grant bad limit", head + "modules:\n  a:\n    limits: {memory: lots}\n", 4, "modules.a.limits.memory", `"lots" is not a size`},
		{"grant bad collection", head + "default:\n  capabilities: {db: [\"a-b\"]}\n", 3, "default.capabilities.db[0]", "not a collection name"},
		{"role permissions type", head + "role_permissions:\n  admin: orders.write\n", 3, "role_permissions.admin", "write it as [orders.write]"},
		{"role name", head + "role_permissions:\n  \"two words\": [x]\n", 3, "role_permissions.two words", "not a valid role name"},
		{"grant of /", head + "default:\n  capabilities:\n    filesystem: [/]\n", 4, "default.capabilities.filesystem[0]", "/ is the whole machine"},
		{"grant of /proc", head + "modules:\n  a:\n    trusted: {capabilities: {filesystem: [/proc:rw]}}\n", 4, "modules.a.trusted.capabilities.filesystem[0]", "/proc is under /proc"},
		{"grant twice", head + "default:\n  capabilities:\n    filesystem: [/srv, /srv:rw]\n", 4, "default.capabilities.filesystem[1]", "listed twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.ParseProfile("minimal.yaml", []byte(tt.yaml))
			checkFileError(t, err, "minimal.yaml", tt.line, tt.field, tt.msg)
		})
	}
}

func TestProfileGrantWildcards(t *testing.T) {
	p, err := policy.ParseProfile("p.yaml", []byte(`name: p
default:
  capabilities:
    db: ["*"]
    ai: ["*"]
    http: {targets: ["*", "https://*:443"], allow_any: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Default.Capabilities.HTTP.AllowAny {
		t.Error("allow_any lost")
	}
}

func TestIsSensitiveAndPermissions(t *testing.T) {
	p, err := policy.ParseProfile("minimal.yaml", []byte(fullProfile))
	if err != nil {
		t.Fatal(err)
	}
	if !p.IsSensitive("kv.delete") || p.IsSensitive("kv.put") {
		t.Error("IsSensitive")
	}
	for _, tt := range []struct {
		roles []string
		want  []string
	}{
		{nil, nil},
		{[]string{"user"}, []string{"greet.run"}},
		{[]string{"user", "admin"}, []string{"greet.run", "orders.write"}},
		{[]string{"ghost"}, nil},
	} {
		if got := p.Permissions(tt.roles); !slices.Equal(got, tt.want) {
			t.Errorf("Permissions(%v) = %v, want %v", tt.roles, got, tt.want)
		}
	}
}

// A profile may grant one directory read-only and one inside it
// read-write (unlike a manifest, which asks for what one preopen shows);
// FileGrants lists every grant of every part, for the host's Landlock.
func TestProfileFileGrants(t *testing.T) {
	p, err := policy.ParseProfile("p.yaml", []byte(`name: p
default:
  capabilities:
    filesystem: [/srv, /srv/out:rw]
modules:
  a:
    trusted: {capabilities: {filesystem: [{path: /opt/a, rw: true}]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := p.FileGrants()
	want := []policy.FileGrant{{Path: "/srv"}, {Path: "/srv/out", RW: true}, {Path: "/opt/a", RW: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FileGrants = %+v, want %+v", got, want)
	}
	// The inner read-write grant covers a read-write request beside the
	// outer read-only one.
	m, err := policy.ParseManifest("moat.yaml", []byte("name: a\nversion: 1.0.0\ncapabilities: {filesystem: [/srv/out/x:rw, /srv/in]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := p.Evaluate(m, "")
	if len(e.Refusals) != 0 || !reflect.DeepEqual(e.Effective.Filesystem, []policy.FileGrant{{Path: "/srv/out/x", RW: true}, {Path: "/srv/in"}}) {
		t.Errorf("Evaluate: %+v %+v", e.Effective.Filesystem, e.Refusals)
	}
}

// The grant's YAML round-trips: a path ending in :rw or :ro itself is
// written as a mapping, so it reads back as the same path.
func TestFileGrantYAML(t *testing.T) {
	for _, g := range []policy.FileGrant{{Path: "/a"}, {Path: "/a", RW: true}, {Path: "/odd:rw"}, {Path: "/odd:ro", RW: true}} {
		b, err := yaml.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		var back policy.FileGrant
		if err := yaml.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back != g {
			t.Errorf("%+v → %q → %+v", g, b, back)
		}
	}
}
