package server

import (
	"maps"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/host"
)

// RoutesConfig is the routes: section of moat-server.yaml: the bounds of
// the modules' HTTP routes (moat.yaml routes:, served under
// /m/{org}/{module}/) that no API key stands behind, and the host names
// the operator gives modules.
type RoutesConfig struct {
	// RouteRate and RouteBurst are the token bucket of each public or
	// webhook route (per organization, module and route, on every
	// replica): requests per second, and how many may come at once.
	// Defaults 50 and 100.
	RouteRate  float64 `yaml:"route_rate"`
	RouteBurst int     `yaml:"route_burst"`
	// AddressRate and AddressBurst are the token bucket of each source
	// address (an IPv6 /64) per module, taken before anything else by a
	// request without an API key: one address flooding a public route
	// is refused while the others are served. Defaults 5 and 20.
	AddressRate  float64 `yaml:"address_rate"`
	AddressBurst int     `yaml:"address_burst"`
	// Hosts gives a module a host name of its own: a request whose Host
	// header is one of these names is served by the module's routes at
	// the root (https://hooks.example.com/x is /m/acme/hooks/x), and by
	// nothing else of the server (no API, no console). Each name is also
	// one the front door answers to (http.allowed_hosts need not list
	// it). name: org/module.
	Hosts map[string]string `yaml:"hosts"`
}

func (r *RoutesConfig) fillDefaults() {
	if r.RouteRate == 0 {
		r.RouteRate = 50
	}
	if r.RouteBurst == 0 {
		r.RouteBurst = 100
	}
	if r.AddressRate == 0 {
		r.AddressRate = 5
	}
	if r.AddressBurst == 0 {
		r.AddressBurst = 20
	}
}

func (r *RoutesConfig) validate(fail failFunc) error {
	for _, f := range []struct {
		name  string
		rate  float64
		burst int
	}{{"route", r.RouteRate, r.RouteBurst}, {"address", r.AddressRate, r.AddressBurst}} {
		if !(f.rate > 0) || f.rate > 1e6 {
			return fail("routes."+f.name+"_rate", "%v: give requests per second, more than 0 and at most 1000000", f.rate)
		}
		if f.burst < 1 || f.burst > 1e6 {
			return fail("routes."+f.name+"_burst", "%d: give 1 to 1000000", f.burst)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Hosts)) {
		target := r.Hosts[name]
		field := "routes.hosts." + name
		n := normalHost(name)
		if n == "" || n != strings.ToLower(name) || strings.ContainsAny(name, ":/*") {
			return fail(field, "%q is not a host name; write the bare name, like hooks.example.com (no scheme, port or wildcard)", name)
		}
		org, mod, ok := strings.Cut(target, "/")
		if !ok || host.ValidateModuleName(mod) != nil || org == "" || strings.ContainsAny(org, "/ ") {
			return fail(field, "%q: write the organization and the module, like acme/hooks", target)
		}
	}
	return nil
}

// moduleHost returns the organization and module whose host name
// hostport is (routes.hosts), if any.
func (r *RoutesConfig) moduleHost(hostport string) (org, module string, ok bool) {
	if len(r.Hosts) == 0 {
		return "", "", false
	}
	t, ok := r.Hosts[normalHost(hostport)]
	if !ok {
		return "", "", false
	}
	org, module, _ = strings.Cut(t, "/")
	return org, module, true
}
