package native

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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

// TestSeedHostile: a seed's files and directories land in the fresh job
// dir, the job's own to write; a symlink or a FIFO in a seed refuses the
// run (nothing is followed out of it), and so does a seed past the job
// dir's bytes; a seed is for the fresh job dir only.
func TestSeedHostile(t *testing.T) {
	needRoot(t)
	seed := t.TempDir()
	os.MkdirAll(filepath.Join(seed, "sub"), 0o755)
	os.WriteFile(filepath.Join(seed, "data.txt"), []byte("from the seed\n"), 0o644)
	os.WriteFile(filepath.Join(seed, "sub", "more.txt"), []byte("nested\n"), 0o644)
	r, err := Run(context.Background(), Spec{Command: []string{"/bin/sh", "-c", `read a < data.txt; read b < sub/more.txt; echo x >> data.txt; n=0; while read l; do n=$((n+1)); done < data.txt; echo "$a $b $n"`}, Seed: seed})
	if err != nil || r.Status != StatusOK || string(r.Stdout) != "from the seed nested 2\n" {
		t.Fatalf("seeded run: %v %+v stdout %q stderr %q", err, r, r.Stdout, r.Stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(seed, "data.txt")); string(b) != "from the seed\n" {
		t.Errorf("the job's write reached the seed: %q", b)
	}

	link := t.TempDir()
	os.Symlink("/etc/shadow", filepath.Join(link, "data.txt"))
	fifo := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(fifo, "f"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := t.TempDir()
	os.WriteFile(filepath.Join(big, "big"), make([]byte, 2<<20), 0o644)
	for name, spec := range map[string]Spec{
		"symlink":       {Seed: link},
		"fifo":          {Seed: fifo},
		"over the disk": {Seed: big, DiskBytes: 1 << 20},
	} {
		spec.Command = []string{"/bin/cat", "data.txt"}
		r, err := Run(context.Background(), spec)
		if err == nil && r.Status != StatusRefused {
			t.Errorf("%s: ran (%s, stdout %q); want a refusal", name, r.Status, r.Stdout)
		}
	}
	for _, spec := range []Spec{{Seed: "rel"}, {Seed: seed, Dir: t.TempDir()}} {
		spec.Command = []string{"true"}
		if _, err := Run(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "seed") {
			t.Errorf("seed %q dir %q: %v, want a refusal naming the seed", spec.Seed, spec.Dir, err)
		}
	}
}
