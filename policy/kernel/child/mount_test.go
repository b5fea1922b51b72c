package child

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckMount: a guest path is refused at, above or below anything the
// job's root already holds (so no mkdir of its parents can land in a
// host directory or follow a link, and nothing of the root is hidden),
// and when it is /, relative or unclean; the host side must be a real
// directory with no symlink in its path.
func TestCheckMount(t *testing.T) {
	src := t.TempDir()
	file := filepath.Join(src, "f")
	os.WriteFile(file, nil, 0o644)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(src, link)
	taken := append(append(append(append([]string{}, SystemDirs...), ScratchDirs...), RootLinks...), "/etc/ssl", "/dev/null", "/home/ann/proj", "/srv/jobs/j1")
	for _, tc := range []struct {
		m    Mount
		want string // "" for allowed
	}{
		{Mount{Source: src, Target: "/data"}, ""},
		{Mount{Source: src, Target: "/home/ann/data", RW: true}, ""},
		{Mount{Source: src, Target: "/etc/app"}, ""},
		{Mount{Source: src, Target: "/"}, "cannot be /"},
		{Mount{Source: src, Target: "data"}, "absolute and clean"},
		{Mount{Source: src, Target: "/data/../proc"}, "absolute and clean"},
		{Mount{Source: src, Target: "/data/"}, "absolute and clean"},
		{Mount{Source: src, Target: "/da\x00ta"}, "absolute and clean"},
		{Mount{Source: src, Target: "/proc"}, "holds /proc"},
		{Mount{Source: src, Target: "/proc/self"}, "holds /proc"},
		{Mount{Source: src, Target: "/usr"}, "holds /usr"},
		{Mount{Source: src, Target: "/usr/local/data"}, "holds /usr"},
		{Mount{Source: src, Target: "/tmp/x"}, "holds /tmp"},
		{Mount{Source: src, Target: "/dev/shm"}, "holds /dev/shm"},
		{Mount{Source: src, Target: "/var/run/x"}, "holds /var/run"},
		{Mount{Source: src, Target: "/var"}, "holds /var"}, // /var/tmp, /var/run below it
		{Mount{Source: src, Target: "/etc"}, "holds /etc/ssl"},
		{Mount{Source: src, Target: "/dev"}, "holds /dev"},
		{Mount{Source: src, Target: "/home"}, "holds /home/ann/proj"}, // a bind below: its parents would be made in src
		{Mount{Source: src, Target: "/home/ann/proj/out"}, "holds /home/ann/proj"},
		{Mount{Source: src, Target: "/srv"}, "holds /srv/jobs/j1"},
		{Mount{Source: "relative", Target: "/data"}, "absolute, clean path"},
		{Mount{Source: link, Target: "/data"}, "no symlink"},
		{Mount{Source: file, Target: "/data"}, "not a directory"},
		{Mount{Source: filepath.Join(src, "missing"), Target: "/data"}, "must exist"},
	} {
		err := CheckMount(tc.m, taken)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want it allowed", tc.m, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want a refusal with %q", tc.m, err, tc.want)
		}
	}
}

// TestPlanRootChecksMounts: the wrapper's own plan refuses a Mount over
// what it binds, whatever its caller checked: the system directories, the
// job dir, a grant, a file it binds, the device files and the links it
// makes.
func TestPlanRootChecksMounts(t *testing.T) {
	src, job := t.TempDir(), t.TempDir()
	rs := &RootSpec{JobDir: job, JobDirBytes: 1 << 20, ScratchBytes: 1 << 20}
	for _, tc := range []struct {
		target string
		want   string
	}{
		{"/data", ""},
		{"/usr/share/x", "holds /usr"},
		{job + "/x", "holds /tmp"},
		{"/var/lib/x", "holds /var/lib"},
		{"/var/lib", "holds /var/lib"},
		{"/etc/hostname", "holds /etc/hostname"},
		{"/dev/null", "holds /dev/null"},
		{"/dev/fd/3", "holds /dev/fd"},
	} {
		fs := ChildFS{Target: "/usr/bin/true", ReadWrite: []string{job}, Granted: []string{"/var/lib"}, ReadOnly: []string{"/etc/hostname"},
			Mounts: []Mount{{Source: src, Target: tc.target}}}
		plan, err := planRoot(fs, rs)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.target, err)
		case tc.want == "" && (plan.binds[len(plan.binds)-1].src != src || plan.binds[len(plan.binds)-1].path != tc.target):
			t.Errorf("%s: the mount is not planned last with its source: %+v", tc.target, plan.binds)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a refusal with %q", tc.target, err, tc.want)
		}
	}
}
