package server

import (
	"errors"
	"net/http"
	"regexp"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/store"
)

// The restore route rolls a module back (or forward) to a version the
// store still holds:
//
//	POST /v1/modules/{name}/versions/{digest}/restore
//
// The version is put through everything an upload goes through — its
// load (signature, policy), the signed-rollback rule
// (modules.allow_signed_rollback), the quota — from the bytes, manifest
// and signature stored with it, so a restore can make current nothing an
// upload of the same files could not. It takes PermModuleUpload and is
// audited as api restore.

var digestPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Server) restoreVersion(c echo.Context) error {
	name, digest := c.Param("name"), c.Param("digest")
	if err := s.mayManage(c, PermModuleUpload, name); err != nil {
		return err
	}
	p := principalOf(c)
	if host.ValidateModuleName(name) != nil || !digestPattern.MatchString(digest) {
		return problem(http.StatusNotFound, "not_found", "no version %.64q of module %.64q in organization %s; GET /v1/modules/{name}/versions lists them", digest, name, p.Org)
	}
	ctx := c.Request().Context()
	vs, err := s.store.ModuleVersions(ctx, p.Org, name)
	if err != nil && !errors.Is(err, store.ErrModuleNotFound) {
		return err
	}
	var found *store.ModuleVersion
	for i := range vs {
		if vs[i].Digest == digest {
			found = &vs[i]
		}
	}
	if found == nil {
		return problem(http.StatusNotFound, "not_found", "no version %s of module %s in organization %s; GET /v1/modules/%s/versions lists them", digest, name, p.Org, name)
	}
	if found.Current {
		return c.JSON(http.StatusOK, describeModule(s.modules.get(p.Org, name)))
	}
	wasm, err := s.store.ModuleBlobGet(ctx, p.Org, digest)
	if errors.Is(err, store.ErrModuleNotFound) {
		return problem(http.StatusNotFound, "not_found", "the bytes of version %s of module %s are gone; upload it again", digest[:12], name)
	}
	if err != nil {
		return err
	}
	return s.storeVersion(c, &upload{name: name, wasm: wasm, manifest: found.Manifest, signature: found.Signature}, "restore", http.StatusOK)
}
