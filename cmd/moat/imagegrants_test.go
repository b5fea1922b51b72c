package main_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestRunPythonGrantsChange is issue 28's defect 4 through the binary: a
// Python plugin run with moat run (its resident image kept in the compile
// cache, which the test binary's moat processes share), then run again
// after its granted directories change in moat.yaml. It used to fail with
// "cannot open /dev/moat/ops: Bad file descriptor" (the first run's image
// restored under other grants). Each change works: the plugin reads the
// directories granted now, and not the one granted before.
func TestRunPythonGrantsChange(t *testing.T) {
	testenv.Slow(t, "seven moat runs of a Python plugin; languages/python's image tests keep the key")
	base := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, d, "x"), []byte("in-"+d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	plugin := filepath.Join(t.TempDir(), "grants")
	if err := os.MkdirAll(plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	main := "# " + hex.EncodeToString(nonce) + "\nimport moat\n\n\n@moat.action(\"read\")\ndef read(inp):\n" +
		"    out = []\n    for d in (" + `"` + a + `", "` + b + `"` + "):\n" +
		"        try:\n            with open(d + \"/x\") as f:\n                out.append(f.read())\n" +
		"        except OSError as e:\n            out.append(type(e).__name__)\n    return \" \".join(out)\n"
	if err := os.WriteFile(filepath.Join(plugin, "main.py"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(base, "profile.yaml")
	if err := os.WriteFile(profile, []byte("name: grants\ndefault:\n  capabilities:\n    filesystem: ["+a+", "+b+":rw]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	// A cache of its own, so that its images can be counted.
	cache := t.TempDir()
	t.Setenv("MOAT_CACHE_DIR", cache)
	for i, step := range []struct{ grants, want string }{
		{"[" + a + "]", "in-a FileNotFoundError"},
		{"[" + a + "]", "in-a FileNotFoundError"}, // the same grants: from the image
		{"[" + b + "]", "FileNotFoundError in-b"}, // another directory in its place
		{"[" + a + ", " + b + "]", "in-a in-b"},   // one added
		{"[" + b + ":rw]", "FileNotFoundError in-b"},
		{"[]", "FileNotFoundError FileNotFoundError"},
		{"[" + a + "]", "in-a FileNotFoundError"}, // back to the first: its image again
	} {
		mf := "name: grants\nversion: 0.1.0\nlanguage: python\nkind: moat\nactions: [{name: read}]\ncapabilities:\n  filesystem: " + step.grants + "\n"
		if err := os.WriteFile(filepath.Join(plugin, "moat.yaml"), []byte(mf), 0o644); err != nil {
			t.Fatal(err)
		}
		r := moat(t, "", "run", plugin, "read", "--profile", profile, "--data", data)
		if r.code != 0 || strings.TrimSpace(r.stdout) != step.want {
			t.Errorf("run %d with filesystem %s: exit %d, stdout %q; want %q\nstderr: %s", i+1, step.grants, r.code, r.stdout, step.want, r.stderr)
		}
		if strings.Contains(r.stderr, "Bad file descriptor") {
			t.Errorf("run %d: %s", i+1, r.stderr)
		}
	}
	// One image per set of grants (five), each made once: a run with the
	// grants of an earlier one started from its image (moat run's work
	// directory is new each time, and is not in the image's name).
	imgs, _ := filepath.Glob(filepath.Join(cache, "snapshots", "*.img"))
	if len(imgs) != 5 {
		t.Errorf("%d images after 7 runs under 5 sets of grants, want 5: %v", len(imgs), imgs)
	}
}
