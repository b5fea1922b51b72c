package policy_test

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/moat-sandbox/moat/policy"
)

// The extension point of the capability table, proved from outside the
// package the way an op family uses it: one capability of each shape is
// registered here, in a test file only, with an op declared on each, and
// nothing in policy names them. Every other test of the package runs with
// these rows in the table too.
func init() {
	for _, s := range []policy.CapabilitySpec{
		{Name: "email", Shape: policy.Flag},
		{Name: "crm", Shape: policy.Named, Target: "contact list"},
		{Name: "webhooks", Shape: policy.Targets},
		{Name: "scratch", Shape: policy.Paths},
	} {
		if err := policy.RegisterCapability(s); err != nil {
			panic(err)
		}
	}
	for op, c := range map[string]string{"email.send": "email", "crm.read": "crm", "webhook.post": "webhooks", "scratch.write": "scratch"} {
		if err := policy.DeclareOp(op, c); err != nil {
			panic(err)
		}
	}
}

const extManifest = `name: mailer
version: 1.0.0
capabilities:
  email: true
  crm: [contacts]
  webhooks: [https://hooks.example.com:443/in/]
  scratch: [/srv/scratch:rw]
`

const extProfile = `name: ext
default:
  capabilities:
    email: true
    crm: ["*"]
    webhooks: [https://hooks.example.com:443]
    scratch: [/srv:rw]
`

// extCall is one call of each op, on a target the grant covers.
var extCalls = []struct{ op, target, what, ask string }{
	{"email.send", "", "email", "email: true"},
	{"crm.read", "contacts", "crm contacts", "crm: [contacts]"},
	{"webhook.post", "https://hooks.example.com/in/a", "webhooks https://hooks.example.com:443", "webhooks: [https://hooks.example.com:443]"},
	{"scratch.write", "/srv/scratch/tmp", "scratch /srv/scratch/tmp", "scratch: [/srv/scratch/tmp]"},
}

