package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// ModuleJSON describes a module in responses.
type ModuleJSON struct {
	Name       string       `json:"name"`
	Org        string       `json:"org"`
	Digest     string       `json:"digest"`
	Version    string       `json:"version,omitempty"`
	Kind       host.Kind    `json:"kind"`
	Size       int64        `json:"size"`
	Mode       string       `json:"mode"`
	Signer     string       `json:"signer,omitempty"`
	Actions    []ActionJSON `json:"actions"`
	Routes     []RouteJSON  `json:"routes,omitempty"` // routes.go
	UploadedBy string       `json:"uploaded_by"`
	UploadedAt time.Time    `json:"uploaded_at"`
	// State is "loading" for a module the store holds that this replica
	// is still loading (kind, mode and signer are then not known yet),
	// "not_loadable" for one that does not load here; empty when loaded.
	State string `json:"state,omitempty"`
}

// ActionJSON is an action of a module and who may call it.
type ActionJSON struct {
	Name        string   `json:"name"`
	Roles       []string `json:"roles,omitempty"`
	Permissions []string `json:"permissions,omitempty"`
	Confirm     bool     `json:"confirm,omitempty"`
	// Description, InputSchema and OutputSchema are the manifest's
	// (policy.Schema): what an agent sees of the action as an MCP tool.
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Callable is set, when the module is loaded, to whether the caller's
	// roles and permissions allow the action (host.Module.MayInvoke).
	Callable *bool `json:"callable,omitempty"`
}

// actionJSON describes a manifest's action.
func actionJSON(a *policy.Action) ActionJSON {
	aj := ActionJSON{Name: a.Name, Roles: a.Roles, Permissions: a.Permissions, Confirm: a.Confirm, Description: a.Description}
	if a.InputSchema != nil {
		aj.InputSchema = a.InputSchema.JSON
	}
	if a.OutputSchema != nil {
		aj.OutputSchema = a.OutputSchema.JSON
	}
	return aj
}

// markCallable sets each action's Callable for the principal.
func markCallable(out *ModuleJSON, e *entry, p policy.Principal) {
	for i := range out.Actions {
		ok := e.mod.MayInvoke(out.Actions[i].Name, p)
		out.Actions[i].Callable = &ok
	}
}

func describeModule(e *entry) ModuleJSON {
	info := e.mod.Info()
	out := ModuleJSON{
		Name: e.version.Name, Org: e.version.Org, Digest: e.version.Digest, Version: e.version.Version, Kind: info.Kind,
		Size: e.version.Size, Mode: info.Mode, Signer: info.Signer, Actions: []ActionJSON{},
		UploadedBy: e.version.UploadedBy, UploadedAt: e.version.UploadedAt,
	}
	mf := e.mod.Manifest()
	for _, a := range e.mod.Actions() {
		aj := ActionJSON{Name: a}
		if ma, ok := mf.Action(a); ok {
			aj = actionJSON(ma)
		}
		out.Actions = append(out.Actions, aj)
	}
	out.Routes = RoutesOf(mf)
	return out
}

// listModules lists what the store holds: a module this replica has not
// loaded yet is loaded (the loads shared and run at once, waited for up
// to modules.load_wait), and one still loading after that is listed from
// the store with state "loading" rather than left out.
func (s *Server) listModules(c echo.Context) error {
	p := principalOf(c)
	ctx := c.Request().Context()
	out := []ModuleJSON{}
	versions, err := s.store.Modules(ctx, p.Org)
	if err != nil {
		return err
	}
	scopes := stateOf(c).keyScopes
	versions = slices.DeleteFunc(versions, func(v store.ModuleVersion) bool { return !inScope(scopes, v.Name) })
	for _, v := range versions {
		if s.modules.get(p.Org, v.Name) == nil {
			s.modules.shared(p.Org, v.Name, "request") // start every load before waiting for one
		}
	}
	deadline := time.Now().Add(s.modules.loadWait()) // one wait for all
	for _, v := range versions {
		e, err := s.modules.ensureUntil(ctx, p.Org, v.Name, deadline)
		var le *loadingError
		var fe *loadFailedError
		switch {
		case e != nil:
			m := describeModule(e)
			markCallable(&m, e, p)
			out = append(out, m)
		case errors.As(err, &le):
			out = append(out, describeStored(v, "loading"))
		case errors.As(err, &fe):
			out = append(out, describeStored(v, "not_loadable"))
		case err != nil:
			return err
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"modules": out})
}

