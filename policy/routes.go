package policy

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// Route binds an HTTP method and path under /m/{org}/{module} to one of
// the module's actions, and says who may call it (Auth). The action gets
// the request as an abi.RouteRequest and may answer with an
// abi.RouteResponse.
//
//	routes:
//	  - {route: "GET /items/{id}", action: get_item}               # auth: key
//	  - {route: "GET /status", action: status, auth: public}
//	  - route: POST /hooks/github
//	    action: on_push
//	    auth: webhook
//	    webhook: {scheme: github, secret: github-hook, tolerance: 5m}
type Route struct {
	Route   string    `yaml:"route"` // METHOD /path/{param}
	Action  string    `yaml:"action"`
	Auth    RouteAuth `yaml:"auth,omitempty"` // default RouteKey
	Webhook *Webhook  `yaml:"webhook,omitempty"`
	// MaxBody bounds the request body the action receives (default
	// abi.DefaultRouteBodyBytes, at most abi.MaxRouteBodyBytes); the
	// server refuses a longer one before the action runs.
	MaxBody ByteSize `yaml:"max_body,omitempty"`

	method   string
	segments []string // literal segments, or "{name}"
}

// RouteAuth says who may call a route.
type RouteAuth string

const (
	// RouteKey: an API key, whose principal the action runs as, as for
	// POST /v1/modules/M/actions/A.
	RouteKey RouteAuth = "key"
	// RoutePublic: anyone. No principal: the action runs as the
	// organization's service user with the role public (RoutePrincipal),
	// which holds what the profile's role_permissions give public; each
	// call is rate-limited per route and per source address.
	RoutePublic RouteAuth = "public"
	// RouteWebhook: a sender that signs the request with a secret it
	// shares with the organization (Webhook); the action runs as the
	// service user with the role webhook.
	RouteWebhook RouteAuth = "webhook"
)

var routeAuths = []string{string(RouteKey), string(RoutePublic), string(RouteWebhook)}

// Webhook is how a webhook route's signature is checked.
type Webhook struct {
	// Scheme is the sender's signature scheme: WebhookGitHub,
	// WebhookStripe or WebhookStandard.
	Scheme string `yaml:"scheme"`
	// Secret names the organization's secret (moat secrets set, or PUT
	// /v1/admin/secrets) the sender signs with. The module never reads
	// it.
	Secret string `yaml:"secret"`
	// Tolerance is how far a signed timestamp may be from the server's
	// clock (stripe, standard), and how long a delivery is remembered to
	// refuse its replay (every scheme). Default DefaultWebhookTolerance.
	Tolerance Duration `yaml:"tolerance,omitempty"`
}

// The webhook signature schemes.
const (
	// WebhookGitHub: X-Hub-Signature-256: sha256=HEX, the HMAC-SHA256 of
	// the body. It has no timestamp: a replay is refused only while the
	// delivery is remembered (Tolerance).
	WebhookGitHub = "github"
	// WebhookStripe: Stripe-Signature: t=UNIX,v1=HEX, the HMAC-SHA256 of
	// "t.body".
	WebhookStripe = "stripe"
	// WebhookStandard: Standard Webhooks (webhook-id, webhook-timestamp,
	// webhook-signature: v1,BASE64), the HMAC-SHA256 of "id.timestamp.body"
	// under the secret (whsec_BASE64, or its bytes as they are).
	WebhookStandard = "standard"
)

var webhookSchemes = []string{WebhookGitHub, WebhookStripe, WebhookStandard}

// Webhook tolerance: its default and bounds.
const (
	DefaultWebhookTolerance = 5 * time.Minute
	MaxWebhookTolerance     = 24 * time.Hour
)

// MaxRoutes bounds the routes of one manifest.
const MaxRoutes = 64

// Route path bounds.
const (
	maxRouteSegments = 16
	maxRoutePathLen  = 256
)

