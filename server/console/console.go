// Package console is moat's web console: one HTML page, a stylesheet, its
// script and the code editor's bundle (editor.js: CodeMirror 6, built from
// pinned npm packages by `make console-editor` from editor/, and
// committed), embedded in the binary and served by package server at /.
// The files here are what the browser gets; nothing is fetched from
// elsewhere.
package console

import "embed"

// Files holds index.html, app.js, style.css, editor.js and hello.json
// (the Run code tab's hello world per language).
//
//go:embed index.html app.js style.css editor.js hello.json
var Files embed.FS
