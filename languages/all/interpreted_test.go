package all_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/c"
)

// lineInterp is a real, if tiny, interpreter: a C program compiled to
// WASM that "runs" a script by printing it, with its stdin, args and env.
// It exercises the executor's ArtifactInterpreted path (the script
// mounted read-only at /src, Args before the user's, the artifact's Env)
// with the same machinery the WASM Python, JavaScript and Ruby use.
const lineInterp = `#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	if (argc < 2) return 2;
	FILE *f = fopen(argv[1], "r");
	if (!f) { perror(argv[1]); return 4; }
	char buf[256];
	while (fgets(buf, sizeof buf, f)) fputs(buf, stdout);
	fclose(f);
	char in[64] = {0};
	fgets(in, sizeof in, stdin);
	printf("stdin=%s", in);
	printf("arg=%s mode=%s\n", argc > 2 ? argv[2] : "-", getenv("INTERP_MODE"));
	FILE *w = fopen(argv[1], "w");
	printf("writable=%s\n", w ? "yes" : "no");
	return 0;
}
`

type interpLang struct {
	once sync.Once
	wasm []byte
	err  error
}

func (*interpLang) Info() languages.Info {
	return languages.Info{Name: "x-test-lines", Path: languages.PathInterpreted, Extensions: []string{".lines"}, Version: "1", Toolchain: "test"}
}

func (*interpLang) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	return languages.ValidateCommon(src, p)
}

func (l *interpLang) Build(ctx context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	l.once.Do(func() {
		a, err := c.C.Build(ctx, env, languages.Source{Files: []languages.File{{Name: "interp.c", Content: []byte(lineInterp)}}})
		if err != nil {
			l.err = err
			return
		}
		l.wasm = a.WASM
	})
	if l.err != nil {
		return nil, l.err
	}
	return &languages.Artifact{Kind: languages.ArtifactInterpreted, WASM: l.wasm, Files: src.Files,
		Args: []string{"/src/" + src.Entry().Name}, Env: map[string]string{"INTERP_MODE": "strict"}}, nil
}

var registerInterp sync.Once

func TestInterpretedArtifact(t *testing.T) {
	needLanguage(t, "c")
	registerInterp.Do(func() { languages.Register(&interpLang{}) })
	// A temp dir of its own: another package's tests (go test -p 2) make
	// moat-src- directories in the shared one while this test looks.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	e := newExecutor(t, "")
	req := languages.ExecRequest{
		Language: "x-test-lines",
		Source: languages.Source{Files: []languages.File{
			{Name: "lib/other.lines", Content: []byte("not the entry\n")},
			{Name: "prog.lines", Content: []byte("line one\nline two\n")},
		}, Main: "prog.lines"},
		Stdin: []byte("typed\n"), Args: []string{"a1"},
	}
	res, err := e.Exec(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := "line one\nline two\nstdin=typed\narg=a1 mode=strict\nwritable=no\n"
	if res.Status != languages.StatusOK || string(res.Stdout) != want {
		t.Fatalf("status %s stdout %q stderr %q %s %s", res.Status, res.Stdout, res.Stderr, res.Message, res.CompileOutput)
	}
	// The source directory is gone after the run.
	ents, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "moat-src-") {
			t.Errorf("source dir %s left behind", e.Name())
		}
	}
}

// TestSDKInBuildKey: an interpreted language whose build adds files of its
// own beside the source (its SDK) names them in the build key
// (languages.BuildIdentifier), or a moat with another SDK would run a
// cached build carrying the old one.
func TestSDKInBuildKey(t *testing.T) {
	for _, l := range languages.All() {
		if l.Info().Path != languages.PathInterpreted {
			continue
		}
		t.Run(l.Info().Name, func(t *testing.T) {
			needLanguage(t, l.Info().Name)
			src := hello(t, l)
			a, err := l.Build(context.Background(), languages.BuildEnv{WorkDir: t.TempDir()}, src)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Files) > len(src.Files) {
				if _, ok := l.(languages.BuildIdentifier); !ok {
					t.Errorf("the build adds %d files to the source, but the language is no BuildIdentifier", len(a.Files)-len(src.Files))
				}
			}
		})
	}
}