// The roles of RoutePrincipal.
const (
	PublicRole  = "public"
	WebhookRole = "webhook"
)

var (
	routeMethods    = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}
	routeLiteralRE  = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,64}$`)
	routeParamRE    = regexp.MustCompile(`^\{([a-z_][a-z0-9_]{0,31})\}$`)
	routeSegmentMsg = "a segment is letters, digits and . _ ~ - (1-64 of them), or a parameter like {id}"
)

// RoutePrincipal is who a public or webhook route's action runs as in
// org: the service user (ServiceUser) holding the role public or webhook,
// so that the profile's role_permissions decide what such a caller may do
// and an action's roles say whether it may be reached that way. A key
// route runs as the key's principal, not this.
func RoutePrincipal(org string, auth RouteAuth) Principal {
	role := PublicRole
	if auth == RouteWebhook {
		role = WebhookRole
	}
	return Principal{User: ServiceUser, Org: org, Roles: []string{role}}
}

// Method is the route's HTTP method.
func (r *Route) Method() string { r.parse(); return r.method }

// Pattern is the route's path pattern, like /items/{id}.
func (r *Route) Pattern() string { r.parse(); return "/" + strings.Join(r.segments, "/") }

// AuthMode is the route's auth, RouteKey when unset.
func (r *Route) AuthMode() RouteAuth {
	if r.Auth == "" {
		return RouteKey
	}
	return r.Auth
}

// BodyLimit is the most bytes the route's request body may be.
func (r *Route) BodyLimit() int64 {
	if r.MaxBody == 0 {
		return abi.DefaultRouteBodyBytes
	}
	return int64(r.MaxBody)
}

// ToleranceOrDefault is the webhook's tolerance, or its default.
func (w *Webhook) ToleranceOrDefault() time.Duration {
	if w.Tolerance <= 0 {
		return DefaultWebhookTolerance
	}
	return w.Tolerance.Std()
}

// parse splits a route built by hand (ParseManifest parses each when it
// checks it); an invalid one matches nothing.
func (r *Route) parse() {
	if r.method == "" {
		r.method, r.segments, _ = parseRoute(r.Route)
	}
}

// parseRoute splits "METHOD /a/{b}" into the method and the segments.
func parseRoute(s string) (method string, segs []string, err error) {
	method, p, ok := strings.Cut(s, " ")
	if !ok || strings.TrimSpace(p) != p {
		return "", nil, fmt.Errorf("write it as METHOD /path, like GET /items/{id}, with one space")
	}
	if !slices.Contains(routeMethods, method) {
		return "", nil, fmt.Errorf("%q is not a method a route serves; use one of %s (upper case)", method, strings.Join(routeMethods, ", "))
	}
	if !strings.HasPrefix(p, "/") {
		return "", nil, fmt.Errorf("the path %q must start with /", p)
	}
	if len(p) > maxRoutePathLen {
		return "", nil, fmt.Errorf("the path is %d bytes; the most is %d", len(p), maxRoutePathLen)
	}
	if p == "/" {
		return method, nil, nil
	}
	segs = strings.Split(p[1:], "/")
	if len(segs) > maxRouteSegments {
		return "", nil, fmt.Errorf("the path has %d segments; the most is %d", len(segs), maxRouteSegments)
	}
	names := map[string]bool{}
	for _, sg := range segs {
		if m := routeParamRE.FindStringSubmatch(sg); m != nil {
			if names[m[1]] {
				return "", nil, fmt.Errorf("the parameter {%s} appears twice; give each its own name", m[1])
			}
			names[m[1]] = true
			continue
		}
		if sg == "." || sg == ".." || !routeLiteralRE.MatchString(sg) {
			return "", nil, fmt.Errorf("the segment %q is not allowed (an empty one is a doubled or trailing /); %s", sg, routeSegmentMsg)
		}
	}
	return method, segs, nil
}

// overlaps reports whether two routes of one method can match the same
// path: the same number of segments, each pair equal or one a parameter.
func overlaps(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !routeParamRE.MatchString(a[i]) && !routeParamRE.MatchString(b[i]) {
			return false
		}
	}
	return true
}

// sameSegment reports whether two segments are the same literal, or
// both parameters (whatever their names).
func sameSegment(a, b string) bool {
	return a == b || routeParamRE.MatchString(a) && routeParamRE.MatchString(b)
}

// MatchRoute finds the route for method and path (the request's path
// below /m/{org}/{module}, still escaped: each segment is unescaped
// after the split, so %2F stays inside its parameter). It returns the
// route and its parameters; with no route, allowed lists the methods of
// the routes the path matches (for a 405), which may be none (a 404).
// Routes never overlap (ParseManifest refuses it), so at most one
// matches.
func (m *Manifest) MatchRoute(method, path string) (r *Route, params map[string]string, allowed []string) {
	if !strings.HasPrefix(path, "/") || len(path) > 4*maxRoutePathLen {
		return nil, nil, nil
	}
	var segs []string
	if path != "/" {
		segs = strings.Split(path[1:], "/")
	}
	if len(segs) > maxRouteSegments {
		return nil, nil, nil
	}
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil || u == "" || u == "." || u == ".." {
			return nil, nil, nil
		}
		segs[i] = u
	}
	for i := range m.Routes {
		rt := &m.Routes[i]
		rt.parse()
		if len(rt.segments) != len(segs) {
			continue
		}
		var ps map[string]string
		ok := true
		for j, sg := range rt.segments {
			if pm := routeParamRE.FindStringSubmatch(sg); pm != nil {
				if ps == nil {
					ps = map[string]string{}
				}
				ps[pm[1]] = segs[j]
			} else if sg != segs[j] {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		if rt.method == method {
			return rt, ps, nil
		}
		allowed = append(allowed, rt.method)
	}
	return nil, nil, allowed
}

// checkRoutes validates the manifest's routes.
func checkRoutes(ix *index, m *Manifest) error {
	if len(m.Routes) == 0 {
		return nil
	}
	if len(m.Routes) > MaxRoutes {
		return ix.Errorf("routes", "has %d routes; the most is %d", len(m.Routes), MaxRoutes)
	}
	for i := range m.Routes {
		r := &m.Routes[i]
		p := fmt.Sprintf("routes[%d]", i)
		if r.Route == "" {
			return ix.Errorf(p+".route", `a route needs a method and a path; add route: "GET /items/{id}"`)
		}
		method, segs, err := parseRoute(r.Route)
		if err != nil {
			return ix.Errorf(p+".route", "%q: %v", r.Route, err)
		}
		r.method, r.segments = method, segs
		for j := range i {
			o := &m.Routes[j]
			if o.method == method && overlaps(o.segments, segs) {
				what := "is ambiguous with"
				if slices.EqualFunc(o.segments, segs, sameSegment) {
					what = "duplicates"
				}
				return ix.Errorf(p+".route", "%q %s routes[%d] (%q): a request could match both; change a literal segment or remove one",
					r.Route, what, j, o.Route)
			}
		}
		a, ok := m.Action(r.Action)
		switch {
		case r.Action == "":
			return ix.Errorf(p+".action", "a route names the action it runs; add action: get_item")
		case !ok:
			names := make([]string, len(m.Actions))
			for j, a := range m.Actions {
				names[j] = a.Name
			}
			return ix.Errorf(p+".action", "%q is not an action of this manifest%s; declare it under actions: (declared: %s)",
				r.Action, didYouMean(r.Action, names), strings.Join(names, ", "))
		case a.Confirm:
			return ix.Errorf(p+".action", "action %q needs confirmation (confirm: true), which a route's caller cannot give; route another action", r.Action)
		}
		if r.Auth != "" && !slices.Contains(routeAuths, string(r.Auth)) {
			return ix.Errorf(p+".auth", "%q is not a route's auth%s; write one of %s", r.Auth, didYouMean(string(r.Auth), routeAuths), strings.Join(routeAuths, ", "))
		}
		auth := r.AuthMode()
		if auth != RouteKey {
			role := RoutePrincipal("", auth).Roles[0]
			if len(a.Roles) > 0 && !slices.Contains(a.Roles, role) {
				return ix.Errorf(p+".action", "action %q admits only the roles %s; a %s route runs as %s with the role %s: add it to the action's roles, or use auth: key",
					r.Action, strings.Join(a.Roles, ", "), auth, ServiceUser, role)
			}
		}
		if ix.Has(p+".max_body") && (r.MaxBody == 0 || r.MaxBody > abi.MaxRouteBodyBytes) {
			return ix.Errorf(p+".max_body", "give 1B to 16MiB, or leave it out for 1MiB")
		}
		if err := checkWebhook(ix, p, r); err != nil {
			return err
		}
	}
	return nil
}

// checkWebhook validates a route's webhook: present exactly for auth:
// webhook, a POST, a known scheme, a secret's name, a tolerance in range.
func checkWebhook(ix *index, p string, r *Route) error {
	w := r.Webhook
	if r.AuthMode() != RouteWebhook {
		if w != nil {
			return ix.Errorf(p+".webhook", "only a route with auth: webhook checks a signature; remove webhook:, or write auth: webhook")
		}
		return nil
	}
	switch {
	case r.method != "POST":
		return ix.Errorf(p+".route", "a webhook is delivered with POST, not %s; write route: \"POST %s\"", r.method, r.Pattern())
	case w == nil:
		return ix.Errorf(p+".webhook", "a webhook route needs its signature scheme and secret; add webhook: {scheme: github, secret: NAME}, NAME a secret of the organization (moat secrets set)")
	case w.Scheme == "":
		return ix.Errorf(p+".webhook.scheme", "required; write one of %s", strings.Join(webhookSchemes, ", "))
	case !slices.Contains(webhookSchemes, w.Scheme):
		return ix.Errorf(p+".webhook.scheme", "%q is not a signature scheme%s; write one of %s", w.Scheme, didYouMean(w.Scheme, webhookSchemes), strings.Join(webhookSchemes, ", "))
	case w.Secret == "":
		return ix.Errorf(p+".webhook.secret", "a webhook is checked against a secret of the organization; add secret: NAME and set it with moat secrets set --org ORG NAME")
	}
	if err := abi.CheckSecretName(w.Secret); err != nil {
		return ix.Errorf(p+".webhook.secret", "%v", err)
	}
	if ix.Has(p+".webhook.tolerance") && (w.Tolerance <= 0 || w.Tolerance.Std() > MaxWebhookTolerance) {
		return ix.Errorf(p+".webhook.tolerance", "give more than 0 and at most %s, or leave it out for %s", Duration(MaxWebhookTolerance), Duration(DefaultWebhookTolerance))
	}
	return nil
}

// reportRoutes writes the routes section of Report: each route, its
// action and who may call it.
func reportRoutes(line func(format string, args ...any), m *Manifest) {
	line("")
	line("routes\taction\tcaller")
	for i := range m.Routes {
		r := &m.Routes[i]
		line("  %s\t%s\t%s", r.Route, r.Action, r.Caller())
	}
}

// Caller says who may call the route, for reports and inspect.
func (r *Route) Caller() string {
	switch r.AuthMode() {
	case RoutePublic:
		return "anyone (public; runs as " + ServiceUser + " with the role " + PublicRole + ")"
	case RouteWebhook:
		if r.Webhook != nil {
			return fmt.Sprintf("a %s webhook signed with the secret %s (runs as %s with the role %s)", r.Webhook.Scheme, r.Webhook.Secret, ServiceUser, WebhookRole)
		}
		return "a signed webhook"
	}
	return "an API key (the key's principal)"
}
