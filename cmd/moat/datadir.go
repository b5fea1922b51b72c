package main

import "github.com/moat-sandbox/moat/host"

func defaultDataDir() string { return host.DefaultDataDir() }
