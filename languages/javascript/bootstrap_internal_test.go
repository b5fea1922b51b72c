package javascript

import "testing"

// TestIsModule: the bootstrap picks import() or std.loadScript as qjs
// would (JS_DetectModule): a wrong guess runs a classic script in strict
// mode or a module as a script (a SyntaxError on import).
func TestIsModule(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      bool
	}{
		{"main.mjs", "print(1)", true},
		{"main.js", "import * as moat from './moat.js';", true},
		{"main.js", "// comment\n/* import x */\nexport const x = 1;", true},
		{"main.js", "#!/usr/bin/env qjs\nimport { a } from './a.js';", true},
		{"main.js", "import('./a.js').then(print);", false},
		{"main.js", "import.meta;", false},
		{"main.js", "print('import x from y');", false},
		{"main.js", "const x = 1;\nexport { x };", false}, // qjs looks only at the first token
		{"main.js", "", false},
		{"main.js", "#!/usr/bin/env qjs", false},
	} {
		if got := isModule(tc.name, tc.src); got != tc.want {
			t.Errorf("isModule(%q, %q) = %v, want %v", tc.name, tc.src, got, tc.want)
		}
	}
}
