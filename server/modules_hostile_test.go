package server_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// event is what a hostile case expects in the audit trail under its
// correlation id: kind/decision and a piece of the rule.
type event struct{ kind, decision, rule string }

// call is one request of a hostile case, with its correlation id.
type call struct {
	method, path, key string
	body              []byte
	ctype             string
}

// check sends c and asserts the exact status, problem code (and type), a
// piece of the detail, and that an audit event of want was recorded for
// the request (want.kind == "": none of kind load or decision was).
func (ts *testServer) check(t *testing.T, auditKey, id string, c call, status int, code, detail string, want event) response {
	t.Helper()
	h := []string{"X-Request-Id", id}
	if c.ctype != "" {
		h = append(h, "Content-Type", c.ctype)
	}
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	r := ts.do(t, c.method, c.path, c.key, body, h...)
	if r.status != status {
		t.Fatalf("%s %s: status %d, want %d: %s", c.method, c.path, r.status, status, r.body)
	}
	if code != "" {
		p := r.json(t)
		if p["code"] != code || p["type"] != "urn:moat:problem:"+code || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("problem = %v (%s), want code %s", p, r.header.Get("Content-Type"), code)
		}
		if d, _ := p["detail"].(string); !strings.Contains(d, detail) {
			t.Errorf("detail %q does not say %q", d, detail)
		}
	}
	events := ts.auditEvents(t, auditKey, id)
	found := false
	for _, e := range events {
		k, d, rule := e["kind"], e["decision"], e["rule"]
		if want.kind == "" && (k == "load" || k == "decision") {
			t.Errorf("unexpected audit event %v", e)
		}
		if k == want.kind && d == want.decision && strings.Contains(fmt.Sprint(rule), want.rule) {
			found = true
		}
	}
	if want.kind != "" && !found {
		t.Errorf("no audit event %+v for %s among %v", want, id, events)
	}
	return r
}

func (ts *testServer) auditEvents(t *testing.T, key, id string) []map[string]any {
	t.Helper()
	r := ts.do(t, "GET", "/v1/audit?correlation_id="+id, key, nil)
	var out []map[string]any
	for _, e := range r.json(t)["events"].([]any) {
		out = append(out, e.(map[string]any))
	}
	return out
}

// variant is wasm with a custom section of n bytes appended: a valid
// module with another digest.
func variant(wasm []byte, n int) []byte {
	name := "moat-test"
	payload := append([]byte{byte(len(name))}, name...)
	payload = append(payload, bytes.Repeat([]byte{'v'}, n)...)
	out := append([]byte{}, wasm...)
	out = append(out, 0)
	out = binary.AppendUvarint(out, uint64(len(payload)))
	return append(out, payload...)
}

func multipartBytes(t *testing.T, parts map[string][]byte) ([]byte, string) {
	body, ct := multipartUpload(t, parts)
	b, _ := io.ReadAll(body)
	return b, ct
}