// describeStored describes a stored version this replica has not loaded,
// from what the store says of it.
func describeStored(v store.ModuleVersion, state string) ModuleJSON {
	out := ModuleJSON{Name: v.Name, Org: v.Org, Digest: v.Digest, Version: v.Version, Size: v.Size, Actions: []ActionJSON{},
		UploadedBy: v.UploadedBy, UploadedAt: v.UploadedAt, State: state}
	if v.Manifest != nil {
		if mf, err := policy.ParseManifest("moat.yaml", v.Manifest); err == nil {
			for _, a := range mf.Actions {
				out.Actions = append(out.Actions, actionJSON(&a))
			}
		}
	}
	return out
}

// lookup finds the principal's module, loading it on demand when the store
// holds it and this replica has not loaded it yet (ensure): a stored
// module is never a 404. Another organization's is a 404 like a missing
// one, so that names do not leak between tenants.
func (s *Server) lookup(c echo.Context) (*entry, error) {
	org, name := principalOf(c).Org, c.Param("name")
	e, err := s.modules.ensure(c.Request().Context(), org, name)
	if perr := s.moduleProblem(org, name, correlationID(c), e, err); perr != nil {
		return nil, perr
	}
	return e, nil
}

// getModule describes a module: loaded on demand like an invocation's,
// and, while it still loads (or when it does not load here), described
// from what the store holds with its state, as GET /v1/modules lists it.
func (s *Server) getModule(c echo.Context) error {
	org, name := principalOf(c).Org, c.Param("name")
	e, err := s.modules.ensure(c.Request().Context(), org, name)
	var le *loadingError
	var fe *loadFailedError
	if errors.As(err, &le) || errors.As(err, &fe) {
		state := "loading"
		if fe != nil {
			state = "not_loadable"
		}
		if cur, cerr := s.modules.current(c.Request().Context(), org, name); cerr == nil && cur != nil {
			return c.JSON(http.StatusOK, describeStored(*cur, state))
		}
	}
	if perr := s.moduleProblem(org, name, correlationID(c), e, err); perr != nil {
		return perr
	}
	m := describeModule(e)
	markCallable(&m, e, principalOf(c))
	return c.JSON(http.StatusOK, m)
}

// VersionJSON is one uploaded version of a module.
type VersionJSON struct {
	Digest     string    `json:"digest"`
	Version    string    `json:"version,omitempty"`
	Size       int64     `json:"size"`
	Signed     bool      `json:"signed"`
	Current    bool      `json:"current"`
	UploadedBy string    `json:"uploaded_by"`
	UploadedAt time.Time `json:"uploaded_at"`
	// Manifest is the moat.yaml uploaded with the version (its grants,
	// config and actions), as text; empty when none was.
	Manifest string `json:"manifest,omitempty"`
}

func (s *Server) moduleVersions(c echo.Context) error {
	p := principalOf(c)
	var vs []store.ModuleVersion
	err := store.ErrModuleNotFound // no upload has an invalid name; the store may refuse it (NUL)
	if host.ValidateModuleName(c.Param("name")) == nil {
		vs, err = s.store.ModuleVersions(c.Request().Context(), p.Org, c.Param("name"))
	}
	if errors.Is(err, store.ErrModuleNotFound) {
		return problem(http.StatusNotFound, "not_found", "no module %q in organization %s", c.Param("name"), p.Org)
	}
	if err != nil {
		return err
	}
	out := make([]VersionJSON, len(vs))
	for i, v := range vs {
		out[i] = VersionJSON{Digest: v.Digest, Version: v.Version, Size: v.Size, Signed: v.Signature != nil, Current: v.Current, UploadedBy: v.UploadedBy, UploadedAt: v.UploadedAt,
			Manifest: string(v.Manifest)}
	}
	return c.JSON(http.StatusOK, map[string]any{"name": c.Param("name"), "versions": out})
}

func (s *Server) deleteModule(c echo.Context) error {
	p := principalOf(c)
	ctx := c.Request().Context()
	name := c.Param("name")
	if err := s.mayManage(c, PermModuleDelete, name); err != nil {
		return err
	}
	s.modules.commit.Lock()
	defer s.modules.commit.Unlock()
	var orphans []string
	err := store.ErrModuleNotFound // no upload has an invalid name; the store may refuse it (NUL)
	if host.ValidateModuleName(name) == nil {
		orphans, err = s.store.ModuleDelete(ctx, p.Org, name)
	}
	if errors.Is(err, store.ErrModuleNotFound) {
		return problem(http.StatusNotFound, "not_found", "no module %q in organization %s", name, p.Org)
	}
	if err != nil {
		return err
	}
	s.modules.remove(ctx, p.Org, name)
	s.auditModule(c, store.ModuleVersion{Org: p.Org, Name: name}, "delete", nil)
	s.modules.removeOrphans(orphans, "")
	return c.NoContent(http.StatusNoContent)
}

