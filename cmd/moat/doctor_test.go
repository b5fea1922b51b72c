package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctorStore: doctor --store reports the store's backend and which op
// families' storage it implements (all of them, on SQLite), in the table
// and in JSON beside the kernel layers; with --config, the families moat
// serve's configuration disables.
func TestDoctorStore(t *testing.T) {
	dir := t.TempDir()
	r := moat(t, "", "doctor", "--store", dir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, w := range []string{"store sqlite (" + dir + "/moat.db)", "  knowledge  ok\n", "  media      ok\n"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("doctor lacks %q:\n%s", w, r.stdout)
		}
	}
	r = moat(t, "", "doctor", "--store", dir, "--json")
	var v struct {
		Layers []any `json:"layers"`
		Store  struct {
			Backend  string `json:"backend"`
			Families []struct {
				Name      string `json:"name"`
				Supported bool   `json:"supported"`
			} `json:"families"`
		} `json:"store"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
		t.Fatalf("exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	if v.Store.Backend != "sqlite" || len(v.Store.Families) != 6 || len(v.Layers) == 0 {
		t.Errorf("json: %+v", v)
	}
	for _, f := range v.Store.Families {
		if !f.Supported {
			t.Errorf("sqlite lacks %s", f.Name)
		}
	}

	// With moat serve's configuration, the families it disables.
	cfg := filepath.Join(t.TempDir(), "moat-server.yaml")
	os.WriteFile(cfg, []byte("disable_families: [media, http]\n"), 0o644)
	r = moat(t, "", "doctor", "--store", dir, "--config", cfg)
	for _, w := range []string{"  media      disabled by the server's configuration (disable_families)\n", "  knowledge  ok\n",
		"op families disabled by the server's configuration: media, http"} {
		if r.code != 0 || !strings.Contains(r.stdout, w) {
			t.Errorf("doctor --config: exit %d, lacks %q:\n%s%s", r.code, w, r.stdout, r.stderr)
		}
	}
	os.WriteFile(cfg, []byte("disable_families: [htpp]\n"), 0o644)
	if r = moat(t, "", "doctor", "--config", cfg); r.code == 0 || !strings.Contains(r.stderr, `disable_families[0]: no op family "htpp"`) {
		t.Errorf("a family that does not exist: exit %d: %s", r.code, r.stderr)
	}
}