// TestModuleManagementRoles (class 1): uploading, replacing and deleting
// modules needs module.upload / module.delete, held by role admin unless
// the profile's role_permissions gives them to a role; every refusal is a
// 403 and a deny event, and changes nothing.
func TestModuleManagementRoles(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "deploy.yaml")
	os.WriteFile(prof, []byte("name: deploy\nrole_permissions:\n  deployer: [module.upload]\ndefault:\n  capabilities: {kv: true}\n"), 0o644)
	ts := start(t, "", func(c *server.Config) { c.Profiles = map[string]string{"lab": prof} })
	admin := ts.key(t, "acme", "ann", "admin")
	viewer := ts.key(t, "acme", "vic", "viewer")
	member := ts.key(t, "acme", "bob")
	other := ts.key(t, "globex", "eve", "admin")
	labAdmin := ts.key(t, "lab", "lia", "admin")
	deployer := ts.key(t, "lab", "dan", "deployer")
	wasm := helloWasm(t)
	adminOnly := renamed(t, "hello-admin", "    roles: [admin]\n")
	noRoles := renamed(t, "hello-admin", "")
	if r := ts.upload(t, admin, wasm, adminOnly); r.status != http.StatusCreated {
		t.Fatalf("setup: %d %s", r.status, r.body)
	}
	up := func(key string, mf []byte) call {
		b, ct := multipartBytes(t, map[string][]byte{"module": wasm, "manifest": mf})
		return call{"POST", "/v1/modules", key, b, ct}
	}
	defaultRule := "default: role admin holds module.upload"
	tests := []struct {
		name   string
		c      call
		audit  string // whose organization's trail holds the event
		status int
		code   string
		detail string
		ev     event
	}{
		{"viewer replaces an admin-only module with one without roles", up(viewer, noRoles), admin, 403, "denied",
			"vic@acme needs role admin for module.upload (its roles are [viewer])", event{"decision", "deny", defaultRule}},
		{"member without roles uploads", up(member, helloManifest(t)), admin, 403, "denied", "bob@acme needs role admin", event{"decision", "deny", defaultRule}},
		{"viewer uploads a bare module by ?name=", call{"POST", "/v1/modules?name=sneaky", viewer, wasm, "application/wasm"}, admin, 403, "denied",
			"needs role admin", event{"decision", "deny", defaultRule}},
		{"viewer deletes another member's module", call{"DELETE", "/v1/modules/hello-admin", viewer, nil, ""}, admin, 403, "denied",
			"vic@acme needs role admin for module.delete", event{"decision", "deny", "default: role admin holds module.delete"}},
		{"viewer deletes a module that does not exist: refused before the lookup", call{"DELETE", "/v1/modules/nosuch", viewer, nil, ""}, admin, 403, "denied",
			"module.delete", event{"decision", "deny", "module.delete"}},
		{"another organization's admin deletes it: not found", call{"DELETE", "/v1/modules/hello-admin", other, nil, ""}, other, 404, "not_found",
			`no module "hello-admin" in organization globex`, event{}},
		{"deployer uploads under role_permissions", up(deployer, helloManifest(t)), labAdmin, 201, "", "", event{"load", "allow", "api upload"}},
		{"admin is no longer implied once role_permissions names module.upload", up(labAdmin, helloManifest(t)), labAdmin, 403, "denied",
			"lia@lab needs permission module.upload, which none of its roles [admin] holds in profile deploy", event{"decision", "deny", "profile deploy: role_permissions module.upload"}},
		{"deployer deletes: module.delete is still the default's", call{"DELETE", "/v1/modules/hello-go", deployer, nil, ""}, labAdmin, 403, "denied",
			"dan@lab needs role admin for module.delete", event{"decision", "deny", "default: role admin holds module.delete"}},
		{"lab admin deletes", call{"DELETE", "/v1/modules/hello-go", labAdmin, nil, ""}, labAdmin, 204, "", "", event{"load", "allow", "api delete"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts.check(t, tt.audit, fmt.Sprintf("roles-%d", i), tt.c, tt.status, tt.code, tt.detail, tt.ev)
		})
	}
	// Nothing a refusal touched changed: hello-admin is still admin-only,
	// with its one version, and a member still cannot call it.
	r := ts.do(t, "GET", "/v1/modules/hello-admin/versions", admin, nil)
	if vs, _ := r.json(t)["versions"].([]any); len(vs) != 1 {
		t.Errorf("hello-admin versions after the refusals: %s", r.body)
	}
	if r := ts.do(t, "POST", "/v1/modules/hello-admin/actions/greet", viewer, strings.NewReader("x")); r.status != http.StatusForbidden {
		t.Errorf("viewer calls the admin-only action: %d %s", r.status, r.body)
	}
}

