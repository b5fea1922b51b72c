package all_test

import (
	"context"
	"testing"

	"github.com/moat-sandbox/moat/languages"
)

// TestNativeScriptModules: a native script's sibling files load as
// modules, from the read-only source directory (Lua's require, Perl's
// use, PHP's require).
func TestNativeScriptModules(t *testing.T) {
	e := newExecutor(t, "")
	for _, tc := range []struct {
		lang  string
		files []languages.File
	}{
		{"lua", []languages.File{{Name: "main.lua", Content: []byte("local u = require('util')\nprint(u.twice(21))\n")},
			{Name: "util.lua", Content: []byte("return { twice = function(x) return 2 * x end }\n")}}},
		{"perl", []languages.File{{Name: "main.pl", Content: []byte("use Util;\nprint Util::twice(21), \"\\n\";\n")},
			{Name: "Util.pm", Content: []byte("package Util;\nsub twice { return 2 * shift }\n1;\n")}}},
		{"php", []languages.File{{Name: "main.php", Content: []byte("<?php\nrequire __DIR__ . '/util.php';\necho twice(21), \"\\n\";\n")},
			{Name: "util.php", Content: []byte("<?php\nfunction twice($x) { return 2 * $x; }\n")}}},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			needLanguage(t, tc.lang)
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tc.lang, Source: languages.Source{Files: tc.files}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != languages.StatusOK || string(res.Stdout) != "42\n" {
				t.Fatalf("status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
			}
		})
	}
}

// TestWorkFilesEveryPath: the work files (Judge0's additional_files) are
// in the run's working directory, native or WASM: the program reads them
// by a relative name, in a subdirectory too, and may write beside them
// (its working directory is its own, writable).
func TestWorkFilesEveryPath(t *testing.T) {
	e := newExecutor(t, "")
	work := []languages.File{{Name: "data.txt", Content: []byte("from the zip\n")}, {Name: "sub/more.txt", Content: []byte("nested\n")}}
	for _, tc := range []struct{ lang, src string }{
		{"bash", "read a < data.txt; read b < sub/more.txt; echo x >> data.txt; echo \"$a $b $(wc -l < data.txt)\""},
		{"perl", "open my $f, '<', 'data.txt' or die; my $a = <$f>; chomp $a; open my $g, '<', 'sub/more.txt' or die; my $b = <$g>; chomp $b;\nopen my $w, '>>', 'data.txt' or die; print $w \"x\\n\"; close $w; open $f, '<', 'data.txt'; my @l = <$f>; print \"$a $b \", scalar(@l), \"\\n\";"},
		{"python3-native", "a = open('data.txt').read().strip(); b = open('sub/more.txt').read().strip()\nopen('data.txt', 'a').write('x\\n')\nprint(a, b, len(open('data.txt').readlines()))"},
		{"python", "a = open('data.txt').read().strip(); b = open('sub/more.txt').read().strip()\nopen('data.txt', 'a').write('x\\n')\nprint(a, b, len(open('data.txt').readlines()))"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			l := needLanguage(t, tc.lang)
			main := "main" + l.Info().Extensions[0]
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tc.lang,
				Source: languages.Source{Main: main, Files: []languages.File{{Name: main, Content: []byte(tc.src)}}}, WorkFiles: work})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != languages.StatusOK || string(res.Stdout) != "from the zip nested 2\n" {
				t.Fatalf("status %s stdout %q stderr %q message %s", res.Status, res.Stdout, res.Stderr, res.Message)
			}
		})
	}
}