func parseExt(t *testing.T, manifest, profile string) (*policy.Manifest, *policy.Profile) {
	t.Helper()
	m, err := policy.ParseManifest("moat.yaml", []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.ParseProfile("ext.yaml", []byte(profile))
	if err != nil {
		t.Fatal(err)
	}
	return m, p
}

func TestRegisteredCapabilityGranted(t *testing.T) {
	m, p := parseExt(t, extManifest, extProfile)
	e := p.Evaluate(m, "")
	if len(e.Refusals) > 0 || e.Refused {
		t.Fatalf("refusals: %v", e.Refusals)
	}
	if e.Effective.Get("email") != true || len(e.Effective.Get("crm").([]string)) != 1 {
		t.Errorf("effective: %+v", e.Effective.Extra)
	}
	for _, c := range extCalls {
		if err := e.CheckOp(c.op, c.target); err != nil {
			t.Errorf("CheckOp(%s, %q): %v", c.op, c.target, err)
		}
	}
	// A target outside the request is the manifest's to ask for.
	err := e.CheckOp("crm.read", "leads")
	if err == nil || !strings.Contains(err.Error(), "crm leads is not among the capabilities the module requests; add crm: [leads] under capabilities in moat.yaml") {
		t.Errorf("crm.read leads: %v", err)
	}
	r := e.Report(m, p)
	for _, w := range []string{"  email  ", "  crm contacts  ", "  webhooks https://hooks.example.com:443/in/  ", "  scratch /srv/scratch:rw  ", "✓ granted read-write", "verdict: LOADS\n"} {
		if !strings.Contains(r, w) {
			t.Errorf("report lacks %q:\n%s", w, r)
		}
	}
	if strings.Contains(r, "(none requested)") || strings.Contains(r, "refused") {
		t.Errorf("report:\n%s", r)
	}
}

// Without the grant, each call is denied as not granted, never as not
// requested: the review's experiment got "email is not among the
// capabilities the module requests" for a module that requested it.
func TestRegisteredCapabilityDenied(t *testing.T) {
	m, p := parseExt(t, extManifest, "name: ext\non_ungranted: deny_at_call\ndefault: {capabilities: {kv: true}}\n")
	e := p.Evaluate(m, "")
	if len(e.Refusals) != 4 || e.Refused {
		t.Fatalf("refusals: %v (refused %v)", e.Refusals, e.Refused)
	}
	for _, c := range extCalls {
		err := e.CheckOp(c.op, c.target)
		var d *policy.DeniedError
		if !errors.As(err, &d) {
			t.Fatalf("CheckOp(%s): %v", c.op, err)
		}
		if strings.Contains(d.Reason, "not among the capabilities the module requests") ||
			!strings.HasPrefix(d.Reason, c.what+" was requested but not granted: ") || d.Rule != "profile ext: default grant" {
			t.Errorf("CheckOp(%s): rule %q, reason %q", c.op, d.Rule, d.Reason)
		}
	}
	r := e.Report(m, p)
	for _, w := range []string{"email  ✗ refused (profile ext: default grant): the profile does not grant email", "crm contacts  ✗ refused (profile ext: default grant): contact list contacts is not granted (granted: none)"} {
		if !strings.Contains(strings.Join(strings.Fields(r), " "), strings.Join(strings.Fields(w), " ")) {
			t.Errorf("report lacks %q:\n%s", w, r)
		}
	}

	// A manifest that does not ask is told what to write.
	m, _ = parseExt(t, "name: mailer\nversion: 1.0.0\n", extProfile)
	e = p.Evaluate(m, "")
	for _, c := range extCalls {
		err := e.CheckOp(c.op, c.target)
		if err == nil || !strings.Contains(err.Error(), c.what+" is not among the capabilities the module requests; add "+c.ask+" under capabilities in moat.yaml") {
			t.Errorf("CheckOp(%s): %v", c.op, err)
		}
	}
}

// The YAML of a registered capability is its shape's, checked as strictly
// as a built-in one's, and it round-trips.
func TestRegisteredCapabilityYAML(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{"capabilities: {email: yes}\n", `capabilities.email: "yes" is not a boolean`},
		{"capabilities: {crm: contacts}\n", "capabilities.crm: expected a list"},
		{"capabilities: {crm: [\"*\"]}\n", `capabilities.crm[0]: a module names the contact lists it uses; "*" is only for profiles`},
		{"capabilities: {webhooks: [\"*\"]}\n", "allow_any: true"},
		{"capabilities: {scratch: [/srv, /srv/a]}\n", "capabilities.scratch[1]: /srv/a and /srv (scratch[0]) overlap"},
		{"capabilities: {emial: true}\n", "unknown capability; did you mean email? Known capabilities are kv, db, http, media, ai, knowledge, tasks, filesystem, email, crm, webhooks, scratch"},
	} {
		_, err := policy.ParseManifest("moat.yaml", []byte("name: a\nversion: 1.0.0\n"+tt.body))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.body, err, tt.want)
		}
	}
	m, _ := parseExt(t, extManifest, extProfile)
	out, err := yaml.Marshal(m.Capabilities)
	if err != nil {
		t.Fatal(err)
	}
	want := "email: true\ncrm:\n    - contacts\nwebhooks:\n    - https://hooks.example.com:443/in/\nscratch:\n    - /srv/scratch:rw\n"
	if string(out) != want {
		t.Errorf("marshal:\n%s\nwant:\n%s", out, want)
	}
	var back policy.Capabilities
	if err := yaml.Unmarshal(out, &back); err != nil || back.Get("scratch").([]policy.FileGrant)[0] != (policy.FileGrant{Path: "/srv/scratch", RW: true}) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if got := policy.CapabilityTarget("crm"); got != "contact list" {
		t.Errorf("CapabilityTarget(crm) = %q", got)
	}
	if err := policy.RegisterCapability(policy.CapabilitySpec{Name: "email", Shape: policy.Flag}); err == nil {
		t.Error("registered email twice")
	}
	if err := policy.RegisterCapability(policy.CapabilitySpec{Name: "Bad Name", Shape: policy.Flag}); err == nil {
		t.Error("registered a bad name")
	}
	var c policy.Capabilities
	if err := c.Set("email", "yes"); err == nil {
		t.Error("Set email to a string")
	}
	if err := c.Set("email", true); err != nil || c.IsZero() {
		t.Errorf("Set email: %v, IsZero %v", err, c.IsZero())
	}
}