// TestConfirmationBinding (class 1): a confirmation runs only on the module
// it was requested on. Replacing the code, or only the manifest, between
// the 428 and the confirmation is a 409 confirmation_stale with a deny
// event, and the token is used up; an identical re-upload is the same
// module.
func TestConfirmationBinding(t *testing.T) {
	t.Parallel() // its own servers and data directories; the package's last minutes have a core to spare
	ts := start(t, "", nil)
	admin := ts.key(t, "acme", "ann", "admin")
	wasm := tinyWasm(t)
	confirmMf := tinyManifest("hello-confirm", "    confirm: true\n")
	tests := []struct {
		name   string
		swap   func(t *testing.T) // between the 428 and the confirmation
		status int
		code   string
		detail string
		ev     event
	}{
		{"code swapped", func(t *testing.T) { ts.upload(t, admin, variant(wasm, 7), confirmMf) }, 409, "confirmation_stale",
			"module hello-confirm changed since the confirmation was requested", event{"confirmation", "deny", "confirmation binding"}},
		{"manifest swapped, same code", func(t *testing.T) {
			ts.upload(t, admin, wasm, bytes.Replace(confirmMf, []byte("greeting: Hello"), []byte("greeting: Pwned"), 1))
		}, 409, "confirmation_stale", "the token is used up", event{"confirmation", "deny", "confirmation binding"}},
		{"deleted and put back with other code", func(t *testing.T) {
			ts.do(t, "DELETE", "/v1/modules/hello-confirm", admin, nil)
			ts.upload(t, admin, variant(wasm, 9), confirmMf)
		}, 409, "confirmation_stale", "changed since the confirmation", event{"confirmation", "deny", "confirmation binding"}},
		{"identical re-upload", func(t *testing.T) { ts.upload(t, admin, wasm, confirmMf) }, 200, "", "", event{"confirmation", "allow", "confirmation token"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := ts.upload(t, admin, wasm, confirmMf); r.status != http.StatusCreated {
				t.Fatalf("setup: %d %s", r.status, r.body)
			}
			r := ts.do(t, "POST", "/v1/modules/hello-confirm/actions/echo", admin, strings.NewReader("x"))
			conf, _ := r.json(t)["confirmation"].(map[string]any)
			if r.status != http.StatusPreconditionRequired || conf == nil {
				t.Fatalf("428: %d %s", r.status, r.body)
			}
			token := conf["token"].(string)
			tt.swap(t)
			id := fmt.Sprintf("bind-%d", i)
			ts.check(t, admin, id, call{"POST", "/v1/confirmations/" + token, admin, nil, ""}, tt.status, tt.code, tt.detail, tt.ev)
			// Used up either way.
			if r := ts.do(t, "POST", "/v1/confirmations/"+token, admin, nil); r.status != http.StatusNotFound {
				t.Errorf("second use: %d %s", r.status, r.body)
			}
		})
	}
}

// archive builds test archives.
type entry struct {
	name    string
	typ     byte // tar type; 0 regular
	body    []byte
	link    string
	zipMode os.FileMode
}

func tarOf(t *testing.T, gz bool, ents ...entry) []byte {
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Linkname: e.link, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if e.typ == tar.TypeXGlobalHeader {
			h = &tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "0123456789abcdef"}, Format: tar.FormatPAX}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write(e.body)
		}
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

func zipOf(t *testing.T, ents ...entry) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range ents {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.zipMode != 0 {
			h.SetMode(e.zipMode)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.body)
	}
	zw.Close()
	return buf.Bytes()
}

// zeros is a reader of n zero bytes.
type zeros int64

func (z *zeros) Read(p []byte) (int, error) {
	if *z <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), int64(*z))
	clear(p[:n])
	*z -= zeros(n)
	return int(n), nil
}

// bombTgz is a tar.gz of n zeros in entries of at most per bytes,
// streamed: the test holds only the compressed bytes.
func bombTgz(t *testing.T, n, per int64) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for i := 0; n > 0; i++ {
		size := min(n, per)
		n -= size
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("bomb/%d.wasm", i), Typeflag: tar.TypeReg, Mode: 0o644, Size: size})
		z := zeros(size)
		if _, err := io.Copy(tw, &z); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func bombZip(t *testing.T, n int64) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "bomb.wasm", Method: zip.Deflate})
	z := zeros(n)
	io.Copy(w, &z)
	zw.Close()
	return buf.Bytes()
}

