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
