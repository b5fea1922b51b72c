package main

import "github.com/moat-sandbox/moat/host"

// data is the data directory: --data, else host.DefaultDataDir().
func (g *globalFlags) data() string {
	if g.dataDir != "" {
		return g.dataDir
	}
	return host.DefaultDataDir()
}
