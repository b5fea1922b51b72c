package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
)

// The admin routes of an organization's secrets:
//
//	PUT    /v1/admin/secrets/{org}/{name}   {"value": "..."}
//	DELETE /v1/admin/secrets/{org}/{name}
//	GET    /v1/admin/secrets/{org}          names and dates, never values
//
// A key manages the secrets of its own organization only, and only while
// it holds PermSecretManage (held the way module permissions are: by the
// role admin unless the profile's role_permissions gives it to a role).
// The organization is in the path so that a request says what it means:
// one naming another organization is refused (403) and audited, as a
// request without the permission is. The operator's own secrets (those of
// AI providers) and any organization's are managed with `moat secrets`
// on the server's store. No route ever returns a value.

// PermSecretManage sets, lists and deletes the organization's secrets.
const PermSecretManage = "secret.manage"

// maxSecretBody bounds a PUT's JSON body: a value of abi.MaxSecretBytes,
// escaped.
const maxSecretBody = 6*abi.MaxSecretBytes + 64

// secretInfo is a secret as the routes show it.
type secretInfo struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by"`
}

// vaultAudit records the vault's events in the server's trail, which
// every host records to.
type vaultAudit struct{ s *Server }

func (a vaultAudit) Record(ctx context.Context, e audit.Event) {
	if a.s.audit != nil {
		a.s.audit.Record(ctx, e)
	}
}

// maySecrets checks that the caller manages org's secrets: its own
// organization, and PermSecretManage.
func (s *Server) maySecrets(c echo.Context, org string) error {
	p := principalOf(c)
	if org != p.Org {
		reason := fmt.Sprintf("%s@%s manages the secrets of organization %s only, not of %q", p.User, p.Org, p.Org, org)
		s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindDecision, Decision: audit.Deny,
			CorrelationID: correlationID(c), User: p.User, Org: p.Org, Rule: "api secrets: own organization", Reason: reason,
			Code: string(abi.CodeDenied), Attrs: map[string]string{"api": PermSecretManage, "org": clipAttr(org)}})
		return problem(http.StatusForbidden, string(abi.CodeDenied), "%s", reason)
	}
	return s.mayManage(c, PermSecretManage, "")
}

func clipAttr(s string) string {
	if len(s) > 128 {
		return s[:128]
	}
	return s
}

// secretError turns a vault or store failure into a problem: no key (503,
// saying how to configure one), a bad name or value (400), the bound of
// secrets (409), no such secret (404).
func secretError(err error, org, name string) error {
	var ae *abi.Error
	switch {
	case errors.Is(err, secrets.ErrNoKey):
		return problem(http.StatusServiceUnavailable, string(abi.CodeUnavailable), "this server keeps no secrets: %v", secrets.ErrNoKey)
	case errors.As(err, &ae):
		return problem(http.StatusBadRequest, string(ae.Code), "%s", ae.Message)
	case errors.Is(err, store.ErrSecretQuota):
		return problem(http.StatusConflict, string(abi.CodeResourceExhausted), "organization %s holds %d secrets, the most it may; delete one first", org, store.MaxSecretsPerOrg)
	case errors.Is(err, store.ErrSecretNotFound):
		return problem(http.StatusNotFound, string(abi.CodeNotFound), "organization %s has no secret %s", org, name)
	}
	return err
}

func (s *Server) putSecret(c echo.Context) error {
	org, name := c.Param("org"), c.Param("name")
	if err := s.maySecrets(c, org); err != nil {
		return err
	}
	if err := abi.CheckSecretName(name); err != nil {
		return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), "%v", err)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, maxSecretBody))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return problem(http.StatusRequestEntityTooLarge, string(abi.CodeTooLarge), "the body is over %d bytes; a secret is at most %d", maxSecretBody, abi.MaxSecretBytes)
	}
	if err != nil {
		return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), "reading the body: %v", err)
	}
	var req struct {
		Value *string `json:"value"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Value == nil {
		// Not the decoder's message: it may quote the body, the value.
		return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), `the body must be JSON {"value": "..."} with the secret's value as a string`)
	}
	p := principalOf(c)
	value := []byte(*req.Value)
	created, err := s.vault.Set(c.Request().Context(), secrets.Actor{Via: "api", User: p.User, Org: p.Org}, org, name, value)
	clear(value)
	clear(body)
	if err != nil {
		return secretError(err, org, name)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, map[string]any{"org": org, "name": name, "created": created})
}

func (s *Server) deleteSecret(c echo.Context) error {
	org, name := c.Param("org"), c.Param("name")
	if err := s.maySecrets(c, org); err != nil {
		return err
	}
	if err := abi.CheckSecretName(name); err != nil {
		return problem(http.StatusBadRequest, string(abi.CodeInvalidArgument), "%v", err)
	}
	p := principalOf(c)
	if err := s.vault.Delete(c.Request().Context(), secrets.Actor{Via: "api", User: p.User, Org: p.Org}, org, name); err != nil {
		return secretError(err, org, name)
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) listSecrets(c echo.Context) error {
	org := c.Param("org")
	if err := s.maySecrets(c, org); err != nil {
		return err
	}
	list, err := s.vault.List(c.Request().Context(), org)
	if err != nil {
		return secretError(err, org, "")
	}
	out := make([]secretInfo, len(list))
	for i, x := range list {
		out[i] = secretInfo{Name: x.Name, CreatedAt: x.CreatedAt, CreatedBy: x.CreatedBy, UpdatedAt: x.UpdatedAt, UpdatedBy: x.UpdatedBy}
	}
	return c.JSON(http.StatusOK, map[string]any{"org": org, "secrets": out})
}