// TestArchiveHostile (class 2): archives are read as streams under
// limits.archive (413 naming the limit), and only regular files and
// directories with relative names, each once, in sizes they declare, get
// through (400 naming the entry). Every refusal is a deny event.
func TestArchiveHostile(t *testing.T) {
	ts := start(t, "", func(c *server.Config) {
		c.Limits.Archive = server.ArchiveLimits{MaxBytes: 8 << 20, MaxEntries: 16, MaxEntryBytes: 4 << 20, MaxRatio: 100}
	})
	admin := ts.key(t, "acme", "ann", "admin")
	mf := helloManifest(t)
	wasm := helloWasm(t)
	three := bytes.Repeat([]byte("x"), 3<<20)
	many := make([]entry, 17)
	for i := range many {
		many[i] = entry{name: fmt.Sprintf("d/f%d", i)}
	}
	lying := zipOf(t, entry{name: "moat.yaml", body: mf})
	// The central directory's uncompressed size of the one entry, and
	// its local header's: claim 10 bytes less than it holds.
	if i := bytes.Index(lying, []byte("PK\x01\x02")); i > 0 {
		binary.LittleEndian.PutUint32(lying[i+24:], uint32(len(mf)-10))
	}
	binary.LittleEndian.PutUint32(lying[22:], uint32(len(mf)-10))
	zipDup := zipOf(t, entry{name: "p/moat.yaml", body: mf}, entry{name: "p/moat.yaml", body: []byte("name: evil\n")})
	tests := []struct {
		name   string
		ctype  string
		body   []byte
		status int
		code   string
		detail string
		rule   string
	}{
		{"tgz bomb in entries under the entry limit: ratio", "application/gzip", bombTgz(t, 64<<20, 3<<20), 413, "too_large",
			"the archive inflates to more than 100 times its", "limits.archive.max_ratio"},
		{"tgz bomb of one entry: its declared size", "application/gzip", bombTgz(t, 64<<20, 64<<20), 413, "too_large",
			`entry "bomb/0.wasm": declares 67108864 bytes; the limit is 4194304 (limits.archive.max_entry_bytes`, "limits.archive.max_entry_bytes"},
		{"zip bomb: declared size over one entry's limit", "application/zip", bombZip(t, 64<<20), 413, "too_large", `entry "bomb.wasm": declares 67108864 bytes; the limit is 4194304 (limits.archive.max_entry_bytes`, "limits.archive.max_entry_bytes"},
		{"tar entry declared over max_entry_bytes", "application/x-tar", tarOf(t, false, entry{name: "big", body: bytes.Repeat([]byte("y"), 5<<20)}), 413, "too_large", "limits.archive.max_entry_bytes", "limits.archive.max_entry_bytes"},
		{"tar over max_bytes in entries under the entry limit", "application/x-tar", tarOf(t, false, entry{name: "a", body: three}, entry{name: "b", body: three}, entry{name: "c", body: three}), 413, "too_large",
			"the archive inflates to more; the limit is 8388608 (limits.archive.max_bytes", "limits.archive.max_bytes"},
		{"tar with too many entries", "application/x-tar", tarOf(t, false, many...), 413, "too_large", "limits.archive.max_entries", "limits.archive.max_entries"},
		{"zip with too many entries", "application/zip", zipOf(t, many...), 413, "too_large", "its directory lists 17 entries; the limit is 16 (limits.archive.max_entries", "limits.archive.max_entries"},
		{"tar symlink", "application/gzip", tarOf(t, true, entry{name: "p/moat.yaml", typ: tar.TypeSymlink, link: "/etc/passwd"}), 400, "invalid_argument", `entry "p/moat.yaml": is a symbolic link (to "/etc/passwd")`, "archive"},
		{"tar hard link", "application/gzip", tarOf(t, true, entry{name: "p/x.wasm", typ: tar.TypeLink, link: "/var/lib/moat/moat.db"}), 400, "invalid_argument", "is a hard link", "archive"},
		{"tar char device", "application/x-tar", tarOf(t, false, entry{name: "p/zero", typ: tar.TypeChar}), 400, "invalid_argument", `entry "p/zero": is a character device`, "archive"},
		{"tar block device", "application/x-tar", tarOf(t, false, entry{name: "p/sda", typ: tar.TypeBlock}), 400, "invalid_argument", "is a device", "archive"},
		{"tar FIFO", "application/x-tar", tarOf(t, false, entry{name: "p/fifo", typ: tar.TypeFifo}), 400, "invalid_argument", "is a FIFO", "archive"},
		{"tar traversal", "application/gzip", tarOf(t, true, entry{name: "p/../../../etc/moat.yaml", body: mf}), 400, "invalid_argument", "climbs out of the archive", "archive"},
		{"tar absolute path", "application/gzip", tarOf(t, true, entry{name: "/etc/moat.yaml", body: mf}), 400, "invalid_argument", "is an absolute path", "archive"},
		{"tar duplicate entry", "application/gzip", tarOf(t, true, entry{name: "p/moat.yaml", body: mf}, entry{name: "p/./moat.yaml", body: []byte("name: evil\n")}), 400, "invalid_argument", "appears twice", "archive"},
		{"tar same base name in two directories", "application/gzip", tarOf(t, true, entry{name: "a/moat.yaml", body: mf}, entry{name: "b/moat.yaml", body: mf}), 400, "invalid_argument", "a second file named moat.yaml", "archive"},
		{"zip symlink", "application/zip", zipOf(t, entry{name: "p/moat.yaml", body: []byte("/etc/passwd"), zipMode: os.ModeSymlink | 0o777}), 400, "invalid_argument", "is a symbolic link", "archive"},
		{"zip traversal", "application/zip", zipOf(t, entry{name: "../moat.yaml", body: mf}), 400, "invalid_argument", "climbs out", "archive"},
		{"zip backslash traversal", "application/zip", zipOf(t, entry{name: `..\..\moat.yaml`, body: mf}), 400, "invalid_argument", "backslash", "archive"},
		{"zip duplicate names", "application/zip", zipDup, 400, "invalid_argument", "appears twice", "archive"},
		{"zip entry larger than it declares", "application/zip", lying, 400, "invalid_argument", "not the size its header declares", "archive"},
		{"gzip that is not", "application/gzip", []byte("\x1f\x8bnot really gzip"), 400, "invalid_argument", "not gzip", "archive"},
		// The manifest is decoded by the strict YAML decoder: an alias is
		// refused where it is written, not expanded; a tag is not decoded.
		{"manifest with an alias", "application/x-tar", tarOf(t, false, entry{name: "p/moat.yaml", body: []byte("name: hello-go\nversion: 0.1.0\nactions:\n  - &g {name: greet}\n  - *g\n")}, entry{name: "p/hello-go.wasm", body: wasm}),
			400, "invalid_argument", "archive: moat.yaml:5: actions[1]: YAML aliases (*g) are not supported (the anchor &g is at line 4)", "api upload"},
		{"manifest with a !!binary name", "application/x-tar", tarOf(t, false, entry{name: "p/moat.yaml", body: []byte("name: !!binary aGVsbG8tZ28=\nversion: 0.1.0\n")}, entry{name: "p/hello-go.wasm", body: wasm}),
			400, "invalid_argument", "archive: moat.yaml:1: name: YAML tags (!!binary) are not supported", "api upload"},
		{"manifest of two documents", "application/x-tar", tarOf(t, false, entry{name: "p/moat.yaml", body: append(append([]byte{}, mf...), "---\nname: evil\n"...)}, entry{name: "p/hello-go.wasm", body: wasm}),
			400, "invalid_argument", "a second YAML document starts here", "api upload"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts.check(t, admin, fmt.Sprintf("arc-%d", i), call{"POST", "/v1/modules", admin, tt.body, tt.ctype}, tt.status, tt.code, tt.detail, event{"load", "deny", tt.rule})
		})
	}
	// What git archive writes (a pax global header first) is an upload.
	gitArchive := tarOf(t, true, entry{typ: tar.TypeXGlobalHeader}, entry{name: "hello-go/", typ: tar.TypeDir}, entry{name: "hello-go/moat.yaml", body: mf}, entry{name: "hello-go/hello-go.wasm", body: wasm})
	ts.check(t, admin, "arc-git", call{"POST", "/v1/modules", admin, gitArchive, "application/gzip"}, 201, "", "", event{"load", "allow", "api upload"})
	if r := ts.do(t, "GET", "/v1/modules", admin, nil); len(r.json(t)["modules"].([]any)) != 1 {
		t.Errorf("modules after the hostile archives: %s", r.body)
	}
}

