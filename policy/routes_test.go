package policy_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
)

const routeBase = "name: a\nversion: 1.0.0\nactions:\n  - name: get\n  - name: put\n  - name: hook\n    roles: [webhook]\n  - name: wipe\n    confirm: true\n  - name: admin-only\n    roles: [admin]\n"

func TestParseManifestRoutes(t *testing.T) {
	m, err := policy.ParseManifest("moat.yaml", []byte(routeBase+`routes:
  - {route: "GET /items/{id}", action: get}
  - {route: "PUT /items/{id}", action: put, max_body: 4KiB}
  - {route: "GET /items", action: get, auth: public}
  - {route: "GET /", action: get, auth: public}
  - route: POST /hooks/github
    action: hook
    auth: webhook
    webhook: {scheme: github, secret: github-hook, tolerance: 10m}
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path, route string
		params              map[string]string
		allowed             []string
	}{
		{"GET", "/items/42", "GET /items/{id}", map[string]string{"id": "42"}, nil},
		{"PUT", "/items/a%2Fb", "PUT /items/{id}", map[string]string{"id": "a/b"}, nil},
		{"GET", "/items", "GET /items", nil, nil},
		{"GET", "/", "GET /", nil, nil},
		{"POST", "/hooks/github", "POST /hooks/github", nil, nil},
		{"DELETE", "/items/42", "", nil, []string{"GET", "PUT"}},
		{"GET", "/items/42/more", "", nil, nil},
		{"GET", "/items/", "", nil, nil},
		{"GET", "/items/..", "", nil, nil},
		{"GET", "/items/%2e%2e", "", nil, nil},
		{"GET", "/items/%zz", "", nil, nil},
		{"GET", "items", "", nil, nil},
	}
	for _, tt := range tests {
		r, params, allowed := m.MatchRoute(tt.method, tt.path)
		got := ""
		if r != nil {
			got = r.Route
		}
		if got != tt.route || len(params) != len(tt.params) || !slices.Equal(allowed, tt.allowed) {
			t.Errorf("MatchRoute(%s %s) = %q %v %v; want %q %v %v", tt.method, tt.path, got, params, allowed, tt.route, tt.params, tt.allowed)
			continue
		}
		for k, v := range tt.params {
			if params[k] != v {
				t.Errorf("MatchRoute(%s %s) params = %v; want %v", tt.method, tt.path, params, tt.params)
			}
		}
	}
	hook := m.Routes[4]
	if hook.AuthMode() != policy.RouteWebhook || hook.Webhook.ToleranceOrDefault() != 10*time.Minute || hook.BodyLimit() != 1<<20 {
		t.Errorf("hook route = %+v", hook)
	}
	if m.Routes[1].BodyLimit() != 4096 || m.Routes[0].AuthMode() != policy.RouteKey || m.Routes[0].Pattern() != "/items/{id}" {
		t.Errorf("routes = %+v", m.Routes)
	}
	if p := policy.RoutePrincipal("acme", policy.RoutePublic); p.Validate() != nil || p.User != policy.ServiceUser || !p.HasRole(policy.PublicRole) || p.HasRole(policy.ServiceRole) {
		t.Errorf("RoutePrincipal(public) = %+v", p)
	}
}

func TestParseManifestRouteErrors(t *testing.T) {
	hook := "auth: webhook, webhook: {scheme: github, secret: gh}"
	tests := []struct {
		name, yaml, field, msg string
	}{
		{"no route", `routes: [{action: get}]`, "routes[0].route", "needs a method and a path"},
		{"lower-case method", `routes: [{route: "get /x", action: get}]`, "routes[0].route", "not a method"},
		{"made-up method", `routes: [{route: "BREW /x", action: get}]`, "routes[0].route", "GET, POST, PUT, PATCH, DELETE"},
		{"no slash", `routes: [{route: "GET x", action: get}]`, "routes[0].route", "must start with /"},
		{"two spaces", `routes: [{route: "GET  /x", action: get}]`, "routes[0].route", "one space"},
		{"trailing slash", `routes: [{route: "GET /x/", action: get}]`, "routes[0].route", "doubled or trailing"},
		{"dot dot", `routes: [{route: "GET /x/../y", action: get}]`, "routes[0].route", `".."`},
		{"bad param", `routes: [{route: "GET /x/{Id}", action: get}]`, "routes[0].route", "parameter like {id}"},
		{"param twice", `routes: [{route: "GET /{id}/{id}", action: get}]`, "routes[0].route", "appears twice"},
		{"duplicate", "routes:\n  - {route: \"GET /x/{a}\", action: get}\n  - {route: \"GET /x/{b}\", action: put}", "routes[1].route", "duplicates routes[0]"},
		{"ambiguous", "routes:\n  - {route: \"GET /x/{a}\", action: get}\n  - {route: \"GET /x/new\", action: put}", "routes[1].route", "ambiguous with routes[0]"},
		{"unknown action", `routes: [{route: "GET /x", action: gte}]`, "routes[0].action", "did you mean get?"},
		{"confirm action", `routes: [{route: "GET /x", action: wipe}]`, "routes[0].action", "needs confirmation"},
		{"public to admin action", `routes: [{route: "GET /x", action: admin-only, auth: public}]`, "routes[0].action", "role public"},
		{"bad auth", `routes: [{route: "GET /x", action: get, auth: pubic}]`, "routes[0].auth", "did you mean public?"},
		{"webhook without secret", `routes: [{route: "POST /h", action: hook, auth: webhook, webhook: {scheme: github}}]`, "routes[0].webhook.secret", "moat secrets set"},
		{"webhook without webhook", `routes: [{route: "POST /h", action: hook, auth: webhook}]`, "routes[0].webhook", "scheme and secret"},
		{"webhook by GET", `routes: [{route: "GET /h", action: hook, ` + hook + `}]`, "routes[0].route", "POST"},
		{"bad scheme", `routes: [{route: "POST /h", action: hook, auth: webhook, webhook: {scheme: stripes, secret: s}}]`, "routes[0].webhook.scheme", "did you mean stripe?"},
		{"bad secret name", `routes: [{route: "POST /h", action: hook, auth: webhook, webhook: {scheme: github, secret: "a b"}}]`, "routes[0].webhook.secret", "secret name"},
		{"zero tolerance", `routes: [{route: "POST /h", action: hook, auth: webhook, webhook: {scheme: stripe, secret: s, tolerance: 0s}}]`, "routes[0].webhook.tolerance", "more than 0"},
		{"huge tolerance", `routes: [{route: "POST /h", action: hook, auth: webhook, webhook: {scheme: stripe, secret: s, tolerance: 48h}}]`, "routes[0].webhook.tolerance", "at most 24h"},
		{"webhook on a key route", `routes: [{route: "POST /h", action: hook, webhook: {scheme: github, secret: gh}}]`, "routes[0].webhook", "only a route with auth: webhook"},
		{"huge body", `routes: [{route: "POST /h", action: put, max_body: 1GiB}]`, "routes[0].max_body", "give 1B to 16MiB"},
		{"unknown field", `routes: [{route: "GET /x", action: get, public: true}]`, "routes[0].public", "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.ParseManifest("moat.yaml", []byte(routeBase+tt.yaml+"\n"))
			if err == nil || !strings.Contains(err.Error(), tt.field+": ") || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v; want an error at %s saying %q", err, tt.field, tt.msg)
			}
		})
	}
}

func TestReportRoutes(t *testing.T) {
	p := profile(t, "refuse")
	m := manifest(t, "plain", "actions:\n  - name: get\n  - name: hook\nroutes:\n  - {route: \"GET /items/{id}\", action: get}\n  - {route: \"GET /status\", action: get, auth: public}\n  - {route: \"POST /hooks/gh\", action: hook, auth: webhook, webhook: {scheme: github, secret: gh}}\n")
	r := p.Evaluate(m, "").Report(m, p)
	for _, w := range []string{
		"routes             action  caller\n",
		"  GET /items/{id}  get     an API key (the key's principal)\n",
		"  GET /status      get     anyone (public; runs as moat.service with the role public)\n",
		"  POST /hooks/gh   hook    a github webhook signed with the secret gh (runs as moat.service with the role webhook)\n",
	} {
		if !strings.Contains(r, w) {
			t.Errorf("report lacks %q:\n%s", w, r)
		}
	}
}
