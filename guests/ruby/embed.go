// Package ruby holds moat.rb, the moat guest SDK for Ruby. The ruby
// language ships it beside each script (as moat.rb, unless the submission
// has a file of that name), and a plugin's instance finds it on
// $LOAD_PATH, so a script loads it with
//
//	require "moat"
//
// See moat.rb for the API and README.md for the protocol underneath.
package ruby

import _ "embed"

// SDK is the source of moat.rb.
//
//go:embed moat.rb
var SDK []byte

// FileName is the name the SDK has beside a script.
const FileName = "moat.rb"
