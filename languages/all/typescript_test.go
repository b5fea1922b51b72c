package all_test

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/typescript"
)

// TestTypeScriptDeny: JavaScript's deny rules hold on what the
// TypeScript becomes, and name the TypeScript file.
func TestTypeScriptDeny(t *testing.T) {
	l, err := languages.Lookup("typescript")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code, deny string
		refused    bool
	}{
		{"import * as os from \"os\";\nos.exec([\"id\"]);\n", "import:os", true},
		{"const p: unknown = std.popen;\n", "std.popen", true},
		{"type T = { eval: string };\nconst n: number = 1;\n", "eval", false},
		// An import only types use is elided, as tsc elides it: it runs nothing.
		{"import type { X } from \"os\";\nconst n: number = 1;\n", "import:os", false},
	} {
		vs := l.Validate(src("main.ts", tc.code), languages.ValidationProfile{Deny: []string{tc.deny}})
		if (len(vs) > 0) != tc.refused {
			t.Errorf("deny %q on %q: %v, want refused=%v", tc.deny, tc.code, vs, tc.refused)
		}
		for _, v := range vs {
			if v.File != "main.ts" || !strings.Contains(v.Message, "remove") {
				t.Errorf("violation %+v: want it on main.ts, saying the fix", v)
			}
		}
	}
}

// TestTypeScript runs TypeScript through the executor: types stripped
// (a type error is no error: they are not checked), files importing each
// other by their JavaScript names, TypeScript-only syntax (enums,
// namespaces, parameter properties) lowered, and a source nested past
// typescript.MaxNesting refused before esbuild's parser sees it.
func TestTypeScript(t *testing.T) {
	needLanguage(t, "typescript")
	e := newExecutor(t, "")
	for _, tc := range []struct {
		name    string
		files   []languages.File
		status  languages.Status
		stdout  string
		compile string
	}{
		{name: "types stripped, not checked", files: file("main.ts", "const n: number = \"not a number\" as any;\nprint(n);\n"),
			status: languages.StatusOK, stdout: "not a number\n"},
		{name: "enum, namespace and parameter properties", files: file("main.ts",
			"enum Color { Red, Green }\nnamespace NS { export const k = 2; }\nclass P { constructor(private readonly x: number) {} get(): number { return this.x; } }\nprint(Color.Green, NS.k, new P(7).get());\n"),
			status: languages.StatusOK, stdout: "1 2 7\n"},
		{name: "two files as ES modules", files: []languages.File{
			{Name: "main.ts", Content: []byte("import { twice } from \"./util.js\";\nprint(twice(21));\n")},
			{Name: "util.ts", Content: []byte("export function twice(x: number): number { return 2 * x; }\n")}},
			status: languages.StatusOK, stdout: "42\n"},
		{name: "a syntax error names the file, line and column", files: file("main.ts", "const a = 1;\nlet b: = 2;\n"),
			status: languages.StatusCompileError, compile: "main.ts:2:8: error:"},
		{name: "nesting past the limit", files: file("main.ts", "const x = "+strings.Repeat("(", typescript.MaxNesting+1)+"1"+strings.Repeat(")", typescript.MaxNesting+1)+";\n"),
			status: languages.StatusCompileError, compile: "over the limit of 512"},
		{name: "a million brackets", files: file("main.ts", strings.Repeat("[", 1<<20-16)),
			status: languages.StatusCompileError, compile: "over the limit of 512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "ts", Source: languages.Source{Files: tc.files}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status || string(res.Stdout) != tc.stdout || !strings.Contains(res.CompileOutput, tc.compile) {
				t.Fatalf("status %s stdout %q compile %q stderr %q; want %s %q %q", res.Status, res.Stdout, res.CompileOutput, res.Stderr, tc.status, tc.stdout, tc.compile)
			}
		})
	}
}
