package languages

// warmSources are the smallest programs that make each language do its
// first-time work (Go's standard library build, an interpreter's compile
// to machine code) and nothing else.
var warmSources = map[string]string{
	"go":             "package main\n\nfunc main() { println(\"ok\") }\n",
	"c":              "int main(void) { return 0; }\n",
	"cpp":            "int main() { return 0; }\n",
	"rust":           "fn main() {}\n",
	"assemblyscript": "console.log(\"ok\");\n",
	"javascript":     "console.log('ok');\n",
	"python":         "print('ok')\n",
	"ruby":           "puts 'ok'\n",
	"bash":           "echo ok\n",
	"python3-native": "print('ok')\n",
	"typescript":     "const ok: string = 'ok';\nconsole.log(ok);\n",
	"lua":            "print('ok')\n",
	"php":            "<?php echo \"ok\\n\";\n",
	"perl":           "print \"ok\\n\";\n",
	"kotlin":         "fun main() {\n    println(\"ok\")\n}\n",
	"java":           "public class Main { public static void main(String[] a) { System.out.println(\"ok\"); } }\n",
}

// WarmRequest is the job that warms a language: a run of its smallest
// program, so that the work a first run does once lands in the caches now
// rather than in someone's first request (`moat toolchains warm`, and a
// server's languages.warm). ok is false for a language with no warm
// program.
func WarmRequest(name string) (req ExecRequest, ok bool) {
	l, err := Lookup(name)
	if err != nil {
		return ExecRequest{}, false
	}
	info := l.Info()
	src, ok := warmSources[info.Name]
	if !ok {
		return ExecRequest{}, false
	}
	ext := ""
	if len(info.Extensions) > 0 {
		ext = info.Extensions[0]
	}
	return ExecRequest{Language: info.Name, Source: Source{Files: []File{{Name: "main" + ext, Content: []byte(src)}}}}, true
}

// machineWarm are the languages whose first-time work is the machine's,
// kept once for every data directory (toolchains.StateDir): an
// interpreter's machine code and the image of its start (JavaScript's and
// TypeScript's QuickJS, CPython, CRuby), Go's standard library for
// wasip1. What any other language does on a first run is that program's
// own build (a compiler started on its source), which no run of another
// program can do ahead.
var machineWarm = map[string]bool{"go": true, "javascript": true, "typescript": true, "python": true, "ruby": true}

// WarmsMachine reports whether the language's warm run (WarmRequest)
// prepares something for the whole machine rather than for one data
// directory: `moat toolchains install` warms these.
func WarmsMachine(name string) bool { return machineWarm[name] }
