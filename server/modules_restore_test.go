package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// withCustomSection is wasm with a custom section appended: another
// digest, the same module.
func withCustomSection(wasm []byte, name string) []byte {
	body := append([]byte{byte(len(name))}, name...)
	return append(append(append([]byte{}, wasm...), 0, byte(len(body))), body...)
}

// TestModuleRestore: a stored version is made current again through the
// restore route, checked as an upload is; a caller without the upload
// permission, an unknown digest, another organization's module and a
// malformed digest are refused.
func TestModuleRestore(t *testing.T) {
	ts := start(t, "", nil)
	admin := ts.key(t, "acme", "ann", "admin")
	dev := ts.key(t, "acme", "dan", "dev")
	other := ts.key(t, "globex", "gil", "admin")
	digests := []string{}
	for i, wasm := range [][]byte{tinyWasm(t), withCustomSection(tinyWasm(t), "v2")} {
		r := ts.upload(t, admin, wasm, tinyManifest("flip", ""))
		var m struct{ Digest string }
		if r.status != http.StatusCreated || json.Unmarshal(r.body, &m) != nil {
			t.Fatalf("upload %d: %d %s", i, r.status, r.body)
		}
		digests = append(digests, m.Digest)
	}
	if digests[0] == digests[1] {
		t.Fatal("the two versions have one digest")
	}
	current := func() string {
		var m struct{ Digest string }
		json.Unmarshal(ts.do(t, "GET", "/v1/modules/flip", admin, nil).body, &m)
		return m.Digest
	}
	if current() != digests[1] {
		t.Fatal("the second upload is not current")
	}
	for _, tt := range []struct {
		name, key, path string
		status          int
	}{
		{"without the permission", dev, "/v1/modules/flip/versions/" + digests[0] + "/restore", 403},
		{"another organization", other, "/v1/modules/flip/versions/" + digests[0] + "/restore", 404},
		{"unknown digest", admin, "/v1/modules/flip/versions/" + strings.Repeat("0", 64) + "/restore", 404},
		{"malformed digest", admin, "/v1/modules/flip/versions/..%2f..%2fetc/restore", 404},
		{"unknown module", admin, "/v1/modules/nope/versions/" + digests[0] + "/restore", 404},
	} {
		if r := ts.do(t, "POST", tt.path, tt.key, nil); r.status != tt.status {
			t.Errorf("%s: %d %s; want %d", tt.name, r.status, r.body, tt.status)
		}
	}
	if current() != digests[1] {
		t.Fatal("a refused restore changed the module")
	}
	if r := ts.do(t, "POST", "/v1/modules/flip/versions/"+digests[0]+"/restore", admin, nil); r.status != 200 {
		t.Fatalf("restore: %d %s", r.status, r.body)
	}
	if current() != digests[0] {
		t.Error("the restored version is not current")
	}
	if r := ts.do(t, "POST", "/v1/modules/flip/actions/echo", admin, strings.NewReader(`{}`)); r.status != 200 {
		t.Errorf("invoking the restored version: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/v1/audit?module=flip&limit=50", admin, nil); !strings.Contains(string(r.body), `"rule":"api restore"`) {
		t.Errorf("the restore is not audited: %s", r.body)
	}
}
