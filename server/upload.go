package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// upload is what a client sent: the module bytes and, optionally, the
// manifest and the signature.
type upload struct {
	name      string
	wasm      []byte
	manifest  []byte
	signature []byte
}

// uploadModule takes a module as multipart/form-data (parts module,
// manifest, signature, name), as one archive (tar, tar.gz or zip holding
// moat.yaml, the .wasm and its .minisig), or as a bare application/wasm
// body with ?name=. Only a holder of PermModuleUpload may; the module is
// loaded with every check before it is stored, so a refused upload
// changes nothing; storing it keeps the organization within
// limits.module_quota, pruning old versions (store.ModuleQuota).
func (s *Server) uploadModule(c echo.Context) error {
	if err := s.mayManage(c, PermModuleUpload, c.QueryParam("name")); err != nil {
		return err
	}
	limit := int64(s.cfg.Limits.MaxModuleBytes)
	body, err := readBody(c, limit, "limits.max_module_bytes")
	if err != nil {
		return err
	}
	up, err := parseUpload(c.Request().Header.Get(echo.HeaderContentType), body, s.cfg.Limits.Archive)
	if err != nil {
		s.auditModule(c, store.ModuleVersion{Name: c.QueryParam("name")}, "upload", err)
		var re *refusal
		if errors.As(err, &re) {
			return re.p
		}
		return err
	}
	if up.name == "" {
		up.name = c.QueryParam("name")
	}
	return s.storeVersion(c, up, "upload", http.StatusCreated)
}

// storeVersion loads the module up holds, checks it as every upload is
// checked (manifest, signature, policy, rollback, quota), stores it as a
// version and makes it current, answering status: an upload's, and a
// restore of a stored version's (modules_restore.go), audited as op.
func (s *Server) storeVersion(c echo.Context, up *upload, op string, status int) error {
	p := principalOf(c)
	ctx := c.Request().Context()
	v := store.ModuleVersion{Org: p.Org, Name: up.name, Digest: host.Digest(up.wasm), Size: int64(len(up.wasm)),
		Manifest: up.manifest, Signature: up.signature, UploadedBy: p.User, UploadedAt: time.Now().UTC()}
	if up.manifest != nil {
		mf, err := policy.ParseManifest("moat.yaml", up.manifest)
		if err != nil {
			return problem(http.StatusBadRequest, "invalid_argument", "manifest: %v", err)
		}
		if v.Name != "" && v.Name != mf.Name {
			return problem(http.StatusBadRequest, "invalid_argument", "the manifest names the module %q but the upload names it %q; drop name or make them agree", mf.Name, v.Name)
		}
		v.Name, v.Version = mf.Name, mf.Version
	}
	if v.Name == "" {
		return problem(http.StatusBadRequest, "invalid_argument", "the module has no name: upload its moat.yaml as the manifest part, or give a name part or ?name=")
	}
	if err := host.ValidateModuleName(v.Name); err != nil {
		return problem(http.StatusBadRequest, "invalid_argument", "%v", err)
	}
	// The digest's files stay until this upload is stored or refused,
	// whatever another organization deletes meanwhile.
	defer s.modules.pin(v.Digest)()
	m, err := s.modules.load(ctx, v, up.wasm, correlationID(c))
	if err != nil {
		s.auditModule(c, v, op, err)
		var fe *policy.FileError
		if errors.As(err, &fe) {
			return problem(http.StatusBadRequest, "invalid_argument", "manifest: %v", err)
		}
		return fromHostError(err)
	}
	if hook := s.modules.beforeCommit; hook != nil {
		hook()
	}
	// The rollback check compares with the loaded current version: load
	// it first when it was uploaded through another replica (outside
	// commit, which its load takes).
	if !s.cfg.Modules.AllowSignedRollback {
		if _, err := s.modules.ensure(ctx, v.Org, v.Name); err != nil {
			m.Close(ctx)
			return s.moduleProblem(v.Org, v.Name, correlationID(c), nil, err)
		}
	}
	s.modules.commit.Lock()
	pruned, err := s.commitUpload(ctx, m, &v, up.wasm)
	s.modules.commit.Unlock()
	if err != nil {
		m.Close(ctx)
		var re *refusal
		if errors.As(err, &re) {
			s.auditModule(c, v, op, err)
			return re.p
		}
		return err
	}
	s.auditModule(c, v, op, nil)
	for _, pv := range pruned {
		s.audit.Record(ctx, audit.Event{Kind: audit.KindLoad, Decision: audit.Allow, CorrelationID: correlationID(c),
			Module: pv.Name, User: p.User, Org: p.Org, Rule: "limits.module_quota",
			Reason: fmt.Sprintf("pruned version %s (%s, %d bytes, uploaded %s by %s) to keep organization %s within its module quota",
				pv.Digest[:12], orNone(pv.Version), pv.Size, pv.UploadedAt.Format(time.RFC3339), pv.UploadedBy, p.Org),
			Attrs: map[string]string{"api": "prune", "digest": pv.Digest}})
	}
	s.metrics.uploads.Inc()
	c.Response().Header().Set(echo.HeaderLocation, "/v1/modules/"+v.Name)
	return c.JSON(status, describeModule(s.modules.get(p.Org, v.Name)))
}

