// Package console is moat's web console: one HTML page, a stylesheet and a
// script, embedded in the binary and served by package server at /. There
// is no build step: the files here are what the browser gets.
package console

import "embed"

// Files holds index.html, app.js and style.css.
//
//go:embed index.html app.js style.css
var Files embed.FS