// TestArchiveBombDefaults: with the default limits, the 1 GiB archives of
// the report (a .tgz and a .zip of about 1 MiB) are refused after reading
// a bounded part of them.
func TestArchiveBombDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two 1 GiB bombs")
	}
	ts := start(t, "", nil)
	admin := ts.key(t, "acme", "ann", "admin")
	for _, b := range []struct {
		name, ctype, knob string
		body              []byte
	}{
		{"tgz of one entry", "application/gzip", "limits.archive.max_entry_bytes", bombTgz(t, 1<<30, 1<<30)},
		{"tgz of 32 MiB entries", "application/gzip", "limits.archive.max_ratio", bombTgz(t, 1<<30, 32<<20)},
		{"zip", "application/zip", "limits.archive.max_entry_bytes", bombZip(t, 1<<30)},
	} {
		id := fmt.Sprintf("bomb-%d", len(b.body))
		t.Run(b.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			ts.check(t, admin, id, call{"POST", "/v1/modules", admin, b.body, b.ctype}, 413, "too_large", b.knob, event{"load", "deny", b.knob})
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte %s holding 1 GiB: refused after %d MiB allocated", len(b.body), b.name, alloc>>20)
			if alloc > 300<<20 {
				t.Errorf("refusing the bomb allocated %d MiB", alloc>>20)
			}
		})
	}
}

