// Package typescript runs TypeScript as JavaScript: esbuild's Go API
// (github.com/evanw/esbuild/pkg/api, in the moat binary, no cgo, no node)
// strips the types of each .ts file, and the JavaScript language (QuickJS-NG
// compiled to WASI) runs the result, with everything a JavaScript run has:
// std and os as globals, the sandbox of an interpreted run. Types are
// stripped, not checked, as `node --experimental-strip-types`, Deno and
// Bun run TypeScript: a type error is no compile error here. Importing the
// package registers "typescript" (aliases ts, deno, bun).
//
// A submission's TypeScript imports each other by the name of the
// JavaScript they become ("./util.js" for util.ts), as TypeScript's own
// module resolution for ES modules has it.
//
// Validation profile rules: those of javascript, matched on the stripped
// JavaScript ("import:os", "std.popen", "eval").
package typescript

import (
	"context"
	"fmt"
	"path"
	"runtime/debug"
	"strings"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/javascript"
)

func init() { languages.Register(Language{}) }

// Language is TypeScript, types stripped by esbuild, run by QuickJS-NG.
type Language struct{}

var (
	_ languages.Language        = Language{}
	_ languages.BuildIdentifier = Language{}
)

// EsbuildVersion is the esbuild release linked in, read from the build
// info (it is part of the build cache key).
var EsbuildVersion = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/evanw/esbuild" {
				return strings.TrimPrefix(d.Version, "v")
			}
		}
	}
	return "unknown"
}()

// Info implements languages.Language.
func (Language) Info() languages.Info {
	return languages.Info{
		Name:       "typescript",
		Aliases:    []string{"ts", "deno", "bun"},
		Version:    javascript.Version,
		Path:       languages.PathInterpreted,
		Extensions: []string{".ts", ".mts", ".cts"},
		Toolchain:  "esbuild " + EsbuildVersion + " (types stripped) + QuickJS-NG " + javascript.Version + " (WASI)",
		Why:        "TypeScript runs as the JavaScript it becomes: esbuild strips its types (they are not checked) and QuickJS-NG runs the rest",
	}
}

// BuildID implements languages.BuildIdentifier: the stripper's version
// and the JavaScript run's own.
func (Language) BuildID() string {
	return "esbuild-" + EsbuildVersion + " target-esnext " + javascript.Language{}.BuildID()
}

func isTS(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".ts", ".mts", ".cts":
		return true
	}
	return false
}

// jsName is the JavaScript name of a TypeScript file: main.ts → main.js,
// lib.mts → lib.mjs.
func jsName(name string) string {
	ext := path.Ext(name)
	switch strings.ToLower(ext) {
	case ".mts":
		return strings.TrimSuffix(name, ext) + ".mjs"
	case ".ts", ".cts":
		return strings.TrimSuffix(name, ext) + ".js"
	}
	return name
}

// MaxNesting bounds how deep brackets may nest in a file: esbuild's parser
// recurses per level, in moat's own process, so a file of a million "("
// would take the host's stack with it. Real code nests tens deep.
const MaxNesting = 512

// nesting returns the deepest bracket nesting of src and its line. It
// counts brackets in strings and comments too: an over-estimate only
// refuses a source no one writes.
func nesting(src []byte) (depth, line int) {
	d, l := 0, 1
	for _, c := range src {
		switch c {
		case '(', '[', '{':
			d++
			if d > depth {
				depth, line = d, l
			}
		case ')', ']', '}':
			d--
		case '\n':
			l++
		}
	}
	return depth, line
}

// strip turns src's TypeScript files into JavaScript (other files are
// kept as they are); a file esbuild refuses is a *languages.CompileError
// with every message, file:line:column first, as tsc prints them.
func strip(src languages.Source) (languages.Source, error) {
	out := languages.Source{Main: src.Main}
	var msgs []string
	for _, f := range src.Files {
		if !isTS(f.Name) {
			out.Files = append(out.Files, f)
			continue
		}
		if d, line := nesting(f.Content); d > MaxNesting {
			msgs = append(msgs, fmt.Sprintf("%s:%d: brackets nest %d deep, over the limit of %d: flatten the expression", f.Name, line, d, MaxNesting))
			continue
		}
		loader := api.LoaderTS
		res := api.Transform(string(f.Content), api.TransformOptions{
			Loader: loader, Target: api.ESNext, Sourcefile: f.Name,
			// Keep names and layout close to the source: errors QuickJS
			// reports point near the TypeScript line.
			LegalComments: api.LegalCommentsNone, Charset: api.CharsetUTF8,
		})
		for _, m := range res.Errors {
			loc := f.Name
			if m.Location != nil {
				loc = fmt.Sprintf("%s:%d:%d", f.Name, m.Location.Line, m.Location.Column+1)
			}
			msgs = append(msgs, fmt.Sprintf("%s: error: %s", loc, m.Text))
		}
		if len(res.Errors) > 0 {
			continue
		}
		name := jsName(f.Name)
		if src.Main == f.Name {
			out.Main = name
		}
		out.Files = append(out.Files, languages.File{Name: name, Content: res.Code})
	}
	if len(msgs) > 0 {
		return out, &languages.CompileError{Language: "typescript", Output: strings.Join(msgs, "\n")}
	}
	// The entry is the first file unless Main names another: keep it so.
	if out.Main == "" && len(src.Files) > 0 && isTS(src.Files[0].Name) {
		out.Main = jsName(src.Files[0].Name)
	}
	return out, nil
}

// Validate implements languages.Language: the generic checks on the
// submission, then JavaScript's deny rules on what it becomes (a file
// that does not strip is left to Build, which reports it).
func (Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	if len(vs) > 0 || len(p.Deny) == 0 {
		return vs
	}
	js, err := strip(src)
	if err != nil {
		return vs
	}
	names := map[string]string{}
	for _, f := range src.Files {
		names[jsName(f.Name)] = f.Name
	}
	for _, v := range (javascript.Language{}).Validate(js, p) {
		// The line is the stripped JavaScript's, near the TypeScript's.
		if n, ok := names[v.File]; ok {
			v.File = n
		}
		if v.Rule != languages.RulePath && v.Rule != languages.RuleFiles && v.Rule != languages.RuleSize && v.Rule != languages.RuleEncoding {
			vs = append(vs, v)
		}
	}
	return vs
}

// Build implements languages.Language: strip, then JavaScript's build.
func (Language) Build(ctx context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	js, err := strip(src)
	if err != nil {
		return nil, err
	}
	return javascript.Language{}.Build(ctx, env, js)
}
