package policy_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
)

const fullManifest = `# the example from the documentation
name: hello-go
version: 1.2.0
language: go
module: hello-go.wasm
kind: moat
actions:
  - name: greet
    export: greet
    roles: [user, admin]
    permissions: [greet.run]
    confirm: false
    timeout: 5s
    max_input: 64KiB
    max_output: 1MiB
  - name: wipe
    roles: [admin]
    confirm: true
capabilities:
  kv: true
  db: [orders, customers]
  http:
    - https://api.example.com:443
  media: true
  ai: [gpt-small]
  knowledge: true
  tasks: true
  filesystem: [/data/in, /data/out:rw, {path: "/srv/x:rw"}]
limits:
  memory: 64MiB
  timeout: 10s
  disk: 100MiB
  concurrency: 4
  calls_per_minute: 600
config:
  greeting: Hello
  port: "8080"
`

func TestParseManifestFull(t *testing.T) {
	m, err := policy.ParseManifest("moat.yaml", []byte(fullManifest))
	if err != nil {
		t.Fatal(err)
	}
	want := &policy.Manifest{
		Name: "hello-go", Version: "1.2.0", Language: "go", Module: "hello-go.wasm", Kind: policy.KindMoat,
		Actions: []policy.Action{
			{Name: "greet", Export: "greet", Roles: []string{"user", "admin"}, Permissions: []string{"greet.run"},
				Timeout: policy.Duration(5 * time.Second), MaxInput: 64 << 10, MaxOutput: 1 << 20},
			{Name: "wipe", Export: "wipe", Roles: []string{"admin"}, Confirm: true},
		},
		Capabilities: policy.Capabilities{
			KV: true, DB: []string{"orders", "customers"},
			HTTP:  policy.HTTPCaps{Targets: []string{"https://api.example.com:443"}},
			Media: true, AI: []string{"gpt-small"}, Knowledge: policy.Collections{"*"}, Tasks: true,
			Filesystem: []policy.FileGrant{{Path: "/data/in"}, {Path: "/data/out", RW: true}, {Path: "/srv/x:rw"}},
		},
		Limits: policy.Limits{Memory: 64 << 20, Timeout: policy.Duration(10 * time.Second), Disk: 100 << 20,
			Concurrency: 4, CallsPerMinute: 600},
		Config: map[string]string{"greeting": "Hello", "port": "8080"},
		File:   "moat.yaml",
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got  %+v\nwant %+v", m, want)
	}
	if a, ok := m.Action("wipe"); !ok || !a.Confirm {
		t.Errorf("Action(wipe) = %+v, %v", a, ok)
	}
	if _, ok := m.Action("nope"); ok {
		t.Error("Action(nope) found")
	}
}

