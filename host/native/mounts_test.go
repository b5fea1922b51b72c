package native

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileMounts: a directory shown at a guest path of the job's root
// (Spec.Mounts) is read there and nowhere else: its host path is not in
// the root (the host side may lie under /tmp, which the job gets fresh);
// a read-only one refuses writes (EROFS); a read-write one takes files
// but nothing executes from either (copy-exec, mmap-exec). A guest path
// over what the root holds is refused before a job starts, by name.
func TestHostileMounts(t *testing.T) {
	needRoot(t)
	ro, rw := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ro, "in.txt"), []byte("in"), 0o644)
	os.Chmod(ro, 0o755)
	os.Chmod(rw, 0o777) // the job's uid is its own: the directory's permissions decide
	spec := Spec{Mounts: []Mount{{Source: ro, Target: "/data"}, {Source: rw, Target: "/srv/out", RW: true}}}
	runHostile(t, []hostileCase{
		{[]string{"read", "/data/in.txt"}, "ok"},
		{[]string{"write", "/data/in.txt"}, "EROFS"},
		{[]string{"write", "/data/new"}, "EROFS"},
		{[]string{"write", "/srv/out/new"}, "ok"},
		{[]string{"mkdir", "/srv/out/d"}, "ok"},
		{[]string{"copy-exec", "/srv/out/copy"}, "EACCES"},
		{[]string{"mmap-exec", "/srv/out/lib.so"}, "EPERM"},
		{[]string{"stat", filepath.Join(ro, "in.txt")}, "ENOENT"},
		{[]string{"stat", rw}, "ENOENT"},
		{[]string{"write", "/srv/probe"}, "EROFS"}, // the guest path's parent is the read-only root's
	}, spec)
	if _, err := os.Stat(filepath.Join(rw, "new")); err != nil {
		t.Errorf("the write to the read-write mount did not reach its host directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		t.Error("a write reached the read-only mount's host directory")
	}

	for _, tc := range []struct {
		m    Mount
		want string
	}{
		{Mount{Source: ro, Target: "/"}, "cannot be /"},
		{Mount{Source: ro, Target: "/proc/sys"}, "holds /proc"},
		{Mount{Source: ro, Target: "/usr/lib/x"}, "holds /usr"},
		{Mount{Source: ro, Target: "/etc"}, "holds /etc/"},
		{Mount{Source: ro, Target: "/dev/shm"}, "holds /dev/shm"},
		{Mount{Source: ro, Target: "/var"}, "holds /var/"},
		{Mount{Source: ro, Target: JobsDir() + "/x"}, "holds /tmp"},
		{Mount{Source: ro, Target: "/data/../tmp"}, "absolute and clean"},
	} {
		_, err := Run(context.Background(), Spec{Command: []string{"true"}, Mounts: []Mount{tc.m}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mount at %s: %v, want a refusal with %q", tc.m.Target, err, tc.want)
		}
	}
	two := Spec{Command: []string{"true"}, Mounts: []Mount{{Source: ro, Target: "/a"}, {Source: rw, Target: "/a/b"}}}
	if _, err := Run(context.Background(), two); err == nil || !strings.Contains(err.Error(), "holds /a") {
		t.Errorf("nested mounts: %v, want a refusal", err)
	}
	given := Spec{Command: []string{"true"}, ReadOnly: []string{"/srv"}, Mounts: []Mount{{Source: ro, Target: "/srv/x"}}}
	if _, err := Run(context.Background(), given); err == nil || !strings.Contains(err.Error(), "holds /srv") {
		t.Errorf("a mount under a grant: %v, want a refusal", err)
	}
}
