// Package python holds moat.py, the moat guest SDK for Python. The python
// language ships it beside each script (as moat.py, unless the submission
// has a file of that name); the script's directory is on sys.path, so a
// script imports it with
//
//	import moat
//
// See moat.py for the API and the device-file transport underneath.
package python

import _ "embed"

// SDK is the source of moat.py.
//
//go:embed moat.py
var SDK []byte

// FileName is the name the SDK has beside a script.
const FileName = "moat.py"
