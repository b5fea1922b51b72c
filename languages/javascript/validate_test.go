package javascript_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/javascript"
)

func TestValidateDeny(t *testing.T) {
	deny := []string{"import:os", "std.popen", "os.exec", "eval"}
	tests := []struct {
		name, src string
		want      []string // "rule:line"
	}{
		{"namespace import", `import * as os from "os";`, []string{"import:1"}},
		{"qjs prefix", "\nimport { exec } from 'qjs:os';", []string{"import:2"}},
		{"dynamic import", `const m = await import("os");`, []string{"import:1"}},
		{"re-export", `export { exec } from "qjs:os";`, []string{"import:1"}},
		{"other module", `import * as std from "qjs:std"; import "./os.js";`, nil},
		{"member call", "std.popen('ls', 'r');", []string{"call:1"}},
		{"optional chaining and brackets", "os?.exec(['ls']);\nos['exec'](['ls']);", []string{"call:1", "call:2"}},
		{"global", "eval('1');", []string{"call:1"}},
		{"member of the same name (a nested std.popen still counts)", "obj.eval(1); x.std.popen; o.exec();", []string{"call:1"}},
		{"comments and strings", "// std.popen\n/* os.exec */ const s = 'eval(1)' + \"std.popen\";", nil},
		{"template substitution", "const s = `std.popen ${std.popen('x')}`;", []string{"call:1"}},
		{"regex literal", "const re = /eval(/; const d = 4 / 2 / 1;", nil},
		{"allowed code", `print(std.getenv("HOME"), os.now());`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := languages.Source{Files: []languages.File{{Name: "main.js", Content: []byte(tt.src)}}}
			var got []string
			for _, v := range (javascript.Language{}).Validate(src, languages.ValidationProfile{Deny: deny}) {
				got = append(got, fmt.Sprintf("%s:%d", v.Rule, v.Line))
				if v.File != "main.js" || v.Message == "" {
					t.Errorf("violation %+v lacks its file or message", v)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("violations %v, want %v", got, tt.want)
			}
		})
	}
}

func ExampleLanguage_Validate() {
	src := languages.Source{Files: []languages.File{{Name: "main.js", Content: []byte("const p = std.popen('ls', 'r');\n")}}}
	for _, v := range (javascript.Language{}).Validate(src, languages.ValidationProfile{Deny: []string{"std.popen"}}) {
		fmt.Println(v)
	}
	// Output:
	// main.js:1: std.popen is denied by the validation profile (deny: std.popen); remove it, or run under a profile that allows it (call)
}
