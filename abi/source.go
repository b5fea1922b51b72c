//go:build !wasip1

package abi

import "embed"

// Source is this package's own Go source (tests left out when written
// out by package guests), so the moat binary can hand a Go plugin the abi
// package its SDK imports without network or a moat checkout: `moat new`
// and `moat build` write it into a local module (see package guests).
// Guests (wasip1) do not carry it.
//
//go:embed *.go
var Source embed.FS
