package server

import _ "embed"

// SampleConfig is a commented moat-server.yaml (moat serve --print-config):
// every value it sets is the default, so it loads as is and means
// DefaultConfig until edited; the settings with no default are there as
// comments. TestSampleConfig holds it to both.
//
//go:embed sample-config.yaml
var SampleConfig []byte
