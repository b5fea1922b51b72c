package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDidYouMean: a mistyped command or language is a usage error (exit
// 2) on one line naming the likely one; a group command given a wrong
// subcommand no longer prints its help and exits 0; --help names the
// languages instead of "--lang moat langs".
func TestDidYouMean(t *testing.T) {
	src := filepath.Join(t.TempDir(), "main.py")
	os.WriteFile(src, []byte("print(1)\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rnu"}, `unknown command "rnu" for "moat"; did you mean "run"?`},
		{[]string{"servce"}, `did you mean "serve"?`},
		{[]string{"keys", "crate"}, `unknown command "crate" for "moat keys"; did you mean "create"?`},
		{[]string{"xyzzy"}, `unknown command "xyzzy" for "moat" (commands: `},
		{[]string{"exec", "--lang", "pyton", src}, `unknown language "pyton": did you mean "python"?`},
		{[]string{"exec", "--lang", "javscript", src}, `did you mean "javascript"?`},
		{[]string{"exec", "--lang", "cobol", src}, `unknown language "cobol": use one of `},
		// A terminal escape in the name is shown escaped, never sent.
		{[]string{"\x1b]0;owned\x07"}, `unknown command "\x1b]0;owned\a"`},
	} {
		r := moat(t, "", tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("moat %q: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	if r := moat(t, "", "keys"); r.code != 0 || !strings.Contains(r.stdout, "Available Commands") {
		t.Errorf("moat keys: %+v; want its help", r)
	}
	if r := moat(t, "", "exec", "--help"); r.code != 0 || !strings.Contains(r.stdout, "--lang LANG ") || !strings.Contains(r.stdout, "LANG is one of assemblyscript, bash, c,") {
		t.Errorf("moat exec --help does not list the languages: %s", r.stdout)
	}
}
