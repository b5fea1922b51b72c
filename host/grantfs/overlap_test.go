package grantfs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/grantfs"
	"github.com/moat-sandbox/moat/internal/testenv"
	"golang.org/x/sys/unix"
)

const ownMountNSEnv = "MOAT_GRANTFS_OWN_MOUNTNS"

// TestOverlapBindMounts: a directory is the data directory, lies within
// it or holds it whatever path shows it: through a bind mount of it, of
// a directory inside it, or of a parent of it, placed anywhere, either
// way round; directories apart from it, a bind mount of one included, do
// not overlap it. It runs in a mount namespace of its own (unshare -m),
// where it makes the bind mounts.
func TestOverlapBindMounts(t *testing.T) {
	if os.Getenv(ownMountNSEnv) != "1" {
		why := ""
		if os.Geteuid() != 0 {
			why = "needs root to make bind mounts in a mount namespace of its own"
		} else if _, err := exec.LookPath("unshare"); err != nil {
			why = "needs unshare (util-linux)"
		}
		testenv.Require(t, why)
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("unshare", "-m", "--propagation", "private", exe, "-test.run=^TestOverlapBindMounts$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), ownMountNSEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestOverlapBindMounts") {
			t.Fatalf("in a mount namespace of its own: %v\n%s", err, out)
		}
		t.Logf("%s", out)
		return
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	j := func(p string) string { return filepath.Join(base, p) }
	for _, d := range []string{"data/sub/deeper", "other", "bind", "holder/m", "holder2/m", "holder3/m", "holder4/m", "g2", "up/m", "data/sub/g"} {
		if err := os.MkdirAll(j(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bind := func(from, to string) {
		t.Helper()
		if err := unix.Mount(j(from), j(to), "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind %s on %s: %v", from, to, err)
		}
		t.Cleanup(func() { unix.Unmount(j(to), unix.MNT_DETACH) })
	}
	bind("data", "bind")          // the data directory at a second path
	bind("data", "holder/m")      // ... inside a directory that might be granted
	bind("data/sub", "holder2/m") // a directory inside it, inside another
	bind("other", "holder3/m")    // something else entirely
	bind(".", "up/m")             // a parent of it, inside another
	bind("g2", "data/sub/g")      // a directory shown inside the data directory
	bind("holder3", "holder4/m")  // a bind of a bind of something else
	data := j("data")
	for _, tt := range []struct {
		dir  string
		want bool
	}{
		{"data", true},
		{"data/sub", true},
		{".", true},
		{"bind", true},
		{"bind/sub", true},
		{"bind/sub/deeper", true},
		{"holder", true},
		{"holder/m", true},
		{"holder2", true},
		{"holder2/m/deeper", true},
		{"up", true},
		{"up/m", true},
		{"up/m/data", true},
		{"g2", true}, // the data directory shows it: a guest's files would be written into it
		{"other", false},
		{"holder3", false},
		{"holder3/m", false},
		{"holder4", false},
	} {
		got, err := grantfs.Overlap(j(tt.dir), data)
		if err != nil || got != tt.want {
			t.Errorf("Overlap(%s, data) = %v, %v; want %v", tt.dir, got, err, tt.want)
		}
		// Either way round.
		if back, err := grantfs.Overlap(data, j(tt.dir)); err != nil || back != tt.want {
			t.Errorf("Overlap(data, %s) = %v, %v; want %v", tt.dir, back, err, tt.want)
		}
	}
	if _, err := grantfs.Overlap(j("missing"), data); err == nil {
		t.Error("Overlap of a missing directory: no error")
	}
}
