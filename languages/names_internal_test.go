package languages

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
)

// probingLanguage counts its Info calls: a real language's Info may run
// its toolchain for the version.
type probingLanguage struct{ infos atomic.Int32 }

var _ Language = (*probingLanguage)(nil)

func (p *probingLanguage) Info() Info {
	p.infos.Add(1)
	return Info{Name: "zz-probing", Toolchain: "probe 1.0"}
}

func (p *probingLanguage) Validate(Source, ValidationProfile) []Violation { return nil }

func (p *probingLanguage) Build(context.Context, BuildEnv, Source) (*Artifact, error) {
	return nil, nil
}

// TestNamesRunsNoToolchain: Names, which every moat command calls for its
// --lang help at start-up, never asks a language its Info (before, every
// moat process, --help included, ran javac, clang, rustc and the rest for
// their versions: half a CPU-second each).
func TestNamesRunsNoToolchain(t *testing.T) {
	p := &probingLanguage{}
	Register(p)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		delete(byName, "zz-probing")
		delete(aliases, "zz-probing")
	})
	registered := p.infos.Load()
	names := Names()
	if got := p.infos.Load(); got != registered {
		t.Errorf("Names asked Info %d times; want none", got-registered)
	}
	if !slices.Contains(names, "zz-probing") || !slices.IsSorted(names) {
		t.Errorf("Names() = %q; want every registered name, sorted", names)
	}
}
