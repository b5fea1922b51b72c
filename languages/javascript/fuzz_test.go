package javascript_test

import (
	"testing"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/javascript"
)

// FuzzValidate: the static checks take any bytes (they run before the
// UTF-8 check has refused anything) without panicking or looping, and
// every violation names a line of the file.
func FuzzValidate(f *testing.F) {
	f.Add("import * as os from 'qjs:os'; os.exec(`${std.popen('x')}`); /re[/]/g; a / b")
	f.Add("")
	f.Fuzz(func(t *testing.T, src string) {
		s := languages.Source{Files: []languages.File{{Name: "main.js", Content: []byte(src)}}}
		lines := 1
		for _, c := range src {
			if c == '\n' {
				lines++
			}
		}
		deny := []string{"import:os", "os.exec", "std.popen", "eval", "system", "backticks", "IO.popen", "import:socket"}
		for _, v := range (javascript.Language{}).Validate(s, languages.ValidationProfile{Deny: deny}) {
			if v.Line < 1 || v.Line > lines {
				t.Fatalf("violation %v on line %d of a %d-line file", v, v.Line, lines)
			}
		}
	})
}
