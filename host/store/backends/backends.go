// Package backends links in every storage backend moat ships, for
// programs (cmd/moat) that let their operator choose one by URL:
//
//	import _ "github.com/moat-sandbox/moat/host/store/backends"
//
// SQLite needs no import (package store always has it); this adds
// PostgreSQL (postgres://, postgresql://). A program that embeds moat and
// wants only SQLite imports nothing, and links no PostgreSQL driver.
package backends

import (
	_ "github.com/moat-sandbox/moat/host/store/postgres" // postgres://, postgresql://
	_ "github.com/moat-sandbox/moat/host/store/sqlite"   // sqlite://, directories
)
