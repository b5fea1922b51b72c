package policy_test

import (
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

func TestTargetPorts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		targets []string
		ports   []uint16
		anyPort bool
	}{
		{"none", nil, nil, false},
		{"explicit ports, deduplicated and sorted", []string{"https://a.example:8443", "http://b.example:80", "https://c.example:8443"}, []uint16{80, 8443}, false},
		{"wildcard host keeps its port", []string{"https://*.example.com:443"}, []uint16{443}, false},
		{"any target", []string{"*"}, nil, true},
		{"any port", []string{"https://api.example.com:*", "http://x.example:81"}, []uint16{81}, true},
		{"unparsable targets grant nothing", []string{"ftp://x:21", "api.example.com"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ports, anyPort := policy.TargetPorts(tc.targets)
			if !slices.Equal(ports, tc.ports) || anyPort != tc.anyPort {
				t.Errorf("TargetPorts(%q) = %v, %v; want %v, %v", tc.targets, ports, anyPort, tc.ports, tc.anyPort)
			}
		})
	}
}

func TestProfileHTTPTargets(t *testing.T) {
	p := &policy.Profile{
		Default: &policy.Grant{Capabilities: policy.Capabilities{HTTP: policy.HTTPCaps{Targets: []string{"https://a.example:443"}}},
			Trusted: &policy.Grant{Capabilities: policy.Capabilities{HTTP: policy.HTTPCaps{Targets: []string{"https://t.example:8443"}}}}},
		Modules: map[string]policy.Grant{"m": {Capabilities: policy.Capabilities{HTTP: policy.HTTPCaps{Targets: []string{"http://m.example:8080"}}}}},
		Keys:    map[string]policy.Grant{"k": {Capabilities: policy.Capabilities{HTTP: policy.HTTPCaps{Targets: []string{"http://k.example:81"}}}}},
	}
	got := p.HTTPTargets()
	slices.Sort(got)
	want := []string{"http://k.example:81", "http://m.example:8080", "https://a.example:443", "https://t.example:8443"}
	if !slices.Equal(got, want) {
		t.Errorf("HTTPTargets() = %q, want %q", got, want)
	}
	for _, name := range policy.BuiltinProfiles() {
		p, err := policy.LoadProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		_, anyPort := policy.TargetPorts(p.HTTPTargets())
		if want := name == "dev"; anyPort != want {
			t.Errorf("profile %s: any port = %v, want %v (dev grants every server, minimal none)", name, anyPort, want)
		}
	}
}