func TestParseManifestDefaults(t *testing.T) {
	m, err := policy.ParseManifest("moat.yaml", []byte("name: tiny\nversion: 0.1.0-rc.1\nactions:\n  - name: run\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Module != "tiny.wasm" || m.Kind != policy.KindMoat || m.Actions[0].Export != "run" {
		t.Errorf("defaults not applied: %+v", m)
	}
}

func TestParseManifestHTTPObjectForm(t *testing.T) {
	m, err := policy.ParseManifest("moat.yaml", []byte(`name: a
version: 1.0.0
capabilities:
  http:
    targets: ["https://*:443", "http://*.example.com:*", "https://[::1]:8443"]
    allow_any: true
`))
	if err != nil {
		t.Fatal(err)
	}
	want := policy.HTTPCaps{Targets: []string{"https://*:443", "http://*.example.com:*", "https://[::1]:8443"}, AllowAny: true}
	if !reflect.DeepEqual(m.Capabilities.HTTP, want) {
		t.Errorf("got %+v", m.Capabilities.HTTP)
	}
}

func TestParseManifestKinds(t *testing.T) {
	for _, k := range []policy.Kind{policy.KindMoat, policy.KindWASICommand, policy.KindExtism} {
		m, err := policy.ParseManifest("moat.yaml", []byte("name: a\nversion: 1.0.0\nkind: "+string(k)+"\n"))
		if err != nil || m.Kind != k {
			t.Errorf("kind %s: %v, %v", k, m, err)
		}
	}
}

// manifestErrors lists bad manifests with where and what the error must say.
var manifestErrors = []struct {
	name  string
	yaml  string
	line  int
	field string
	msg   string
}{
	// syntax and shape
	{"empty file", "", 1, "", "the file is empty"},
	// native plugins
	{"native without command", "name: n\nversion: 1.0.0\nkind: native\nactions: [{name: a}]\n", 1, "command", "add a line like command: python3 main.py"},
	{"command on a wasm plugin", "name: n\nversion: 1.0.0\ncommand: python3 main.py\n", 3, "command", "only a native plugin has a command"},
	{"native without actions", "name: n\nversion: 1.0.0\nkind: native\ncommand: python3 main.py\n", 1, "actions", "declares the actions its worker serves"},
	{"command leaving the directory", "name: n\nversion: 1.0.0\nkind: native\ncommand: [../../bin/sh, -c, x]\nactions: [{name: a}]\n", 4, "command[0]", "leaves the module's directory"},
	{"command with a control character", "name: n\nversion: 1.0.0\nkind: native\ncommand: [\"python3\", \"a\\nb\"]\nactions: [{name: a}]\n", 4, "command[1]", "control characters"},
	{"command of a mapping", "name: n\nversion: 1.0.0\nkind: native\ncommand: {run: x}\nactions: [{name: a}]\n", 4, "command", "expected a command like python3 main.py"},
	{"comments only", "# nothing\n", 1, "", "the file is empty"},
	{"unclosed bracket", "name: a\nversion: 1.0.0\ncapabilities:\n  db: [orders\n", 4, "", "YAML syntax"},
	{"bad indentation", "name: a\nversion: 1.0.0\nactions:\n  - name: x\n  timeout: 5s\n", 5, "", "check the indentation"},
	{"tab indentation", "name: a\ncapabilities:\n\tkv: true\n", 3, "", "not allow tabs"},
	{"colon in value", "name: a: b\nversion: 1.0.0\n", 1, "", `quote a value that contains ": "`},
	{"top level list", "- name: a\n", 1, "", "the top level is a list"},
	{"two documents", "name: a\nversion: 1.0.0\n---\nname: b\n", 4, "", "a second YAML document"},
	{"duplicate key", "name: a\nversion: 1.0.0\nname: b\n", 3, "name", "defined twice (first at line 1)"},

	// unknown fields
	{"unknown top-level field", "name: a\nversion: 1.0.0\ncapabilites:\n  kv: true\n", 3, "capabilites", "unknown field; did you mean capabilities?"},
	{"unknown capability", "name: a\nversion: 1.0.0\ncapabilities:\n  kv: true\n  gpu: true\n", 5, "capabilities.gpu", "unknown capability; known capabilities are kv, db, http, media, ai, knowledge, tasks, filesystem"},
	{"capability synonym", "name: a\nversion: 1.0.0\ncapabilities:\n  netwrok: [https://a.com:443]\n", 4, "capabilities.netwrok", "did you mean http?"},
	{"unknown action field", "name: a\nversion: 1.0.0\nactions:\n  - name: greet\n    timout: 5s\n", 5, "actions[0].timout", "did you mean timeout?"},
	{"unknown limit", "name: a\nversion: 1.0.0\nlimits:\n  memroy: 1MiB\n", 4, "limits.memroy", "unknown limit; did you mean memory?"},
	{"unknown http field", "name: a\nversion: 1.0.0\ncapabilities:\n  http: {targets: [], allowany: true}\n", 4, "capabilities.http.allowany", "did you mean allow_any?"},

	// wrong types
	{"bool as string", "name: a\nversion: 1.0.0\ncapabilities:\n  kv: \"yes please\"\n", 4, "capabilities.kv", `"yes please" is not a boolean; write true or false`},
	{"actions as string", "name: a\nversion: 1.0.0\nactions: greet\n", 3, "actions", "expected a list of mappings"},
	{"list as string", "name: a\nversion: 1.0.0\ncapabilities:\n  db: orders\n", 4, "capabilities.db", "write it as [orders]"},
	{"capabilities as list", "name: a\nversion: 1.0.0\ncapabilities: [kv]\n", 3, "capabilities", "expected a mapping"},
	{"http as string", "name: a\nversion: 1.0.0\ncapabilities:\n  http: https://a.com:443\n", 4, "capabilities.http", "write it like http: [https://api.example.com:443]"},
	{"name as mapping", "name: {a: b}\nversion: 1.0.0\n", 1, "name", "expected a string, got a mapping"},
	{"int as word", "name: a\nversion: 1.0.0\nlimits:\n  concurrency: four\n", 4, "limits.concurrency", `"four" is not a whole number`},
	{"config number", "name: a\nversion: 1.0.0\nconfig:\n  port: 8080\n", 4, "config.port", `is a number, but values here are strings; quote it: port: "8080"`},
	{"config bool", "name: a\nversion: 1.0.0\nconfig:\n  debug: true\n", 4, "config.debug", `quote it: debug: "true"`},
	{"config null", "name: a\nversion: 1.0.0\nconfig:\n  empty:\n", 4, "config.empty", `has no value`},
	{"empty list item", "name: a\nversion: 1.0.0\ncapabilities:\n  db:\n    - orders\n    -\n", 6, "capabilities.db[1]", "empty list item"},

	// names and versions
	{"missing name", "version: 1.0.0\n", 1, "name", "required; add a line like name: hello-go"},
	{"bad name", "name: Hello Go\nversion: 1.0.0\n", 1, "name", "not a valid module name"},
	{"name too long", "name: " + strings.Repeat("a", 65) + "\nversion: 1.0.0\n", 1, "name", "1-64 characters"},
	{"missing version", "name: a\n", 1, "version", "required"},
	{"bad semver", "name: a\nversion: 1.2\n", 2, "version", `"1.2" is not a version; write MAJOR.MINOR.PATCH`},
	{"bad semver suffix", "name: a\nversion: v1.2.0\n", 2, "version", "like 1.2.0"},
	{"unknown kind", "name: a\nversion: 1.0.0\nkind: wasi-comand\n", 3, "kind", "did you mean wasi-command?"},
	{"module with directory", "name: a\nversion: 1.0.0\nmodule: ../a.wasm\n", 3, "module", "plain file name"},

	// actions
	{"wasi-command with actions", "name: a\nversion: 1.0.0\nkind: wasi-command\nactions:\n  - name: x\n", 4, "actions", "a wasi-command module has no actions"},
	{"duplicate action", "name: a\nversion: 1.0.0\nactions:\n  - name: greet\n  - name: wipe\n  - name: greet\n", 6, "actions[2].name", `action "greet" is already declared as actions[0]`},
	{"empty action name", "name: a\nversion: 1.0.0\nactions:\n  - name: greet\n  - roles: [admin]\n", 5, "actions[1].name", "an action needs a name"},
	{"invalid action name", "name: a\nversion: 1.0.0\nactions:\n  - name: say hello\n", 4, "actions[0].name", "not a valid action name"},
	{"bad role", "name: a\nversion: 1.0.0\nactions:\n  - name: x\n    roles: [\"power user\"]\n", 5, "actions[0].roles[0]", "not a valid role name"},
	{"bad duration", "name: a\nversion: 1.0.0\nactions:\n  - name: greet\n    timeout: 5 seconds\n", 5, "actions[0].timeout", `"5 seconds" is not a duration; write it like 5s or 500ms`},
	{"duration without unit", "name: a\nversion: 1.0.0\nlimits:\n  timeout: 30\n", 4, "limits.timeout", `"30" has no unit; write it like 30s`},
	{"zero duration", "name: a\nversion: 1.0.0\nactions:\n  - name: greet\n    timeout: 0s\n", 5, "actions[0].timeout", "must be more than 0"},
	{"bad size", "name: a\nversion: 1.0.0\nactions:\n  - name: greet\n    max_input: 64 megs\n", 5, "actions[0].max_input", `has unknown unit "megs"`},
	{"fractional size", "name: a\nversion: 1.0.0\nlimits:\n  memory: 1.5GiB\n", 4, "limits.memory", "like 1536MiB instead of 1.5GiB"},
	{"lower-case unit", "name: a\nversion: 1.0.0\nlimits:\n  memory: 64mb\n", 4, "limits.memory", `unknown unit "mb"`},
	{"memory above 4 GiB", "name: a\nversion: 1.0.0\nlimits:\n  memory: 8GiB\n", 4, "limits.memory", "more than 4 GiB"},
	{"zero limit", "name: a\nversion: 1.0.0\nlimits:\n  concurrency: 0\n", 4, "limits.concurrency", "must be more than 0"},
	{"negative limit", "name: a\nversion: 1.0.0\nlimits:\n  calls_per_minute: -5\n", 4, "limits.calls_per_minute", "must be more than 0"},

	// capabilities
	{"knowledge as a string", "name: a\nversion: 1.0.0\ncapabilities:\n  knowledge: docs\n", 4, "capabilities.knowledge", "expected a list of collections like [docs, faq], or true for every collection"},
	{"knowledge as a mapping", "name: a\nversion: 1.0.0\ncapabilities:\n  knowledge: {docs: true}\n", 4, "capabilities.knowledge", "or true for every collection"},
	{"knowledge collection name", "name: a\nversion: 1.0.0\ncapabilities:\n  knowledge: [docs, Bad-Name]\n", 4, "capabilities.knowledge[1]", `"Bad-Name" is not a collection name`},
	{"knowledge collection twice", "name: a\nversion: 1.0.0\ncapabilities:\n  knowledge: [docs, docs]\n", 4, "capabilities.knowledge[1]", "listed twice"},
	{"http without scheme", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [api.example.com]\n", 4, "capabilities.http[0]", `"api.example.com" is not a target; write it as scheme://host:port, like https://api.example.com:443`},
	{"http ftp", "name: a\nversion: 1.0.0\ncapabilities:\n  http:\n    - https://a.com:443\n    - ftp://files.example.com:21\n", 6, "capabilities.http[1]", "scheme ftp is not allowed; only http and https"},
	{"http no port", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [https://api.example.com]\n", 4, "capabilities.http[0]", "needs a port; write https://api.example.com:443"},
	{"http port range", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [\"http://a.com:70000\"]\n", 4, "capabilities.http[0]", "port 70000 is not in 1-65535"},
	{"http port zero", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [\"http://a.com:0\"]\n", 4, "capabilities.http[0]", "port 0 is not in 1-65535"},
	{"http path climbing", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [https://a.com:443/v1/../admin]\n", 4, "capabilities.http[0]", "dot segment"},
	{"http path encoded dots", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [https://a.com:443/v1/%2e%2e/admin]\n", 4, "capabilities.http[0]", "dot segment"},
	{"http path empty segment", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [https://a.com:443/v1//x]\n", 4, "capabilities.http[0]", "empty segment"},
	{"http query", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [\"https://a.com:443/v1?x=1\"]\n", 4, "capabilities.http[0]", "has a query or fragment"},
	{"http path without port", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [https://a.com/v1/]\n", 4, "capabilities.http[0]", "write https://a.com:443/v1/"},
	{"http headers in a manifest", "name: a\nversion: 1.0.0\ncapabilities:\n  http:\n    - {url: \"https://a.com:443/\", headers: {Authorization: \"Bearer x\"}}\n", 5, "capabilities.http[0].headers", "a manifest asks for URLs only"},
	{"http propagate_trace in a manifest", "name: a\nversion: 1.0.0\ncapabilities:\n  http:\n    - {url: \"https://a.com:443/\", propagate_trace: true}\n", 5, "capabilities.http[0].propagate_trace", "a manifest asks for URLs only"},
	{"http upper case", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [https://API.example.com:443]\n", 4, "capabilities.http[0]", "lower case"},
	{"http star host", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [\"https://*:443\"]\n", 4, "capabilities.http[0]", "allows any server; if that is intended, use the mapping form and say so: http: {targets: [\"https://*:443\"], allow_any: true}"},
	{"http star target in object", "name: a\nversion: 1.0.0\ncapabilities:\n  http:\n    targets: [\"*\"]\n", 5, "capabilities.http.targets[0]", "allow_any: true"},
	{"http bad wildcard", "name: a\nversion: 1.0.0\ncapabilities:\n  http: [\"https://api.*.com:443\"]\n", 4, "capabilities.http[0]", "whole first label"},
	{"db star", "name: a\nversion: 1.0.0\ncapabilities:\n  db: [\"*\"]\n", 4, "capabilities.db[0]", `"*" is only for profiles`},
	{"db listed twice", "name: a\nversion: 1.0.0\ncapabilities:\n  db: [orders, customers, orders]\n", 4, "capabilities.db[2]", `"orders" is listed twice (also at [0])`},
	{"db bad name", "name: a\nversion: 1.0.0\ncapabilities:\n  db: [Orders]\n", 4, "capabilities.db[0]", "not a collection name"},
	{"relative path", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [data/in]\n", 4, "capabilities.filesystem[0]", "absolute, clean path"},
	{"trailing slash", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [/data/in/]\n", 4, "capabilities.filesystem[0]", "like /data/in"},
	{"dot-dot path", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [/data/../etc]\n", 4, "capabilities.filesystem[0]", "like /etc"},
	{"root path", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [/]\n", 4, "capabilities.filesystem[0]", "/ is the whole machine"},
	{"proc", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [/proc/self]\n", 4, "capabilities.filesystem[0]", "/proc/self is under /proc, which no grant may reach"},
	{"sys", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [/sys:rw]\n", 4, "capabilities.filesystem[0]", "/sys is under /sys"},
	{"dev", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [{path: /dev/shm, rw: true}]\n", 4, "capabilities.filesystem[0]", "/dev/shm is under /dev"},
	{"NUL in path", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [\"/data\\0/x\"]\n", 4, "capabilities.filesystem[0]", "NUL byte"},
	{"dot-dot in the rw form", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [/data/..:rw]\n", 4, "capabilities.filesystem[0]", "absolute, clean path"},
	{"path twice, modes differ", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [/data, /data:rw]\n", 4, "capabilities.filesystem[1]", "listed twice (also at [0])"},
	{"nested requests", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [/srv, /srv/data:rw]\n", 4, "capabilities.filesystem[1]", "/srv/data and /srv (filesystem[0]) overlap"},
	{"prefix but not parent is fine, then a nested one", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [/data, /database, /database/x]\n", 4, "capabilities.filesystem[2]", "overlap"},
	{"mapping without path", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [{rw: true}]\n", 4, "capabilities.filesystem[0]", "names no path"},
	{"mapping unknown key", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [{path: /data, mode: rw}]\n", 4, "capabilities.filesystem[0].mode", "mode"},
	{"mapping rw not a bool", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [{path: /data, rw: yes please}]\n", 4, "capabilities.filesystem[0].rw", "not a boolean"},
	{"a list of lists", "name: a\nversion: 1.0.0\ncapabilities:\n  filesystem: [[/data]]\n", 4, "capabilities.filesystem[0]", "expected a path like /srv/data"},
}

func TestParseManifestErrors(t *testing.T) {
	for _, tt := range manifestErrors {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.ParseManifest("moat.yaml", []byte(tt.yaml))
			checkFileError(t, err, "moat.yaml", tt.line, tt.field, tt.msg)
		})
	}
}

// checkFileError asserts err is a *FileError at file:line, for field, whose
// message contains msg, and that Error() renders all of it.
func checkFileError(t *testing.T, err error, file string, line int, field, msg string) {
	t.Helper()
	var fe *policy.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("got %v (%T), want a *FileError", err, err)
	}
	if fe.File != file || fe.Line != line || fe.Field != field {
		t.Errorf("got %s:%d field %q, want %s:%d field %q (%v)", fe.File, fe.Line, fe.Field, file, line, field, err)
	}
	prefix := fmt.Sprintf("%s:%d: ", file, line)
	if field != "" {
		prefix += field + ": "
	}
	if s := err.Error(); !strings.HasPrefix(s, prefix) || !strings.Contains(s, msg) || strings.Contains(s, "\n") {
		t.Errorf("got  %s\nwant prefix %q containing %q on one line", s, prefix, msg)
	}
}

func TestLoadManifest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "moat.yaml")
	if err := os.WriteFile(path, []byte(fullManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, dir} {
		m, err := policy.LoadManifest(p)
		if err != nil || m.Name != "hello-go" || m.File != path {
			t.Errorf("LoadManifest(%s) = %+v, %v", p, m, err)
		}
	}
	if err := os.WriteFile(path, []byte("name: a\nversion: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := policy.LoadManifest(path)
	checkFileError(t, err, path, 2, "version", "is not a version")
	if _, err := policy.LoadManifest(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "reading manifest") {
		t.Errorf("missing file: %v", err)
	}
}

// Manifests come from module authors, so a hostile one must fail fast.
func TestParseManifestHostile(t *testing.T) {
	roles := strings.TrimSuffix(strings.Repeat("a, ", 2000), ", ")
	bomb := "name: a\nversion: 1.0.0\nactions:\n  - &x {name: x, roles: [" + roles + "]}\n" + strings.Repeat("  - *x\n", 2000)
	_, err := policy.ParseManifest("moat.yaml", []byte(bomb))
	if err == nil || !strings.Contains(err.Error(), "YAML aliases (*x) are not supported") {
		t.Errorf("alias bomb: %v", err)
	}
	huge := "name: a\nversion: 1.0.0\nlanguage: " + strings.Repeat("x", policy.MaxFileSize) + "\n"
	_, err = policy.ParseManifest("moat.yaml", []byte(huge))
	checkFileError(t, err, "moat.yaml", 1, "", "the limit is 1048576")

	// Locating a syntax error stays cheap in a long file.
	var long strings.Builder
	long.WriteString("name: a\nversion: 1.0.0\nactions:\n")
	for i := range 3000 {
		fmt.Fprintf(&long, "  - name: a%d\n", i)
	}
	long.WriteString("  - name: [\n")
	_, err = policy.ParseManifest("moat.yaml", []byte(long.String()))
	checkFileError(t, err, "moat.yaml", 3004, "", "YAML syntax")

	_, err = policy.ParseManifest("moat.yaml", []byte("base: &b {kv: true}\nname: a\n"))
	checkFileError(t, err, "moat.yaml", 1, "base", "unknown field")
	_, err = policy.ParseManifest("moat.yaml", []byte("name: a\nversion: 1.0.0\ncapabilities:\n  <<: {kv: true}\n"))
	checkFileError(t, err, "moat.yaml", 4, "capabilities.<<", "merge keys are not supported")
}
