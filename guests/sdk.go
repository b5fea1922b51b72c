//go:build !wasip1

// Package guests carries every guest SDK inside the moat binary, so a
// plugin builds with no network and no moat checkout: `moat new` writes the
// SDK beside a new plugin (for editors and local tests) and `moat build`
// writes the binary's own copy into the build's scratch directory, so a
// plugin is always built against the ABI of the moat that will run it.
//
// What each language gets (Files):
//
//	go                     a local module github.com/moat-sandbox/moat holding abi and guests/go only
//	                       (go.mod, abi/*.go, guests/go/*.go), for a go.mod replace directive
//	c, cpp                 moat.h (header-only)
//	rust                   the moat crate (Cargo.toml, src/*.rs), for a path dependency or an rlib
//	assemblyscript         moat.ts
//	javascript             moat.js
//	python, python-native  moat.py
//	ruby                   moat.rb
package guests

import (
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/abi"
)

//go:embed go/*.go c/moat.h rust/Cargo.toml rust/src/*.rs assemblyscript/moat.ts js/moat.js python/moat.py ruby/moat.rb
var sdk embed.FS

//go:embed pages/moat-page.js
var pageBridge []byte

// PageBridge is moat-page.js, the script a module's page loads to call its
// module through the console (server/pages.go serves it at every page's
// moat-page.js, whatever the plugin holds). One copy: the server serves
// the file the SDKs ship.
func PageBridge() []byte { return slices.Clone(pageBridge) }

// GoModulePath is the module path of the Go SDK's local module, the left
// side of the replace directive a Go plugin's go.mod carries.
const GoModulePath = "github.com/moat-sandbox/moat"

// GoLanguageVersion is the go line of the Go SDK's local module: the
// oldest Go with //go:wasmexport, which the SDK needs.
const GoLanguageVersion = "1.24"

// Languages lists the languages Files knows, in the order `moat new`
// offers them.
var Languages = []string{"go", "rust", "c", "cpp", "assemblyscript", "javascript", "python", "python-native", "ruby"}

// Files returns the SDK files of lang, by slash-separated path relative
// to the directory they belong in. The map is new on each call.
func Files(lang string) (map[string][]byte, error) {
	out := map[string][]byte{}
	one := func(src, dst string) error {
		b, err := sdk.ReadFile(src)
		if err != nil {
			return err
		}
		out[dst] = b
		return nil
	}
	var err error
	switch lang {
	case "go":
		out["go.mod"] = []byte("// The moat guest SDK for Go, written by moat from its own binary: the\n" +
			"// abi package and guests/go, nothing else. Regenerate it with moat rather\n" +
			"// than editing it; `moat build` uses the binary's copy either way.\n" +
			"module " + GoModulePath + "\n\ngo " + GoLanguageVersion + "\n")
		if err = copyGo(abi.Source, ".", "abi", out); err == nil {
			err = copyGo(sdk, "go", "guests/go", out)
		}
	case "c", "cpp":
		err = one("c/moat.h", "moat.h")
	case "rust":
		if err = one("rust/Cargo.toml", "Cargo.toml"); err == nil {
			err = fs.WalkDir(sdk, "rust/src", func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				return one(p, strings.TrimPrefix(p, "rust/"))
			})
		}
	case "assemblyscript":
		err = one("assemblyscript/moat.ts", "moat.ts")
	case "javascript":
		err = one("js/moat.js", "moat.js")
	case "python", "python-native":
		err = one("python/moat.py", "moat.py")
	case "ruby":
		err = one("ruby/moat.rb", "moat.rb")
	default:
		return nil, fmt.Errorf("guests: no SDK for language %q (one of %s)", lang, strings.Join(Languages, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("guests: reading the embedded %s SDK: %w", lang, err)
	}
	return out, nil
}

// copyGo copies the non-test .go files of dir in fsys to dst/ in out.
func copyGo(fsys fs.FS, dir, dst string, out map[string][]byte) error {
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || n == "source.go" && dir == "." {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, n))
		if err != nil {
			return err
		}
		out[path.Join(dst, n)] = b
	}
	return nil
}

// Write writes lang's SDK files under dir (made if missing), replacing
// files of the same names; files of other names are left alone. Files are
// written 0644 and directories 0755, so a confined compiler running as
// another uid can read them.
func Write(dir, lang string) error {
	files, err := Files(lang)
	if err != nil {
		return err
	}
	if _, err := writeFiles(dir, files); err != nil {
		return fmt.Errorf("guests: writing the %s SDK: %w", lang, err)
	}
	return nil
}

// writeFiles writes files (slash-separated paths under dir → contents),
// in name order, files 0644 and directories 0755, and returns the names.
func writeFiles(dir string, files map[string][]byte) ([]string, error) {
	names := slices.Sorted(maps.Keys(files))
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, files[n], 0o644); err != nil {
			return nil, err
		}
	}
	return names, nil
}