// Module management permissions. A principal manages its organization's
// modules through a permission, held the way an action's permissions are:
// by a role that the organization's profile gives it in role_permissions.
// While the profile gives a permission to no role at all, the default
// holds it: the role admin (DefaultModuleRole). Naming the permission
// under any role hands the decision to role_permissions entirely.
const (
	// PermModuleUpload uploads a module or a new version of one, which
	// replaces the current version (and so the code every caller runs).
	PermModuleUpload = "module.upload"
	// PermModuleDelete deletes a module with all its versions.
	PermModuleDelete = "module.delete"
	// DefaultModuleRole holds both permissions unless the profile's
	// role_permissions gives them to a role.
	DefaultModuleRole = "admin"
)

// mayManage checks that the caller holds perm over its organization's
// modules; a refusal is a 403 and a deny event.
func (s *Server) mayManage(c echo.Context, perm, module string) error {
	p := principalOf(c)
	ok, rule, reason := s.holds(p, perm)
	if ok {
		return nil
	}
	s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindDecision, Decision: audit.Deny,
		CorrelationID: correlationID(c), Module: module, User: p.User, Org: p.Org, Rule: rule, Reason: reason,
		Code: string(abi.CodeDenied), Attrs: map[string]string{"api": perm}})
	return problem(http.StatusForbidden, string(abi.CodeDenied), "%s", reason)
}

// holds says whether p holds the API permission perm in its
// organization's profile, and when not, the rule and the reason of the
// refusal: held the way an action's permissions are, by a role that
// role_permissions gives it; while the profile gives perm to no role at
// all, the role admin (DefaultModuleRole) holds it.
func (s *Server) holds(p policy.Principal, perm string) (ok bool, rule, reason string) {
	prof := s.hostFor(p.Org).Profile()
	configured := false
	for _, perms := range prof.RolePermissions {
		if slices.Contains(perms, perm) {
			configured = true
			break
		}
	}
	if configured {
		if slices.Contains(prof.Permissions(p.Roles), perm) {
			return true, "", ""
		}
		return false, "profile " + prof.Name + ": role_permissions " + perm,
			fmt.Sprintf("%s@%s needs permission %s, which none of its roles %v holds in profile %s (role_permissions)",
				p.User, p.Org, perm, orEmpty(p.Roles), prof.Name)
	}
	if p.HasRole(DefaultModuleRole) {
		return true, "", ""
	}
	return false, "default: role " + DefaultModuleRole + " holds " + perm,
		fmt.Sprintf("%s@%s needs role %s for %s (its roles are %v): profile %s gives %s to no role in role_permissions, so only %s may",
			p.User, p.Org, DefaultModuleRole, perm, orEmpty(p.Roles), prof.Name, perm, DefaultModuleRole)
}

func orEmpty(roles []string) []string {
	if roles == nil {
		return []string{}
	}
	return roles
}

// auditModule records an upload or a deletion for the principal's
// organization. (The host's own load and signature events name the module
// but not the organization that uploaded it.) A refusal names its rule.
func (s *Server) auditModule(c echo.Context, v store.ModuleVersion, what string, err error) {
	p := principalOf(c)
	ev := audit.Event{Kind: audit.KindLoad, Decision: audit.Allow, CorrelationID: correlationID(c), Module: v.Name,
		User: p.User, Org: p.Org, Rule: "api " + what, Attrs: map[string]string{"api": what}}
	var (
		re *refusal
		pr *Problem
	)
	switch {
	case errors.As(err, &re):
		ev.Decision, ev.Reason, ev.Code, ev.Rule = audit.Deny, "upload refused: "+re.p.Detail, re.p.Code, re.rule
	case errors.As(err, &pr):
		ev.Decision, ev.Reason, ev.Code = audit.Deny, "upload refused: "+pr.Detail, pr.Code
	case err != nil:
		ev.Decision, ev.Reason, ev.Code = audit.Deny, "upload refused: "+err.Error(), string(abi.CodeOf(err))
	case what == "upload":
		ev.Reason = "uploaded version " + v.Digest[:12] + " (" + orNone(v.Version) + ") and made it current"
		ev.Attrs["digest"] = v.Digest
	default:
		ev.Reason = "deleted with all its versions"
	}
	s.audit.Record(c.Request().Context(), ev)
}

// refusal is an upload refused by a server rule (quota, rollback): its
// problem for the client and its rule for the audit trail.
type refusal struct {
	p    *Problem
	rule string
}

func (r *refusal) Error() string { return r.p.Detail }

func orNone(s string) string {
	if s == "" {
		return "no manifest version"
	}
	return "version " + s
}
