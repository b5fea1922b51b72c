// Package moatdir names moat's home: the one directory, per user or for
// the system, where the data directory and the toolchains live when
// nothing more specific is given. It exists so that every command, from
// any working directory, finds the same store, keys, audit trail and
// toolchains (a data directory that followed the working directory gave
// each directory its own store, and keys the server never saw).
//
//	$XDG_DATA_HOME set (absolute): $XDG_DATA_HOME/moat, for anyone
//	root:                          /var/lib/moat
//	other users:                   ~/.local/share/moat
//
// Data() is Home()/data and Toolchains() Home()/toolchains; $MOAT_DATA
// and $MOAT_TOOLCHAINS, and the commands' flags, win over both.
package moatdir

import (
	"os"
	"path/filepath"
)

// SystemHome is moat's home for root, and the shared toolchains a user
// without toolchains of their own falls back to.
const SystemHome = "/var/lib/moat"

// EnvData overrides Data().
const EnvData = "MOAT_DATA"

// LegacyData is the data directory relative to the working directory that
// moat used before it had a home (and uses when there is no home: no
// $HOME and not root).
const LegacyData = "moat-data"

// Home returns moat's home directory: $XDG_DATA_HOME/moat when
// $XDG_DATA_HOME is set and absolute (as the XDG spec requires; for root
// too: setting it is a choice), else SystemHome as root, else
// $HOME/.local/share/moat. It returns "" when none can be named (not
// root, no $HOME). The directory may not exist yet.
func Home() string {
	if x := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "moat")
	}
	if os.Geteuid() == 0 {
		return SystemHome
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "share", "moat")
	}
	return ""
}

// Data returns the default data directory (store, compile cache, build
// cache): $MOAT_DATA, else Home()/data, else ./moat-data.
func Data() string {
	if d := os.Getenv(EnvData); d != "" {
		return d
	}
	if h := Home(); h != "" {
		return filepath.Join(h, "data")
	}
	return LegacyData
}

// Toolchains returns Home()/toolchains, where `moat toolchains install`
// puts what it provisions by default, or "" when there is no home.
func Toolchains() string {
	if h := Home(); h != "" {
		return filepath.Join(h, "toolchains")
	}
	return ""
}
