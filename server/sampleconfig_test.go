package server_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/server"
	"gopkg.in/yaml.v3"
)

// TestSampleConfig: the sample moat serve --print-config writes loads as
// is and configures exactly the defaults, so the values it shows are true;
// each commented setting, uncommented, is a key the loader knows.
func TestSampleConfig(t *testing.T) {
	got, err := server.ParseConfig("moat-server.yaml", server.SampleConfig)
	if err != nil {
		t.Fatalf("the sample does not load: %v", err)
	}
	want := server.DefaultConfig()
	got.File = ""
	g, _ := yaml.Marshal(got)
	w, _ := yaml.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("the sample configures other than the defaults:\n--- sample\n%s\n--- defaults\n%s", g, w)
	}
	// Uncommented, the commented settings still load (with the files they
	// name missing, which only the server checks at start): each key is
	// one the loader knows. Sections are uncommented whole.
	commented := regexp.MustCompile(`(?m)^( *)# ( *[a-z_]+:.*)$`)
	on := commented.ReplaceAll(server.SampleConfig, []byte("$1$2"))
	if bytes.Equal(on, server.SampleConfig) {
		t.Fatal("the sample has no commented settings")
	}
	c, err := server.ParseConfig("moat-server.yaml", on)
	if err != nil && !strings.Contains(err.Error(), "no such file") {
		t.Errorf("the sample with its commented settings on does not load: %v\n%s", err, on)
	}
	if err == nil && (c.TLS.Cert == "" || c.Admission.MaxInvocations != 16 || len(c.HTTP.AllowedHosts) != 1) {
		t.Errorf("the commented settings were not uncommented:\n%s", on)
	}
}
