package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
)

// The API key routes:
//
//	POST   /v1/keys              {"user", "roles", "name", "scopes", "expires_at"}: a new key, its secret shown once
//	GET    /v1/keys              the organization's keys (never a secret or a hash)
//	DELETE /v1/keys/{id}         revoke
//	POST   /v1/keys/{id}/rotate  {"grace_seconds"}: a new secret; the old one valid for the grace (default 0)
//
// Managing keys takes PermKeyManage (held by the role admin unless the
// profile's role_permissions gives it to a role) and, for a scoped key,
// the scope keys. A key may revoke and rotate itself without either.
// What a caller mints is never wider than the key it calls with: roles a
// subset of its roles, scopes within its scopes, an expiry no later than
// its own; rotating another key hands over its secret, so that key must
// be no wider either. Every operation, allowed or refused, is audited
// (kind api_key).

// PermKeyManage creates, lists, revokes and rotates the organization's
// API keys.
const PermKeyManage = "key.manage"

// maxKeyBody bounds a key route's JSON body.
const maxKeyBody = 16 << 10

// keyInfo is a key as the routes show it.
type keyInfo struct {
	ID           string     `json:"id"`
	Org          string     `json:"org"`
	User         string     `json:"user"`
	Roles        []string   `json:"roles"`
	Scopes       []string   `json:"scopes"`
	Name         string     `json:"name"`
	CreatedAt    time.Time  `json:"created_at"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	RevokedAt    *time.Time `json:"revoked_at,omitempty"`
	PrevUntil    *time.Time `json:"previous_valid_until,omitempty"`
	LastUsedAt   *time.Time `json:"last_used_at,omitempty"`
	LastUsedAddr string     `json:"last_used_addr,omitempty"`
	Status       string     `json:"status"` // active, expired, revoked
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func infoOf(k *store.APIKey, now time.Time) keyInfo {
	i := keyInfo{ID: k.ID, Org: k.Org, User: k.User, Roles: k.Roles, Scopes: k.Scopes, Name: k.Name, CreatedAt: k.CreatedAt,
		ExpiresAt: timePtr(k.ExpiresAt), RevokedAt: timePtr(k.RevokedAt), LastUsedAt: timePtr(k.LastUsedAt), LastUsedAddr: k.LastUsedAddr, Status: "active"}
	if now.Before(k.PrevUntil) {
		i.PrevUntil = timePtr(k.PrevUntil)
	}
	if i.Roles == nil {
		i.Roles = []string{}
	}
	if i.Scopes == nil {
		i.Scopes = []string{}
	}
	switch {
	case !k.RevokedAt.IsZero():
		i.Status = "revoked"
	case k.Expired(now):
		i.Status = "expired"
	}
	return i
}

func (s *Server) keyRoutes(e *echo.Echo, auth echo.MiddlewareFunc) {
	e.POST("/v1/keys", s.createKey, auth)
	e.GET("/v1/keys", s.listKeys, auth)
	e.DELETE("/v1/keys/:id", s.revokeKey, auth)
	e.POST("/v1/keys/:id/rotate", s.rotateKey, auth)
}

// callerKey is the key the request authenticated with, as read then.
func (s *Server) callerKey(c echo.Context) (*store.APIKey, error) {
	k, err := s.store.APIKeyByID(c.Request().Context(), stateOf(c).keyID)
	if err != nil {
		return nil, fmt.Errorf("api keys: the caller's key: %w", err)
	}
	return k, nil
}

// auditKey records a key operation; a refusal is a deny with its reason.
func (s *Server) auditKey(c echo.Context, rule, keyID string, attrs map[string]string, refusal string) {
	p := principalOf(c)
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs["key"], attrs["by_key"] = clipAttr(keyID), stateOf(c).keyID
	e := audit.Event{Kind: audit.KindAPIKey, Decision: audit.Allow, CorrelationID: correlationID(c), User: p.User, Org: p.Org, Rule: rule, Attrs: attrs}
	if refusal != "" {
		e.Decision, e.Reason, e.Code = audit.Deny, refusal, string(abi.CodeDenied)
	}
	s.audit.Record(c.Request().Context(), e)
}

// notWider says why a key with roles, scopes and expiry would be wider
// than the caller's key, or "" when it is not.
func notWider(caller *store.APIKey, roles, scopes []string, expires time.Time) string {
	for _, r := range roles {
		if !slices.Contains(caller.Roles, r) {
			return fmt.Sprintf("role %q is not one of this key's roles (%s): a key cannot give a role it does not hold", clipAttr(r), strings.Join(caller.Roles, ", "))
		}
	}
	if !scopesWithin(scopes, caller.Scopes) {
		give := "no scopes (everything)"
		if len(scopes) > 0 {
			give = strings.Join(scopes, ", ")
		}
		return fmt.Sprintf("scopes %s are wider than this key's (%s): a key cannot give a scope it does not hold", give, strings.Join(caller.Scopes, ", "))
	}
	if !caller.ExpiresAt.IsZero() && (expires.IsZero() || expires.After(caller.ExpiresAt)) {
		return fmt.Sprintf("this key expires at %s; a key it makes must expire no later (set expires_at)", caller.ExpiresAt.Format(time.RFC3339))
	}
	return ""
}

func (s *Server) createKey(c echo.Context) error {
	if err := s.mayManage(c, PermKeyManage, ""); err != nil {
		return err
	}
	body, err := readBody(c, maxKeyBody, "the key routes' bound")
	if err != nil {
		return err
	}
	var req struct {
		User      string     `json:"user"`
		Roles     *[]string  `json:"roles"`
		Name      string     `json:"name"`
		Scopes    *[]string  `json:"scopes"`
		ExpiresAt *time.Time `json:"expires_at"`
		ExpiresIn int64      `json:"expires_in_seconds"`
	}
	if err := decodeJSONBody(body, &req, true); err != nil {
		return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument),
			`the body must be JSON {"user", "roles": [...], "name", "scopes": [...], "expires_at": RFC 3339 or "expires_in_seconds"}: %v`, err)
	}
	caller, err := s.callerKey(c)
	if err != nil {
		return err
	}
	p := principalOf(c)
	spec := NewAPIKey{Org: p.Org, User: req.User, Name: req.Name, Roles: caller.Roles, Scopes: caller.Scopes, ExpiresAt: caller.ExpiresAt}
	if spec.User == "" {
		spec.User = p.User
	}
	if req.Roles != nil {
		spec.Roles = *req.Roles
	}
	if req.Scopes != nil {
		if spec.Scopes, err = ParseScopes(*req.Scopes); err != nil {
			return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), "scopes: %v", err)
		}
	}
	switch {
	case req.ExpiresAt != nil && req.ExpiresIn != 0:
		return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), "give expires_at or expires_in_seconds, not both")
	case req.ExpiresAt != nil:
		spec.ExpiresAt = *req.ExpiresAt
	case req.ExpiresIn < 0 || req.ExpiresIn > 10*366*24*3600:
		return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), "expires_in_seconds must be between 1 and ten years")
	case req.ExpiresIn > 0:
		spec.ExpiresAt = time.Now().Add(time.Duration(req.ExpiresIn) * time.Second)
	}
	attrs := map[string]string{"user": clipAttr(spec.User), "roles": clipAttr(strings.Join(spec.Roles, ",")), "scopes": clipAttr(strings.Join(spec.Scopes, ","))}
	if why := notWider(caller, spec.Roles, spec.Scopes, spec.ExpiresAt); why != "" {
		s.auditKey(c, "create", "", attrs, why)
		return problem(http.StatusForbidden, string(abi.CodeDenied), "%s", why)
	}
	secret, key, err := CreateAPIKey(c.Request().Context(), s.store, spec)
	if err != nil {
		return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), "%v", err)
	}
	if !key.ExpiresAt.IsZero() {
		attrs["expires_at"] = key.ExpiresAt.Format(time.RFC3339)
	}
	s.auditKey(c, "create", key.ID, attrs, "")
	out := struct {
		keyInfo
		Key string `json:"key"`
	}{infoOf(&key, time.Now()), secret}
	return c.JSON(http.StatusCreated, out)
}

func (s *Server) listKeys(c echo.Context) error {
	p := principalOf(c)
	mine := false
	if ok, _, _ := s.holds(p, PermKeyManage); !ok {
		mine = true // without the permission: the caller's own keys
	}
	ctx := c.Request().Context()
	s.auth.flush(ctx) // this replica's uses, so that the listing shows them
	keys, err := s.store.APIKeys(ctx, p.Org)
	if err != nil {
		return err
	}
	now := time.Now()
	out := make([]keyInfo, 0, len(keys))
	for i := range keys {
		if mine && keys[i].User != p.User {
			continue
		}
		out = append(out, infoOf(&keys[i], now))
	}
	return c.JSON(http.StatusOK, map[string]any{"org": p.Org, "keys": out, "scopes": KeyScopes})
}

// targetKey reads the key the path names: one of the caller's
// organization (another's is 404, as an unknown one), and checks that the
// caller may manage it: its own key, or PermKeyManage.
func (s *Server) targetKey(c echo.Context, rule string) (*store.APIKey, error) {
	id := c.Param("id")
	p := principalOf(c)
	k, err := s.store.APIKeyByID(c.Request().Context(), id)
	if errors.Is(err, store.ErrAPIKeyNotFound) || err == nil && k.Org != p.Org {
		return nil, problem(http.StatusNotFound, string(abi.CodeNotFound), "organization %s has no API key %.64q; GET /v1/keys lists them", p.Org, id)
	}
	if err != nil {
		return nil, err
	}
	if k.ID == stateOf(c).keyID {
		return k, nil
	}
	if ok, _, reason := s.holds(p, PermKeyManage); !ok {
		s.auditKey(c, rule, k.ID, nil, reason)
		return nil, problem(http.StatusForbidden, string(abi.CodeDenied), "%s", reason)
	}
	return k, nil
}

func (s *Server) revokeKey(c echo.Context) error {
	k, err := s.targetKey(c, "revoke")
	if err != nil {
		return err
	}
	if err := s.store.APIKeyRevoke(c.Request().Context(), k.ID, time.Now().UTC()); err != nil {
		return err
	}
	s.auth.forget(k.ID)
	s.auditKey(c, "revoke", k.ID, map[string]string{"user": k.User}, "")
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) rotateKey(c echo.Context) error {
	k, err := s.targetKey(c, "rotate")
	if err != nil {
		return err
	}
	body, err := readBody(c, maxKeyBody, "the key routes' bound")
	if err != nil {
		return err
	}
	var req struct {
		Grace int64 `json:"grace_seconds"`
	}
	if len(body) > 0 {
		if err := decodeJSONBody(body, &req, true); err != nil {
			return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), `the body must be JSON {"grace_seconds": N} or empty: %v`, err)
		}
	}
	if req.Grace < 0 || time.Duration(req.Grace)*time.Second > MaxRotateGrace {
		return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), "grace_seconds must be between 0 and %d", int(MaxRotateGrace.Seconds()))
	}
	if k.ID != stateOf(c).keyID {
		// The caller gets the key's new secret: it must be no wider
		// than the caller's own key.
		caller, err := s.callerKey(c)
		if err != nil {
			return err
		}
		if why := notWider(caller, k.Roles, k.Scopes, k.ExpiresAt); why != "" {
			why = "rotating " + k.ID + " would hand this key its secret: " + why
			s.auditKey(c, "rotate", k.ID, nil, why)
			return problem(http.StatusForbidden, string(abi.CodeDenied), "%s", why)
		}
	}
	if !k.RevokedAt.IsZero() {
		return problem(http.StatusConflict, string(abi.CodeConflict), "API key %s is revoked; create a new one", k.ID)
	}
	secret, err := RotateAPIKey(c.Request().Context(), s.store, k, time.Duration(req.Grace)*time.Second)
	if errors.Is(err, store.ErrAPIKeyChanged) {
		return problem(http.StatusConflict, string(abi.CodeConflict), "API key %s was rotated or revoked by another request meanwhile; list the keys and try again", k.ID)
	}
	if err != nil {
		return err
	}
	s.auth.forget(k.ID)
	s.auditKey(c, "rotate", k.ID, map[string]string{"user": k.User, "grace_seconds": fmt.Sprint(req.Grace)}, "")
	k, err = s.store.APIKeyByID(c.Request().Context(), k.ID)
	if err != nil {
		return err
	}
	out := struct {
		keyInfo
		Key string `json:"key"`
	}{infoOf(k, time.Now()), secret}
	return c.JSON(http.StatusOK, out)
}

// checkScope is where a key's scopes are checked, for every route a key
// reaches (authenticate calls it): a key without scopes costs nothing.
func (s *Server) checkScope(c echo.Context, k *store.APIKey) error {
	if len(k.Scopes) == 0 {
		return nil
	}
	f := s.routeFamilyOf(c, k.ID)
	ok, reason := scopeAllows(k.Scopes, f)
	if ok {
		return nil
	}
	s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindDecision, Decision: audit.Deny,
		CorrelationID: correlationID(c), Module: f.module, User: k.User, Org: k.Org, Rule: "api key scopes", Reason: reason,
		Code: string(abi.CodeDenied), Attrs: map[string]string{"key": k.ID, "route": clipAttr(c.Path())}})
	return problem(http.StatusForbidden, string(abi.CodeDenied), "%s", reason)
}

// routeFamilyOf says which scope reaches the request's route (see
// KeyScopes), by the route's pattern as registered, never by the raw path.
func (s *Server) routeFamilyOf(c echo.Context, keyID string) routeFamily {
	path, get := c.Path(), c.Request().Method == http.MethodGet || c.Request().Method == http.MethodHead
	inv := func(module string) routeFamily { return routeFamily{scope: ScopeInvoke, module: module, read: get} }
	switch {
	case path == "/v1/whoami":
		return routeFamily{scope: "*"}
	case strings.HasPrefix(path, "/v1/keys/:id") && c.Param("id") == keyID:
		return routeFamily{scope: "*"} // a key revokes and rotates itself
	case path == "/v1/keys" || strings.HasPrefix(path, "/v1/keys/"):
		return routeFamily{scope: ScopeKeys, read: get}
	case path == "/v1/audit":
		return routeFamily{scope: ScopeAuditRead, read: get}
	case path == "/v1/modules/:name/actions/:action" || strings.HasPrefix(path, "/v1/modules/:name/pages"):
		return inv(c.Param("name"))
	case path == "/v1/modules/:name" && get:
		return inv(c.Param("name"))
	case path == moduleRoute || path == moduleRouteRoot:
		return inv(c.Param("module"))
	case (path == "/v1/modules" || path == "/v1/pages") && get:
		return routeFamily{scope: ScopeInvoke, read: get, listing: true}
	case strings.HasPrefix(path, "/v1/confirmations/id/"):
		return routeFamily{read: get} // deciding another's request: a key without scopes
	case strings.HasPrefix(path, "/v1/confirmations"):
		return inv("")
	case path == "/v1/runs" || path == "/v1/languages" || path == "/v1/sessions" || strings.HasPrefix(path, "/v1/sessions/"),
		strings.HasPrefix(path, e2bAPIPrefix+"/"),
		s.cfg.Judge0.Enabled && strings.HasPrefix(path, s.cfg.Judge0.Prefix+"/"):
		return routeFamily{scope: ScopeRun, read: get}
	}
	return routeFamily{read: get}
}
