// Package moatdir names moat's home: the one directory, per user or for
// the system, where the data directory and the toolchains live when
// nothing more specific is given. It exists so that every command, from
// any working directory, finds the same store, keys, audit trail and
// toolchains (a data directory that followed the working directory gave
// each directory its own store, and keys the server never saw).
//
//	$XDG_DATA_HOME set (absolute): $XDG_DATA_HOME/moat, for anyone
//	root:                          the system's home, SystemHome()
//	other users:                   ~/.local/share/moat
//
// SystemHome() is /var/lib/moat, or $MOAT_SYSTEM_HOME: root's home and
// the toolchains every user falls back to. Data() is Home()/data and
// Toolchains() Home()/toolchains; $MOAT_DATA and $MOAT_TOOLCHAINS, and
// the commands' flags, win over both.
//
// A test binary never sees the machine's homes: in one (testing.Testing)
// the system's home is only what $MOAT_SYSTEM_HOME names, and $HOME only
// counts once a test has changed it. A test that passed because root once
// ran `moat toolchains install` on the machine, or that wrote the
// machine's store, tested the machine, not moat.
package moatdir

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// DefaultSystemHome is moat's home for root, and the shared toolchains a
// user without toolchains of their own falls back to, unless
// $MOAT_SYSTEM_HOME names another.
const DefaultSystemHome = "/var/lib/moat"

// EnvSystemHome overrides DefaultSystemHome: for a machine that keeps
// moat's shared state elsewhere, and for tests, which point it at a
// directory of their own so that the moat they run never reads the
// machine's.
const EnvSystemHome = "MOAT_SYSTEM_HOME"

// EnvData overrides Data().
const EnvData = "MOAT_DATA"

// LegacyData is the data directory relative to the working directory that
// moat used before it had a home (and uses when there is no home: no
// $HOME and not root).
const LegacyData = "moat-data"

// startHome is $HOME as the process started: in a test binary, the
// machine's user's home, which a test reaches only by setting $HOME to a
// directory of its own.
var startHome = os.Getenv("HOME")

// SystemHome returns the system's moat home: $MOAT_SYSTEM_HOME when it is
// set and absolute, else DefaultSystemHome; in a test binary, only
// $MOAT_SYSTEM_HOME ("" without it: the machine has no system home for a
// test).
func SystemHome() string {
	if s := os.Getenv(EnvSystemHome); filepath.IsAbs(s) {
		return s
	}
	if testing.Testing() {
		return ""
	}
	return DefaultSystemHome
}

// Home returns moat's home directory: $XDG_DATA_HOME/moat when
// $XDG_DATA_HOME is set and absolute (as the XDG spec requires; for root
// too: setting it is a choice), else SystemHome() as root, else
// $HOME/.local/share/moat. It returns "" when none can be named (not
// root, no $HOME; in a test binary, root without $MOAT_SYSTEM_HOME or a
// user whose $HOME is still the machine's). The directory may not exist
// yet.
func Home() string { return home(os.Geteuid() == 0) }

func home(root bool) string {
	if x := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "moat")
	}
	if root {
		return SystemHome()
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) && !(testing.Testing() && h == startHome) {
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

// SystemToolchains returns SystemHome()/toolchains, the toolchains root
// installed for every user, or "" when there is no system home.
func SystemToolchains() string {
	if s := SystemHome(); s != "" {
		return filepath.Join(s, "toolchains")
	}
	return ""
}

// OwnedDir returns nil when dir is a directory
// owned by the user moat runs as and writable by no one else (neither
// group nor others); else an error that says which. What moat keeps for the
// whole machine (toolchains.StateDir: machine code, interpreter images)
// is read back as trusted, so a directory another user may write is as
// good as theirs; the host checks its Config.MachineCacheDir with it too.
func OwnedDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by uid %d, which moat runs as", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by others (mode %04o): chmod go-w it", dir, fi.Mode().Perm())
	}
	return nil
}
