package languages_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/languages"
)

// probingLanguage counts its Info calls: a real language's Info may run
// its toolchain for the version (javac -version, over a second).
type probingLanguage struct{ infos atomic.Int32 }

func (l *probingLanguage) Info() languages.Info {
	l.infos.Add(1)
	return languages.Info{Name: "zz-names-probe", Path: languages.PathNative}
}

func (l *probingLanguage) Validate(languages.Source, languages.ValidationProfile) []languages.Violation {
	return nil
}

func (l *probingLanguage) Build(context.Context, languages.BuildEnv, languages.Source) (*languages.Artifact, error) {
	return nil, nil
}

// TestNamesAsksNoLanguage holds Names to the registry: every moat process
// builds the exec command's help from it, and once it asked each language
// for its Info, so `moat exec --lang python` ran bash, clang, go, javac,
// lua, perl, php, python3 and rustc for their versions (1.6 s of its 4 s).
func TestNamesAsksNoLanguage(t *testing.T) {
	l := &probingLanguage{}
	languages.Register(l) // Register reads Info once, for the name
	before := l.infos.Load()
	names := languages.Names()
	if !slices.Contains(names, "zz-names-probe") || !slices.IsSorted(names) {
		t.Fatalf("Names() = %v: want the registered name, sorted", names)
	}
	if got := l.infos.Load() - before; got != 0 {
		t.Fatalf("Names() asked the language for its Info %d times, want 0", got)
	}
}
