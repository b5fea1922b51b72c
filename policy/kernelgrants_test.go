package policy_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/egress"
)

func parseProfile(t *testing.T, body string) *policy.Profile {
	t.Helper()
	p, err := policy.ParseProfile("p.yaml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func builtin(t *testing.T, name string) *policy.Profile {
	t.Helper()
	p, err := policy.LoadProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSpecialAddressOneDecision: an http target whose host is a special
// address (loopback, private, metadata, ...) gets one answer from the
// three places that decide it: Evaluate (what moat policy check prints),
// CheckOp (the op) and the egress guard built from AddressTargets (the
// connection). A grant that covers such a target without naming it is a
// refusal policy check shows, with the fix; the dev profile's
// manifest_addresses lets a manifest name a loopback or private address,
// never a link-local, metadata or other special one. No denial suggests
// the grant that is already written.
func TestSpecialAddressOneDecision(t *testing.T) {
	wild := parseProfile(t, "name: wild\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: {targets: [\"*\"], allow_any: true}\n")
	wildOpen := parseProfile(t, "name: wildopen\non_ungranted: deny_at_call\nmanifest_addresses: true\ndefault:\n  capabilities:\n    http: {targets: [\"*\"], allow_any: true}\n")
	ports := parseProfile(t, "name: ports\non_ungranted: deny_at_call\nmanifest_addresses: true\ndefault:\n  capabilities:\n    http: {targets: [\"http://*:8080\"], allow_any: true}\n")
	named := parseProfile(t, "name: named\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: [\"http://127.0.0.1:8080\", \"http://10.0.0.5:*\"]\n")
	dev, minimal := builtin(t, "dev"), builtin(t, "minimal")
	for _, tc := range []struct {
		name    string
		p       *policy.Profile
		target  string // what the manifest asks for
		url     string // what the plugin fetches
		addr    string // where the connection goes ("" for a public name)
		granted bool
		reason  string // the refusal's reason holds this
		not     string // and not this
	}{
		{"dev: loopback named", dev, "http://127.0.0.1:8080", "http://127.0.0.1:8080/x", "127.0.0.1:8080", true, "", ""},
		{"dev: loopback v6 named", dev, "http://[::1]:8080", "http://[::1]:8080/", "[::1]:8080", true, "", ""},
		{"dev: private named", dev, "http://10.0.0.5:80", "http://10.0.0.5/", "10.0.0.5:80", true, "", ""},
		{"dev: unique-local named", dev, "http://[fd12::1]:80", "http://[fd12::1]/", "[fd12::1]:80", true, "", ""},
		{"dev: loopback any port", dev, "http://127.0.0.1:*", "http://127.0.0.1:9999/", "127.0.0.1:9999", true, "", ""},
		{"dev: metadata named", dev, "http://169.254.169.254:80", "http://169.254.169.254/", "169.254.169.254:80", false, "link-local (cloud metadata) address", ""},
		{"dev: v6 metadata named", dev, "http://[fd00:ec2::254]:80", "http://[fd00:ec2::254]/", "[fd00:ec2::254]:80", false, "unique-local (cloud metadata) address", ""},
		{"dev: link-local named", dev, "http://169.254.1.1:80", "http://169.254.1.1/", "169.254.1.1:80", false, "link-local", ""},
		{"dev: CGNAT named", dev, "http://100.64.0.1:80", "http://100.64.0.1/", "100.64.0.1:80", false, "shared (CGNAT)", ""},
		{"dev: unspecified named", dev, "http://0.0.0.0:8080", "http://0.0.0.0:8080/", "0.0.0.0:8080", false, "unspecified", ""},
		{"dev: a wildcard reaches no loopback", dev, "http://*:8080", "http://127.0.0.1:8080/", "127.0.0.1:8080", false, "no granted target names it", ""},
		{"dev: localhost named", dev, "http://localhost:8080", "http://localhost:8080/", "127.0.0.1:8080", true, "", ""},
		{"dev: localhost v6", dev, "http://localhost:8080", "http://localhost:8080/", "[::1]:8080", true, "", ""},
		{"wild: localhost", wild, "http://localhost:8080", "http://localhost:8080/", "127.0.0.1:8080", false, "write the address, http://127.0.0.1:8080, in moat.yaml", ""},
		{"dev: public address", dev, "http://8.8.8.8:80", "http://8.8.8.8/", "8.8.8.8:80", true, "", ""},
		{"wild: loopback named by the manifest only", wild, "http://127.0.0.1:8080", "http://127.0.0.1:8080/", "127.0.0.1:8080", false, "set manifest_addresses: true", ""},
		{"wild: private named by the manifest only", wild, "http://192.168.1.2:80", "http://192.168.1.2/", "192.168.1.2:80", false, "grant http://192.168.1.2:80 in the profile", ""},
		{"wild: metadata, no manifest_addresses fix", wild, "http://169.254.169.254:80", "http://169.254.169.254/", "169.254.169.254:80", false, "grant http://169.254.169.254:80 in the profile", "manifest_addresses"},
		{"wildopen: loopback", wildOpen, "http://127.0.0.1:8080", "http://127.0.0.1:8080/", "127.0.0.1:8080", true, "", ""},
		{"ports: a port wildcard and manifest_addresses", ports, "http://127.0.0.1:8080", "http://127.0.0.1:8080/", "127.0.0.1:8080", true, "", ""},
		{"ports: another port", ports, "http://127.0.0.1:9090", "http://127.0.0.1:9090/", "127.0.0.1:9090", false, "no granted target covers it", ""},
		{"named: the grant names it", named, "http://127.0.0.1:8080", "http://127.0.0.1:8080/", "127.0.0.1:8080", true, "", ""},
		{"named: any port of a named address", named, "http://10.0.0.5:8443", "http://10.0.0.5:8443/", "10.0.0.5:8443", true, "", ""},
		{"named: another loopback port", named, "http://127.0.0.1:8081", "http://127.0.0.1:8081/", "127.0.0.1:8081", false, "no granted target covers it (granted: http://127.0.0.1:8080, http://10.0.0.5:*)", ""},
		{"minimal: loopback", minimal, "http://127.0.0.1:8080", "http://127.0.0.1:8080/", "127.0.0.1:8080", false, "no granted target covers it (granted: none)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := manifest(t, "fetcher", "actions: [{name: get}]\ncapabilities:\n  http: {targets: [\""+tc.target+"\"], allow_any: true}\n")
			e := tc.p.Evaluate(m, "")
			report := strings.Join(strings.Fields(e.Report(m, tc.p)), " ")
			// A wildcard target is granted for what it may reach, and
			// its row says a special address is not among that.
			row := "http " + tc.target + " ✓ granted"
			if wildcard := strings.Contains(tc.target, "*:"); wildcard {
				row += "; " + policy.WildcardAddressNote
				if !strings.Contains(report, row) {
					t.Errorf("policy check does not show %q:\n%s", row, report)
				}
			} else if got := strings.Contains(report, row); got != tc.granted {
				t.Errorf("policy check shows %q: %v, want %v\n%s", row, got, tc.granted, report)
			}
			opErr := e.CheckOp("http.fetch", tc.url)
			connErr := egress.NewGuard(e.AddressTargets()).Check(netip.MustParseAddrPort(tc.addr))
			if tc.granted {
				if opErr != nil || connErr != nil {
					t.Errorf("policy check says granted; the op says %v, the connection %v", opErr, connErr)
				}
				return
			}
			// Denied by the op, or (a wildcard, whose target names no
			// address) by the connection, with the reason.
			denial := opErr
			if denial == nil {
				denial = connErr
			}
			if denial == nil {
				t.Fatalf("policy check says refused; the op and the connection are allowed")
			}
			if !strings.Contains(denial.Error(), tc.reason) {
				t.Errorf("denial %q does not say %q", denial, tc.reason)
			}
			if tc.not != "" && strings.Contains(denial.Error(), tc.not) {
				t.Errorf("denial %q says %q", denial, tc.not)
			}
			if opErr != nil && !strings.Contains(report, tc.reason) {
				t.Errorf("policy check does not give the op's reason %q:\n%s", tc.reason, report)
			}
			// A denial suggests only a grant that is not written.
			if strings.Contains(denial.Error(), "a grant of "+tc.target+" would") {
				t.Errorf("the denial suggests the grant the manifest writes: %v", denial)
			}
		})
	}
}

// TestKernelGrants: the kernel layer a host confines itself to is derived
// from the module's effective grants: the ports of the targets policy
// grants (not those it refuses), every port for a target that has no one
// port, the directories granted as they are granted (read-only where
// either side says so), the trusted grants too (the signature is checked
// after the host confines itself), and nothing for a module granted
// nothing.
func TestKernelGrants(t *testing.T) {
	signed := parseProfile(t, `name: signed
on_ungranted: deny_at_call
trusted_keys:
  - {name: acme, key: `+acmeKey+`}
default:
  capabilities:
    http: ["http://127.0.0.1:8080", "https://api.example.com:443"]
    filesystem: [/srv/ro, /srv/rw:rw]
  trusted:
    capabilities:
      http: ["https://signed.example.com:8443"]
`)
	dev, minimal := builtin(t, "dev"), builtin(t, "minimal")
	for _, tc := range []struct {
		name string
		p    *policy.Profile
		mf   string
		want policy.KernelGrants
	}{
		{"dev: the loopback port the manifest names", dev, `http: ["http://127.0.0.1:8080"]`, policy.KernelGrants{ConnectTCP: []uint16{8080}}},
		{"dev: a wildcard target", dev, `http: {targets: ["*"], allow_any: true}`, policy.KernelGrants{ConnectAnyTCP: true}},
		{"dev: any port", dev, `http: ["http://127.0.0.1:*"]`, policy.KernelGrants{ConnectAnyTCP: true}},
		{"dev: no files granted", dev, `filesystem: [/srv/ro]`, policy.KernelGrants{}},
		{"minimal: nothing", minimal, `http: ["http://127.0.0.1:8080"]`, policy.KernelGrants{}},
		{"signed: refused targets stay closed", signed, `http: ["http://127.0.0.1:8080", "http://127.0.0.1:9090", "https://api.example.com:443"]`,
			policy.KernelGrants{ConnectTCP: []uint16{443, 8080}}},
		{"signed: a trusted-only target", signed, `http: ["https://signed.example.com:8443"]`, policy.KernelGrants{ConnectTCP: []uint16{8443}}},
		{"signed: files as granted", signed, `filesystem: [/srv/ro/sub:rw, /srv/rw/out:rw, /srv/rw/in, /etc]`,
			policy.KernelGrants{Read: []string{"/srv/ro/sub", "/srv/rw/in"}, Write: []string{"/srv/rw/out"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := manifest(t, "m", "actions: [{name: get}]\ncapabilities:\n  "+tc.mf+"\n")
			if got := tc.p.KernelGrants(m); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("KernelGrants = %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := minimal.KernelGrants(nil); !reflect.DeepEqual(got, policy.KernelGrants{}) {
		t.Errorf("no manifest: %+v", got)
	}
	// A server loads modules later: every grant of every profile.
	got := policy.HostKernelGrants(signed, minimal)
	want := policy.KernelGrants{ConnectTCP: []uint16{443, 8080, 8443}, Read: []string{"/srv/ro"}, Write: []string{"/srv/rw"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("HostKernelGrants = %+v, want %+v", got, want)
	}
	if got := policy.HostKernelGrants(dev); !got.ConnectAnyTCP {
		t.Errorf("dev's host layer: %+v, want every port", got)
	}
}