// commitUpload stores a loaded version and makes it current; the caller
// holds commit. It refuses a signed version older than the signed current
// one (modules.allow_signed_rollback), and a version the organization's
// quota cannot hold even after pruning; it returns the versions pruned.
func (s *Server) commitUpload(ctx context.Context, m *host.Module, v *store.ModuleVersion, wasm []byte) ([]store.ModuleVersion, error) {
	if !s.cfg.Modules.AllowSignedRollback {
		cur := s.modules.get(v.Org, v.Name)
		// What the store says is current, not only what this replica
		// has loaded: a version stored through another replica since
		// (not loaded here yet) would otherwise escape the check.
		stored, err := s.modules.current(ctx, v.Org, v.Name)
		if err != nil {
			return nil, err
		}
		if stored != nil && (cur == nil || !sameCode(cur.version, *stored)) {
			return nil, &refusal{rule: "modules.allow_signed_rollback", p: &Problem{Type: ProblemType("unavailable"), Title: http.StatusText(http.StatusServiceUnavailable),
				Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 2,
				Detail: fmt.Sprintf("module %s was changed through another replica during this upload and is not loaded here yet; retry the upload", v.Name)}}
		}
		if cur != nil {
			if err := checkRollback(cur, m, *v); err != nil {
				return nil, err
			}
		}
	}
	// The bytes before the version that refers to them (store.BlobGrace
	// keeps them from the sweep meanwhile).
	if err := s.store.ModuleBlobPut(ctx, v.Digest, wasm); err != nil {
		return nil, fmt.Errorf("store module %s: %w", v.Digest, err)
	}
	q := s.cfg.Limits.ModuleQuota
	pruned, err := s.store.ModulePut(ctx, *v, store.ModuleQuota{Bytes: int64(q.Bytes), Versions: q.Versions, KeepPerModule: q.KeepPerModule})
	var qe *store.QuotaError
	if errors.As(err, &qe) {
		knob := "limits.module_quota." + qe.Limit
		// The file may have been written for this upload alone: take it
		// back unless a stored version refers to it.
		if n, err := s.store.ModuleDigestRefs(ctx, v.Digest); err == nil && n == 0 {
			s.modules.removeOrphans([]string{v.Digest}, v.Digest)
		}
		return nil, &refusal{rule: knob, p: problem(http.StatusRequestEntityTooLarge, "quota_exceeded",
			"%v: %s is %d; delete modules (DELETE /v1/modules/{name}) or ask the operator to raise %s", qe, knob, qe.Max, knob)}
	}
	if err != nil {
		return nil, err
	}
	// A prune or deletion through another replica that orphaned these
	// same bytes between the two calls took their blob (store.BlobGrace):
	// store it again, and the version again, so that the replicas that
	// found it missing load it at the change.
	if _, err := s.store.ModuleBlobGet(ctx, v.Org, v.Digest); errors.Is(err, store.ErrModuleNotFound) {
		s.log.Warn("module upload: its bytes were removed by a racing prune or deletion of the same bytes; storing them again", "org", v.Org, "module", v.Name, "digest", v.Digest)
		if err := s.store.ModuleBlobPut(ctx, v.Digest, wasm); err != nil {
			return nil, fmt.Errorf("store module %s: %w", v.Digest, err)
		}
		more, err := s.store.ModulePut(ctx, *v, store.ModuleQuota{Bytes: int64(q.Bytes), Versions: q.Versions, KeepPerModule: q.KeepPerModule})
		if err != nil {
			return nil, err
		}
		pruned.Versions = append(pruned.Versions, more.Versions...)
		pruned.Orphans = append(pruned.Orphans, more.Orphans...)
	} else if err != nil {
		return nil, err
	}
	v.Current = true
	s.modules.put(ctx, m, *v)
	s.modules.removeOrphans(pruned.Orphans, "")
	return pruned.Versions, nil
}

