package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

// FuzzParseManifest checks that no input panics, that every error is a
// one-line *FileError, and that whatever parses can be evaluated and
// reported.
func FuzzParseManifest(f *testing.F) {
	f.Add(fullManifest)
	for _, tt := range manifestErrors {
		f.Add(tt.yaml)
	}
	p, err := policy.LoadProfile("dev")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := policy.ParseManifest("moat.yaml", []byte(s))
		if err != nil {
			var fe *policy.FileError
			if !errors.As(err, &fe) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		e := p.Evaluate(m, "")
		_ = e.Report(m, p)
		_ = e.CheckOp("http.fetch", "https://example.com/")
	})
}

func FuzzParseProfile(f *testing.F) {
	f.Add(fullProfile)
	f.Add(testProfile)
	f.Fuzz(func(t *testing.T, s string) {
		p, err := policy.ParseProfile("p.yaml", []byte(s))
		if err != nil {
			var fe *policy.FileError
			if !errors.As(err, &fe) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		m, err := policy.ParseManifest("moat.yaml", []byte(fullManifest))
		if err != nil {
			t.Fatal(err)
		}
		_ = p.Evaluate(m, "acme-release").Report(m, p)
	})
}
