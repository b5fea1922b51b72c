package policy_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/hostile"
	"github.com/moat-sandbox/moat/policy"
)

// maxValues is internal/yamlstrict.MaxValues.
const maxValues = 100_000

// TestStrictYAMLHostile: manifests and profiles refuse each hostile
// document the same way, at its line and field, without expanding
// anything (an alias is refused where it is written).
func TestStrictYAMLHostile(t *testing.T) {
	kinds := []struct {
		file  string
		f     hostile.YAMLFile
		parse func(string, []byte) (any, error)
	}{
		{"moat.yaml", hostile.YAMLFile{Head: "name: a\nversion: 1.0.0\n", Str: "language", List: "capabilities.db", Open: "capabilities: {db: ", Close: "}"},
			func(f string, b []byte) (any, error) { return policy.ParseManifest(f, b) }},
		{"profile.yaml", hostile.YAMLFile{Head: "name: p\n", Str: "on_ungranted", List: "sensitive_ops", Open: "sensitive_ops: "},
			func(f string, b []byte) (any, error) { return policy.ParseProfile(f, b) }},
	}
	for _, k := range kinds {
		for _, tt := range hostile.YAMLDocuments(k.f, policy.MaxFileSize, maxValues) {
			t.Run(k.file+"/"+tt.Name, func(t *testing.T) {
				v, err := k.parse(k.file, []byte(tt.Doc))
				CheckStrictYAMLError(t, v, err, k.file, tt)
			})
		}
	}
}

// CheckStrictYAMLError checks that err is the refusal tt owes and that
// nothing was decoded.
func CheckStrictYAMLError(t *testing.T, v any, err error, file string, tt hostile.YAMLCase) {
	t.Helper()
	var fe *policy.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("got %v (%T), want a *policy.FileError", err, err)
	}
	if fe.File != file || fe.Line != tt.Line || tt.Field != "?" && fe.Field != tt.Field {
		t.Errorf("got %s:%d field %q, want %s:%d field %q (%v)", fe.File, fe.Line, fe.Field, file, tt.Line, tt.Field, err)
	}
	if !strings.Contains(fe.Msg, tt.Msg) || strings.Contains(err.Error(), "\n") {
		t.Errorf("got %q, want it to contain %q, on one line", fe.Msg, tt.Msg)
	}
	if s := fmt.Sprint(v); v != nil && s != "<nil>" {
		t.Errorf("decoded %s despite the refusal", s)
	}
}