// checkRollback refuses replacing a module whose current version is signed
// by a trusted key with a trusted-signed version that is not newer: a
// signed release stays valid forever, so without this anyone who may
// upload could put back an old signed version with a known hole over its
// fix. Re-uploading the current version itself (same bytes and version) is
// not a rollback.
func checkRollback(cur *entry, m *host.Module, v store.ModuleVersion) error {
	curSigner, newSigner := cur.mod.Info().Signer, m.Info().Signer
	if curSigner == "" || newSigner == "" {
		return nil
	}
	if cur.version.Digest == v.Digest && cur.version.Version == v.Version {
		return nil
	}
	if policy.CompareVersions(v.Version, cur.version.Version) > 0 {
		return nil
	}
	return &refusal{rule: "modules.allow_signed_rollback", p: problem(http.StatusConflict, "rollback",
		"module %s is at version %s signed by %s (digest %s); this upload is version %s signed by %s (digest %s): a signed module's version must increase, "+
			"so that an old signed release cannot be put back over its fix; upload a higher version, delete the module first, or set modules.allow_signed_rollback: true in the server config",
		v.Name, orDash(cur.version.Version), curSigner, cur.version.Digest[:12], orDash(v.Version), newSigner, v.Digest[:12])}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func parseUpload(contentType string, body []byte, lim ArchiveLimits) (*upload, error) {
	mt, params, _ := mime.ParseMediaType(contentType)
	bad := func(format string, args ...any) (*upload, error) {
		return nil, problem(http.StatusBadRequest, "invalid_argument", format, args...)
	}
	up := &upload{}
	switch mt {
	case "multipart/form-data":
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return bad("multipart body: %v", err)
			}
			data, err := io.ReadAll(part)
			if err != nil {
				return bad("multipart part %s: %v", part.FormName(), err)
			}
			switch part.FormName() {
			case "module":
				up.wasm = data
			case "manifest":
				up.manifest = data
			case "signature":
				up.signature = data
			case "name":
				up.name = strings.TrimSpace(string(data))
			default:
				return bad("unknown part %q; the parts are module, manifest, signature and name", part.FormName())
			}
		}
	case "application/wasm", "application/octet-stream":
		up.wasm = body
	case "application/x-tar", "application/tar", "application/gzip", "application/x-gzip", "application/zip":
		files, err := unpack(mt, body, lim)
		if err != nil {
			return nil, &refusal{p: archiveProblem(err), rule: archiveRule(err)}
		}
		// The plugin among the files, found as moat run finds it in
		// its directory (package bundle decides its kind).
		b, err := bundle.FromArchive(files)
		if err != nil {
			return bad("archive: %v", err)
		}
		up = &upload{wasm: b.Signed, manifest: b.ManifestBytes, signature: b.Signature}
		if b.Manifest == nil {
			up.name = b.Name
		}
		return up, nil
	default:
		return bad("Content-Type %q: send multipart/form-data (parts module, manifest, signature), an archive (application/x-tar, application/gzip or application/zip) or application/wasm", contentType)
	}
	if len(up.wasm) == 0 {
		if mf, err := policy.ParseManifest(policy.ManifestFile, up.manifest); err == nil && bundle.KindOf(mf, false) != bundle.Wasm {
			return bad("no module: an interpreted or native plugin is uploaded as an archive of its directory (moat.yaml and its sources; application/x-tar, application/gzip or application/zip)")
		}
		return bad("no module: send the .wasm file as the module part")
	}
	return up, nil
}
