package languages_test

import (
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/languages"
)

func files(nameContent ...string) languages.Source {
	var s languages.Source
	for i := 0; i+1 < len(nameContent); i += 2 {
		s.Files = append(s.Files, languages.File{Name: nameContent[i], Content: []byte(nameContent[i+1])})
	}
	return s
}

func TestValidateCommon(t *testing.T) {
	tests := []struct {
		name    string
		src     languages.Source
		profile languages.ValidationProfile
		rule    string // "" = no violation
		file    string
		fix     string // part of the message
	}{
		{name: "ok", src: files("main.c", "int main(){}", "lib/util.h", "")},
		{name: "no files", src: languages.Source{}, rule: languages.RuleFiles, fix: "at least the entry file"},
		{name: "too many", src: files("a.c", "", "b.c", "", "c.c", ""), profile: languages.ValidationProfile{MaxFiles: 2},
			rule: languages.RuleFiles, fix: "merge files"},
		{name: "default size limit", src: files("a.c", strings.Repeat("x", languages.DefaultMaxSourceBytes+1)),
			rule: languages.RuleSize, fix: "send less code"},
		{name: "size over all files", src: files("a.c", "12345", "b.c", "12345"), profile: languages.ValidationProfile{MaxSourceBytes: 9},
			rule: languages.RuleSize},
		{name: "invalid UTF-8", src: files("a.c", "ok\nbad \xff here"), rule: languages.RuleEncoding, file: "a.c", fix: "save the file as UTF-8"},
		{name: "dot-dot", src: files("a.c", "", "x/../../etc/passwd", ""), rule: languages.RulePath, file: "x/../../etc/passwd", fix: `".."`},
		{name: "bare dot-dot", src: files("..", ""), rule: languages.RulePath, fix: `".."`},
		{name: "absolute", src: files("/etc/passwd", ""), rule: languages.RulePath, file: "/etc/passwd", fix: "relative"},
		{name: "windows absolute", src: files(`C:\x.c`, ""), rule: languages.RulePath, fix: "relative"},
		{name: "empty name", src: files("", "x"), rule: languages.RulePath, file: "#1", fix: "give it a relative name"},
		{name: "NUL in name", src: files("a\x00.c", ""), rule: languages.RulePath, fix: "NUL"},
		{name: "duplicate", src: files("a.c", "", "a.c", ""), rule: languages.RulePath, file: "a.c", fix: "unique"},
		{name: "duplicate after cleaning", src: files("a.c", "", "./a.c", ""), rule: languages.RulePath},
		{name: "dot element", src: files("x/./a.c", ""), rule: languages.RulePath, fix: "clean relative path"},
		{name: "control character", src: files("a\n.c", ""), rule: languages.RulePath, fix: "control character"},
		{name: "file and directory", src: files("a.c", "", "a.c/x.h", ""), rule: languages.RulePath, file: "a.c/x.h", fix: "a.c is also a file"},
		{name: "directory before file", src: files("d/e/x.h", "", "d", ""), rule: languages.RulePath, file: "d/e/x.h", fix: "d is also a file"},
		{name: "ok: a name prefixing another's directory", src: files("a.c", "", "a.cx/y.h", "", "lib/a.h", "", "lib/b/c.h", "")},
		{name: "main not among files", src: languages.Source{Files: files("a.c", "").Files, Main: "b.c"}, rule: languages.RuleFiles, fix: "entry file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs := languages.ValidateCommon(tc.src, tc.profile)
			if tc.rule == "" {
				if len(vs) > 0 {
					t.Fatalf("unexpected violations: %v", vs)
				}
				return
			}
			for _, v := range vs {
				if v.Rule != tc.rule {
					continue
				}
				if tc.file != "" && v.File != tc.file {
					t.Errorf("file %q, want %q", v.File, tc.file)
				}
				if !strings.Contains(v.Message, tc.fix) {
					t.Errorf("message %q lacks %q", v.Message, tc.fix)
				}
				return
			}
			t.Fatalf("no %s violation in %v", tc.rule, vs)
		})
	}
}

func TestInvalidUTF8Position(t *testing.T) {
	vs := languages.ValidateCommon(files("a.c", "line1\nab\xffc"), languages.ValidationProfile{})
	if len(vs) != 1 || vs[0].Line != 2 || !strings.Contains(vs[0].Message, "column 3") {
		t.Fatalf("%v", vs)
	}
}

func TestDenyLines(t *testing.T) {
	src := files("a.py", "import os\nx = 1\nimport os\n")
	vs := languages.DenyLines(src, languages.ValidationProfile{Deny: []string{"import:os", "include:x", "import:"}}, "import:",
		func(line, target string) bool { return line == "import "+target })
	if len(vs) != 2 || vs[0].Line != 1 || vs[1].Line != 3 || vs[0].Rule != languages.RuleDeny {
		t.Fatalf("%v", vs)
	}
	if vs := languages.DenyLines(src, languages.ValidationProfile{}, "import:", func(string, string) bool { return true }); vs != nil {
		t.Fatalf("no deny rules, got %v", vs)
	}
}
