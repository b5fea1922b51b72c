// Package js holds moat.js, the moat guest SDK for JavaScript. The
// javascript language ships it beside each script (as ./moat.js, unless the
// submission has a file of that name), so a script imports it with
//
//	import * as moat from "./moat.js";
//
// See moat.js for the API and README.md for the protocol underneath.
package js

import _ "embed"

// SDK is the source of moat.js.
//
//go:embed moat.js
var SDK []byte

// FileName is the name the SDK has beside a script.
const FileName = "moat.js"