// TestModuleQuotaServer (class 5): each module keeps its newest
// keep_per_module versions, older ones pruned (audited); an upload the
// organization's quota cannot hold even with every old version pruned is
// a 413 quota_exceeded naming the knob, audited, and changes nothing.
func TestModuleQuotaServer(t *testing.T) {
	t.Parallel() // its own servers and data directories; the package's last minutes have a core to spare
	wasm := tinyWasm(t)
	size := int64(len(wasm))
	ts := start(t, "", func(c *server.Config) {
		// Two versions (each a few bytes over size) fit; three do not.
		c.Limits.ModuleQuota = server.ModuleQuotaConfig{Bytes: policy.ByteSize(2*size + size/2), Versions: 100, KeepPerModule: 2}
	})
	byCount := start(t, "", func(c *server.Config) {
		c.Limits.ModuleQuota = server.ModuleQuotaConfig{Bytes: 1 << 30, Versions: 1, KeepPerModule: 5}
	})
	admin := ts.key(t, "acme", "ann", "admin")
	other := ts.key(t, "globex", "gus", "admin")
	counted := byCount.key(t, "acme", "ann", "admin")
	named := func(name string) []byte { return tinyManifest(name, "") }
	up := func(key string, w []byte, mf []byte) call {
		b, ct := multipartBytes(t, map[string][]byte{"module": w, "manifest": mf})
		return call{"POST", "/v1/modules", key, b, ct}
	}
	steps := []struct {
		name   string
		ts     *testServer
		c      call
		status int
		code   string
		detail string
		ev     event
	}{
		{"first version", ts, up(admin, variant(wasm, 1), named("a")), 201, "", "", event{"load", "allow", "api upload"}},
		{"second version", ts, up(admin, variant(wasm, 2), named("a")), 201, "", "", event{"load", "allow", "api upload"}},
		{"third version prunes the first (keep_per_module)", ts, up(admin, variant(wasm, 3), named("a")), 201, "", "", event{"load", "allow", "limits.module_quota"}},
		{"a second module prunes a's old version (bytes)", ts, up(admin, variant(wasm, 4), named("b")), 201, "", "", event{"load", "allow", "limits.module_quota"}},
		{"a third module: only current versions left, over bytes", ts, up(admin, variant(wasm, 5), named("c")), 413, "quota_exceeded",
			"organization acme would keep", event{"load", "deny", "limits.module_quota.bytes"}},
		{"another organization has its own quota", ts, up(other, variant(wasm, 5), named("c")), 201, "", "", event{"load", "allow", "api upload"}},
		{"versions: one module fits", byCount, up(counted, variant(wasm, 1), named("a")), 201, "", "", event{"load", "allow", "api upload"}},
		{"versions: a new version of it replaces the old", byCount, up(counted, variant(wasm, 2), named("a")), 201, "", "", event{"load", "allow", "limits.module_quota"}},
		{"versions: a second module does not fit", byCount, up(counted, variant(wasm, 3), named("b")), 413, "quota_exceeded",
			"limits.module_quota.versions is 1", event{"load", "deny", "limits.module_quota.versions"}},
	}
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.ts.check(t, st.c.key, fmt.Sprintf("quota-%d", i), st.c, st.status, st.code, st.detail, st.ev)
		})
	}
	for _, m := range []struct {
		name     string
		versions int
	}{{"a", 1}, {"b", 1}} {
		r := ts.do(t, "GET", "/v1/modules/"+m.name+"/versions", admin, nil)
		if vs, _ := r.json(t)["versions"].([]any); len(vs) != m.versions || vs[0].(map[string]any)["current"] != true {
			t.Errorf("versions of %s: %s; want %d, the first current", m.name, r.body, m.versions)
		}
	}
	if r := ts.do(t, "GET", "/v1/modules/c", admin, nil); r.status != http.StatusNotFound {
		t.Errorf("the refused module exists: %d", r.status)
	}
	// The bytes are in the store, not in files of the data directory:
	// the current versions' are there (a's and b's, and globex's c).
	if files, _ := filepath.Glob(filepath.Join(ts.dir, "modules", "*.wasm")); len(files) != 0 {
		t.Errorf("module files in the data directory: %v, want none (the bytes are in the store)", files)
	}
	for _, m := range []struct{ org, name string }{{"acme", "a"}, {"acme", "b"}, {"globex", "c"}} {
		vs, err := ts.Store().ModuleVersions(context.Background(), m.org, m.name)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := ts.Store().ModuleBlobGet(context.Background(), m.org, vs[0].Digest); err != nil || int64(len(b)) != vs[0].Size {
			t.Errorf("bytes of %s/%s: %d bytes, %v; want %d", m.org, m.name, len(b), err, vs[0].Size)
		}
	}
}

