//go:build !wasip1

package guests

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"text/template"
)

//go:embed templates
var templates embed.FS

// nameRE is what `moat new` accepts as a plugin name: a manifest name
// (policy's module name rule) that is also a Go module path element, a
// Cargo package name and a file name everywhere, so one name serves all.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// ErrExists is wrapped by Scaffold's refusal of a directory that exists
// and is not empty.
var ErrExists = errors.New("exists and is not empty")

// CheckName says why name cannot name a new plugin, or nil.
func CheckName(name string) error {
	if !nameRE.MatchString(name) || strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return fmt.Errorf("plugin name %q: use lowercase letters, digits and single hyphens, starting with a letter, at most 63 characters (e.g. hello-world)", name)
	}
	return nil
}

// Scaffold makes dir a new plugin named name in lang (one of Languages):
// its moat.yaml, code with a greet action using config, log and kv, a
// README, a test where the language has one, and the SDK (Files) where the
// language's tools look for it: Go and Rust in .moat-sdk/ (a local module
// and a path crate the plugin's go.mod and Cargo.toml point at), C and
// C++ moat.h and AssemblyScript moat.ts beside the code, JavaScript,
// Python and Ruby in .moat-sdk/ for editors only (moat provides them at
// run time; a native Python plugin, one flat directory, gets none).
// dir must not exist or be empty. It returns the files written, relative
// to dir, sorted.
func Scaffold(dir, name, lang string) ([]string, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if !slices.Contains(Languages, lang) {
		return nil, fmt.Errorf("guests: no template for language %q (one of %s)", lang, strings.Join(Languages, ", "))
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("%s %w: give a new directory", dir, ErrExists)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	files := map[string][]byte{}
	data := struct{ Name, Lang string }{name, lang}
	root := path.Join("templates", lang)
	err := fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		t, err := template.ParseFS(templates, p)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return err
		}
		files[strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".tmpl")] = b.Bytes()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("guests: the %s template: %w", lang, err)
	}
	files["moat.yaml"] = manifest(name, lang)
	files["README.md"] = readme(name, lang)
	// Its page, shown by moat serve's console: beside the sources of an
	// interpreted or native plugin, and put into a compiled plugin's
	// .wasm by `moat build` (its moat.pages section, signed with it).
	files["index.html"], files["page.js"] = pageHTML(name), []byte(pageJS)
	sdkFiles, err := Files(lang)
	if err != nil {
		return nil, err
	}
	sdkDir := ".moat-sdk/" + lang
	switch lang {
	case "c", "cpp", "assemblyscript":
		sdkDir = ""
	case "javascript", "python", "ruby":
		sdkDir = ".moat-sdk"
	case "python-native":
		// A native plugin is one flat directory (its directories are
		// refused): moat.py is on the workers' PYTHONPATH already.
		sdkFiles = nil
	}
	for n, b := range sdkFiles {
		files[path.Join(sdkDir, n)] = b
	}
	if lang == "rust" {
		files[".gitignore"] = []byte("/target/\n")
	}
	return writeFiles(dir, files)
}

// compiled reports whether lang's plugins are WebAssembly modules built
// by `moat build`.
func compiled(lang string) bool {
	switch lang {
	case "go", "rust", "c", "cpp", "assemblyscript":
		return true
	}
	return false
}

func manifest(name, lang string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# The manifest of the %s plugin: what it is, what it offers and what it\n", name)
	b.WriteString("# asks the operator for. `moat policy check moat.yaml` shows what a profile\n# grants it.\n")
	fmt.Fprintf(&b, "name: %s\nversion: 0.1.0\n", name)
	switch {
	case compiled(lang):
		fmt.Fprintf(&b, "language: %s\nmodule: %s.wasm   # written by `moat build`\nkind: moat\n", lang, name)
	case lang == "python-native":
		b.WriteString("language: python\nkind: native\ncommand: [python3, main.py]\n")
	default:
		fmt.Fprintf(&b, "language: %s\nkind: moat\n", lang)
	}
	b.WriteString("actions:\n  - name: greet\n    timeout: 5s\n    max_input: 1KiB\n")
	b.WriteString("capabilities:\n  kv: true          # the call counter\nconfig:\n  greeting: Hello\n")
	b.WriteString("pages:            # shown in moat serve's console to those who may open it\n")
	b.WriteString("  - {name: main, title: Greeter, entry: index.html, files: [page.js]}\n")
	b.WriteString("# routes:         # HTTP routes moat serve answers under /m/ORG/" + name + "/ (README: Routes and webhooks)\n")
	b.WriteString("#   - {route: \"GET /hello\", action: greet, auth: public}\n")
	if lang == "python-native" {
		b.WriteString("limits:\n  memory: 64MiB     # per worker: its cgroup's memory limit\n  concurrency: 2    # workers at once\n")
	}
	return []byte(b.String())
}

func readme(name, lang string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\nA moat plugin in %s, made by `moat new %s --lang %s`. Its action\n", name, lang, name, lang)
	b.WriteString("`greet` greets the input with the configured greeting and counts its calls\nin the key-value store.\n\n```sh\n")
	if compiled(lang) {
		fmt.Fprintf(&b, "moat build %s                      # writes %s.wasm (offline: the SDK is inside moat)\n", name, name)
	}
	fmt.Fprintf(&b, "moat run %s greet --input World    # builds first when a source is newer than the module\n", name)
	fmt.Fprintf(&b, "moat dev %s greet --input World    # runs again on every change\n", name)
	b.WriteString("```\n")
	b.WriteString("\nIts page (index.html and page.js, declared under pages: in moat.yaml) shows\n" +
		"in the console of `moat serve`, Pages tab, to everyone of the organization\n" +
		"(add roles: or permissions: to narrow it). It runs in a sandbox without\n" +
		"network and calls the plugin's actions as the signed-in person through\n" +
		"moat-page.js, which the server serves.\n")
	if compiled(lang) {
		fmt.Fprintf(&b, "`moat build` puts the page's files into %s.wasm (its moat.pages section),\n"+
			"so the module's signature covers them: build again after editing them.\n", name)
	}
	switch lang {
	case "go":
		b.WriteString("\n`go test` runs main_test.go (the SDK module is in .moat-sdk/go, which go.mod\nreplaces github.com/moat-sandbox/moat with).\n")
	case "rust":
		b.WriteString("\n`cargo test --offline` runs the tests in src/lib.rs (the SDK crate is in\n.moat-sdk/rust).\n")
	}
	return []byte(b.String())
}

// pageHTML is a new plugin's page: a form that calls greet.
func pageHTML(name string) []byte {
	return []byte(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>` + name + `</title></head>
<body>
<!-- Shown by moat serve's console in a sandboxed frame, as the signed-in
     person: no key, no network; moat-page.js carries its calls. -->
<h1>` + name + `</h1>
<p id="who"></p>
<input id="name" placeholder="Your name" aria-label="Name">
<button id="greet">Greet</button>
<p id="answer"></p>
<script src="moat-page.js"></script>
<script src="page.js"></script>
</body>
</html>
`)
}

// pageJS is a new plugin's page script. A sandboxed page submits no
// forms: a button calls the action.
const pageJS = `"use strict";
const $ = (s) => document.querySelector(s);
moat.ready.then((who) => { $("#who").textContent = "Signed in as " + who.user + "@" + who.org; });
$("#greet").addEventListener("click", async () => {
  try {
    $("#answer").textContent = await moat.call("greet", $("#name").value);
  } catch (e) {
    $("#answer").textContent = e.code + ": " + e.message;
  }
});
`
