package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// scriptArchive packs examples/<dir> (and extra files) as a tar.gz with
// the directory as its top folder, as `tar czf` of a plugin directory.
func scriptArchive(t testing.TB, dir string, extra map[string][]byte) *bytes.Buffer {
	t.Helper()
	root := filepath.Join(testwasm.RepoRoot(t), "examples", dir)
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(root, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	for k, v := range extra {
		files[k] = v
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, b := range files {
		tw.WriteHeader(&tar.Header{Name: dir + "/" + name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
	}
	tw.Close()
	zw.Close()
	return &buf
}

// TestUploadScriptPlugin: an interpreted plugin (hello-js) uploaded as an
// archive of its directory serves its action over HTTP with its kv, keeps
// serving after a restart, and leaves no files behind when deleted; a
// signature or a multipart upload without an archive is refused with
// the reason.
func TestUploadScriptPlugin(t *testing.T) {
	dir := t.TempDir()
	ts := start(t, dir, nil)
	key := ts.key(t, "acme", "ann", "admin")

	r := ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, "hello-js", nil), "Content-Type", "application/gzip")
	if r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	mod := r.json(t)
	digest, _ := mod["digest"].(string)
	if mod["kind"] != "script" || !strings.Contains(string(r.body), `"name":"greet"`) {
		t.Errorf("uploaded module = %s, want kind script with the greet action", r.body)
	}
	for i, want := range []string{"Hello, World! (call #1)", "Hello, World! (call #2)"} {
		r = ts.do(t, "POST", "/v1/modules/hello-js/actions/greet", key, strings.NewReader("World"))
		if r.status != http.StatusOK || string(r.body) != want {
			t.Fatalf("call %d: %d %q, want %q", i+1, r.status, r.body, want)
		}
	}
	// The same sources again: the same digest, one version.
	if r = ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, "hello-js", nil), "Content-Type", "application/gzip"); r.status != http.StatusCreated || r.json(t)["digest"] != digest {
		t.Errorf("re-upload: %d %s, want digest %s", r.status, r.body, digest)
	}

	if r = ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, "hello-js", map[string][]byte{"hello-js.minisig": []byte("untrusted comment: x\n")}),
		"Content-Type", "application/gzip"); r.status == http.StatusCreated || !strings.Contains(string(r.body), "signature") {
		t.Errorf("a malformed signature: %d %s, want a refusal naming the signature", r.status, r.body)
	}
	manifest, _ := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "examples", "hello-js", "moat.yaml"))
	body, ct := multipartUpload(t, map[string][]byte{"manifest": manifest})
	if r = ts.do(t, "POST", "/v1/modules", key, body, "Content-Type", ct); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "archive of its directory") {
		t.Errorf("multipart without sources: %d %s, want 400 asking for an archive", r.status, r.body)
	}

	ts.stop(t)
	ts2 := start(t, dir, nil)
	if r = ts2.do(t, "POST", "/v1/modules/hello-js/actions/greet", key, strings.NewReader("World")); string(r.body) != "Hello, World! (call #3)" {
		t.Errorf("after restart: %d %q", r.status, r.body)
	}
	if r = ts2.do(t, "DELETE", "/v1/modules/hello-js", key, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "modules", digest+"*"))
	if len(left) > 0 {
		t.Errorf("files left after delete: %v", left)
	}
}

// TestUploadSignedScriptPlugin: under a profile that requires signatures,
// an interpreted plugin signed over its sources (as `moat sign DIR` signs
// them: languages.PackSources) uploads and runs; with one source byte
// changed, the upload is refused.
func TestUploadSignedScriptPlugin(t *testing.T) {
	pubFile, keyFile, err := policy.GenerateKey("")
	if err != nil {
		t.Fatal(err)
	}
	priv, err := policy.ParsePrivateKey(keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := policy.ParsePublicKey(string(pubFile))
	if err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(t.TempDir(), "signed.yaml")
	os.WriteFile(profile, []byte("name: signed\nrequire_signature: true\ntrusted_keys:\n  - name: rel\n    key: "+pub.String()+
		"\ndefault:\n  capabilities: {kv: true}\n  limits: {memory: 64MiB, timeout: 10s}\n"), 0o644)
	ts := start(t, "", func(c *server.Config) { c.Profile = profile })
	key := ts.key(t, "acme", "ann", "admin")

	root := filepath.Join(testwasm.RepoRoot(t), "examples", "hello-js")
	manifest, _ := os.ReadFile(filepath.Join(root, "moat.yaml"))
	script, _ := os.ReadFile(filepath.Join(root, "main.js"))
	sign := func(main []byte) []byte {
		l, _ := languages.Lookup("javascript")
		src, err := languages.PluginSource(l, map[string][]byte{"main.js": main})
		if err != nil {
			t.Fatal(err)
		}
		sig, err := policy.Sign(priv, policy.Signed{Name: "hello-js", Module: languages.PackSources(src), Manifest: manifest})
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	if r := ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, "hello-js", nil), "Content-Type", "application/gzip"); r.status == http.StatusCreated || !strings.Contains(string(r.body), "unsigned") {
		t.Errorf("unsigned under require_signature: %d %s", r.status, r.body)
	}
	r := ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, "hello-js", map[string][]byte{"hello-js.minisig": sign(script)}), "Content-Type", "application/gzip")
	if r.status != http.StatusCreated || r.json(t)["mode"] != "trusted" {
		t.Fatalf("signed upload: %d %s, want 201 in trusted mode", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/modules/hello-js/actions/greet", key, strings.NewReader("World")); string(r.body) != "Hello, World! (call #1)" {
		t.Errorf("signed plugin: %d %q", r.status, r.body)
	}
	tampered := bytes.Replace(script, []byte("call #"), []byte("Call #"), 1)
	sig := sign(script) // signed before the change
	r = ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, "hello-js", map[string][]byte{"main.js": tampered, "hello-js.minisig": sig}), "Content-Type", "application/gzip")
	if r.status == http.StatusCreated || !strings.Contains(string(r.body), "changed since signing") {
		t.Errorf("tampered source: %d %s, want a refusal", r.status, r.body)
	}
}