// TestProfileGrantsByModuleName (suspicion 12a, proven): a profile's
// modules.<name> grants go to whatever module has that name, and a module's
// name is chosen by its uploader, in any organization. Before the fix, a
// shared profile granting acme's "fetcher" HTTP gave globex's upload of a
// module named fetcher the same grant. Now a profile that grants by name
// may serve one organization only; per-organization profiles keep them
// apart.
func TestProfileGrantsByModuleName(t *testing.T) {
	dir := t.TempDir()
	byName := filepath.Join(dir, "acme.yaml")
	os.WriteFile(byName, []byte("name: acme\ndefault:\n  capabilities: {kv: true}\nmodules:\n  fetcher:\n    capabilities: {http: [https://api.example.com:443]}\n"), 0o644)
	for _, tt := range []struct {
		name   string
		edit   func(*server.Config)
		detail string
	}{
		{"the default profile grants by name", func(c *server.Config) { c.Profile = byName },
			"profile: profile " + byName + " grants by module name (modules: fetcher) and is the profile of every organization without one of its own"},
		{"two organizations share a profile that grants by name", func(c *server.Config) { c.Profiles = map[string]string{"acme": byName, "globex": byName} },
			"profiles.acme: profile " + byName + " grants by module name (modules: fetcher) and is shared by organizations acme, globex"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := server.DefaultConfig()
			cfg.DataDir, cfg.Listen, cfg.Logger = t.TempDir(), "127.0.0.1:0", quietLogger()
			tt.edit(&cfg)
			_, err := server.New(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tt.detail) {
				t.Fatalf("server.New: %v\nwant %q", err, tt.detail)
			}
		})
	}
	t.Run("per-organization profiles keep the grant to its organization", func(t *testing.T) {
		ts := start(t, "", func(c *server.Config) { c.Profiles = map[string]string{"acme": byName} })
		mf := []byte("name: fetcher\nversion: 1.0.0\nactions: [{name: greet}]\ncapabilities: {kv: true, http: [https://api.example.com:443]}\n")
		acme, globex := ts.key(t, "acme", "ann", "admin"), ts.key(t, "globex", "gus", "admin")
		b, ct := multipartBytes(t, map[string][]byte{"module": helloWasm(t), "manifest": mf})
		ts.check(t, globex, "grant-globex", call{"POST", "/v1/modules", globex, b, ct}, 403, "denied",
			"not granted by profile minimal", event{"load", "deny", "api upload"})
		ts.check(t, acme, "grant-acme", call{"POST", "/v1/modules", acme, b, ct}, 201, "", "", event{"load", "allow", "api upload"})
	})
}

// TestDeleteRacingUpload (suspicion 12b, proven): module files are shared
// by digest across organizations. Before the fix, a deletion in acme that
// landed while globex's upload of the same bytes was between writing the
// file and storing its version removed the file: globex's module worked
// until the next restart, then was gone. Now uploads pin their digest and
// files are written and removed under one lock.
func TestDeleteRacingUpload(t *testing.T) {
	dir := t.TempDir()
	ts := start(t, dir, nil)
	acme, globex := ts.key(t, "acme", "ann", "admin"), ts.key(t, "globex", "gus", "admin")
	wasm, mf := helloWasm(t), helloManifest(t)
	if r := ts.upload(t, acme, wasm, mf); r.status != http.StatusCreated {
		t.Fatalf("acme upload: %d %s", r.status, r.body)
	}
	parked, release := make(chan struct{}), make(chan struct{})
	server.SetBeforeCommit(ts.Server, func() {
		close(parked)
		<-release
	})
	done := make(chan response, 1)
	go func() { done <- ts.upload(t, globex, wasm, mf) }()
	<-parked
	server.SetBeforeCommit(ts.Server, nil)
	if r := ts.do(t, "DELETE", "/v1/modules/hello-go", acme, nil); r.status != http.StatusNoContent {
		t.Fatalf("acme delete: %d %s", r.status, r.body)
	}
	close(release)
	if r := <-done; r.status != http.StatusCreated {
		t.Fatalf("globex upload: %d %s", r.status, r.body)
	}
	ts.stop(t)
	ts2 := start(t, dir, nil)
	if r := ts2.do(t, "POST", "/v1/modules/hello-go/actions/greet", globex, strings.NewReader("G")); r.status != http.StatusOK {
		t.Errorf("globex's module after the racing delete and a restart: %d %s", r.status, r.body)
	}
}

// TestSignedRollback (suspicion 12c, proven; decided): a signed module's
// version must increase. Before, anyone who may upload put an old signed
// release back over its fix (both signatures are valid forever). Now it
// is a 409 rollback naming both versions, unless the operator sets
// modules.allow_signed_rollback.
func TestSignedRollback(t *testing.T) {
	t.Parallel() // its own servers and data directories; the package's last minutes have a core to spare
	pubFile, keyFile, err := policy.GenerateKey("")
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := policy.ParsePrivateKey(keyFile, "")
	pub, _ := policy.ParsePublicKey(string(pubFile))
	prof := filepath.Join(t.TempDir(), "signed.yaml")
	os.WriteFile(prof, []byte("name: signed\ntrusted_keys:\n  - name: rel\n    key: "+pub.String()+"\ndefault:\n  capabilities: {kv: true}\n"), 0o644)
	wasm := tinyWasm(t)
	signed := func(t *testing.T, version string, w []byte) ([]byte, string) {
		mf := bytes.Replace(tinyManifest("hello-go", ""), []byte("version: 0.1.0"), []byte("version: "+version), 1)
		sig, err := policy.Sign(priv, policy.Signed{Name: "hello-go", Module: w, Manifest: mf})
		if err != nil {
			t.Fatal(err)
		}
		return multipartBytes(t, map[string][]byte{"module": w, "manifest": mf, "signature": sig})
	}
	for _, tt := range []struct {
		name          string
		allow         bool
		first, second string
		sameBytes     bool
		status        int
		code, detail  string
		ev            event
	}{
		{"older signed version", false, "2.0.0", "1.0.0", false, 409, "rollback",
			"module hello-go is at version 2.0.0 signed by rel", event{"load", "deny", "modules.allow_signed_rollback"}},
		{"old signed bytes re-uploaded", false, "2.0.0", "1.0.0", true, 409, "rollback", "a signed module's version must increase", event{"load", "deny", "modules.allow_signed_rollback"}},
		{"same version, other bytes", false, "2.0.0", "2.0.0", false, 409, "rollback", "this upload is version 2.0.0", event{"load", "deny", "modules.allow_signed_rollback"}},
		{"prerelease of the current release", false, "2.0.0", "2.0.0-rc.1", false, 409, "rollback", "version 2.0.0-rc.1", event{"load", "deny", "modules.allow_signed_rollback"}},
		{"10.0.0 after 9.0.0 (numeric, not text, order)", false, "9.0.0", "10.0.0", false, 201, "", "", event{"load", "allow", "api upload"}},
		{"the current version again", false, "2.0.0", "2.0.0", true, 201, "", "", event{"load", "allow", "api upload"}},
		{"leading zeros are their value (010.0.0 after 9.0.0)", false, "9.0.0", "010.0.0", false, 201, "", "", event{"load", "allow", "api upload"}},
		{"a version package semver cannot order sorts first", false, "2.0.0", "3.0.0-rc..1", false, 409, "rollback", "version 3.0.0-rc..1", event{"load", "deny", "modules.allow_signed_rollback"}},
		{"release after its prerelease", false, "2.0.0-rc.2", "2.0.0", false, 201, "", "", event{"load", "allow", "api upload"}},
		{"rc.10 after rc.9", false, "2.0.0-rc.9", "2.0.0-rc.10", false, 201, "", "", event{"load", "allow", "api upload"}},
		{"operator allows rollback", true, "2.0.0", "1.0.0", false, 201, "", "", event{"load", "allow", "api upload"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := start(t, "", func(c *server.Config) { c.Profile = prof; c.Modules.AllowSignedRollback = tt.allow })
			admin := ts.key(t, "acme", "ann", "admin")
			w1, w2 := variant(wasm, 1), variant(wasm, 2)
			if tt.sameBytes {
				w2 = w1
			}
			if tt.sameBytes && tt.first != tt.second {
				// The old release first, then the new one, then the old
				// bytes again.
				b, ct := signed(t, tt.second, w1)
				if r := ts.do(t, "POST", "/v1/modules", admin, bytes.NewReader(b), "Content-Type", ct); r.status != 201 {
					t.Fatalf("setup: %d %s", r.status, r.body)
				}
				w1 = variant(wasm, 3)
			}
			b, ct := signed(t, tt.first, w1)
			if r := ts.do(t, "POST", "/v1/modules", admin, bytes.NewReader(b), "Content-Type", ct); r.status != 201 {
				t.Fatalf("setup: %d %s", r.status, r.body)
			}
			b, ct = signed(t, tt.second, w2)
			ts.check(t, admin, "rollback", call{"POST", "/v1/modules", admin, b, ct}, tt.status, tt.code, tt.detail, tt.ev)
			r := ts.do(t, "GET", "/v1/modules/hello-go", admin, nil)
			want := tt.first
			if tt.status == 201 {
				want = tt.second
			}
			if v := r.json(t)["version"]; v != want {
				t.Errorf("current version %v, want %s", v, want)
			}
		})
	}
}
