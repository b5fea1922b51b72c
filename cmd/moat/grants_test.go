package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestRunDirFile: moat run of a WASI command with --dir and --file, the
// process strictly confined. A read-only directory is read and refuses
// writes (EROFS); an :rw one is written; a --file is read at its guest
// path and nothing beside it shows; a symlink in a granted directory
// leads nowhere outside it; the guest never sees a directory it was not
// handed.
func TestRunDirFile(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	base := t.TempDir()
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	os.Mkdir(ro, 0o755)
	os.Mkdir(rw, 0o755)
	os.WriteFile(filepath.Join(ro, "in.txt"), []byte("from-ro"), 0o644)
	os.WriteFile(filepath.Join(base, "secret.txt"), []byte("neighbour"), 0o644)
	os.WriteFile(filepath.Join(base, "client.txt"), []byte("the-file"), 0o644)
	os.Symlink("/etc/hostname", filepath.Join(ro, "escape"))
	cmd := filepath.Join(t.TempDir(), "fscmd.wasm")
	os.WriteFile(cmd, testwasm.BuildGo(t, "./testdata/fscmd", false), 0o644)
	data := t.TempDir()
	grants := []string{"--dir", ro + ":/in", "--dir", rw + ":/out:rw", "--file", filepath.Join(base, "client.txt") + ":/work/client.txt"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"read", "/in/in.txt"}, "ok from-ro"},
		{[]string{"write", "/in/in.txt", "x"}, "err EROFS"},
		{[]string{"write", "/out/new.txt", "written"}, "ok"},
		{[]string{"read", "/work/client.txt"}, "ok the-file"},
		{[]string{"list", "/work"}, "ok client.txt"},
		{[]string{"read", "/work/../secret.txt"}, "err"},
		{[]string{"read", "/in/escape"}, "err"},
		{[]string{"read", ro + "/in.txt"}, "err"},
	} {
		args := append(append([]string{"run", "--data", data, "--confine", "strict", cmd}, grants...), append([]string{"--"}, tc.args...)...)
		r := moat(t, "", args...)
		if !strings.HasPrefix(r.stdout, tc.want) {
			t.Errorf("%v: exit %d stdout %q stderr %q; want %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(rw, "new.txt")); err != nil || string(b) != "written" {
		t.Errorf("the rw directory holds %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ro, "in.txt")); string(b) != "from-ro" {
		t.Errorf("the read-only file changed: %q", b)
	}
	// The write is on the record, as a plugin's file grant's.
	if a := moat(t, "", "audit", "--data", data, "--kind", "op", "--json"); a.code != 0 || !strings.Contains(a.stdout, `"decision":"allow","correlation_id"`) || !strings.Contains(a.stdout, "new.txt") {
		t.Errorf("audit of the write: %+v", a)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dir", ro + ":in"}, "must be absolute"},
		{[]string{"--dir", filepath.Join(base, "client.txt")}, "not a directory"},
		{[]string{"--file", ro}, "not a regular file"},
		{[]string{"--dir", ro + ":/a", "--dir", rw + ":/a/b:rw"}, "overlap"},
		{[]string{"--dir", data + ":/d"}, "moat's own data directory"},
	} {
		args := append(append([]string{"run", "--data", data, cmd}, tc.args...), "--", "list", "/")
		if r := moat(t, "", args...); r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d stderr %q; want a refusal with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestExecNativeDirFile: the README's client.py example. A native program
// run with --dir . --workdir . finds client.py in its working directory,
// reads a --file, writes an :rw directory as the job's own uid, and sees
// nothing else of the host's tree; a read-only grant refuses writes.
func TestExecNativeDirFile(t *testing.T) {
	testenv.Require(t, testenv.NativePython(false))
	// Not under /tmp or /var/tmp: a native job gets fresh ones of its own.
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory to make the test's directories in")
	}
	base, err := os.MkdirTemp(home, "moat-grants-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	work, out := filepath.Join(base, "work"), filepath.Join(base, "out")
	os.Mkdir(work, 0o755)
	os.Mkdir(out, 0o755)
	os.Chmod(out, 0o777) // the job runs as a uid of its own: the directory's permissions decide
	os.WriteFile(filepath.Join(work, "client.py"), []byte(`import os, sys
print("cwd", os.getcwd(), sorted(os.listdir(".")))
print(open(sys.argv[1]).read())
open(sys.argv[2] + "/result.txt", "w").write("done")
try:
    open("client.py", "a").write("x")
except OSError as e:
    print("read-only", e.errno in (13, 30))
print("parent", os.path.exists(os.path.join(sys.argv[3], "secret.txt")))
`), 0o644)
	os.WriteFile(filepath.Join(base, "input.txt"), []byte("input-data"), 0o644)
	os.WriteFile(filepath.Join(base, "secret.txt"), []byte("x"), 0o644)
	t.Chdir(work)
	r := moat(t, "", "exec", "--data", t.TempDir(), "--native", "--dir", ".", "--workdir", ".", "--file", "../input.txt", "--dir", out+":rw",
		"--", "python3", "client.py", filepath.Join(base, "input.txt"), out, base)
	want := "cwd " + work + " ['client.py']\ninput-data\nread-only True\nparent False\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %s", r.code, r.stdout, want, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(out, "result.txt")); err != nil || string(b) != "done" {
		t.Errorf("the rw directory: %q, %v", b, err)
	}
	if r := moat(t, "", "exec", "--data", t.TempDir(), "--native", "--file", filepath.Join(base, "input.txt")+":/in.txt", "--", "true"); r.code != 2 || !strings.Contains(r.stderr, "its own path") {
		t.Errorf("a guest path for a native run's file: %+v", r)
	}
	if r := moat(t, "", "exec", "--data", t.TempDir(), "--native", "--workdir", base, "--", "true"); r.code != 2 || !strings.Contains(r.stderr, "add --dir") {
		t.Errorf("an ungranted workdir: %+v", r)
	}
}

// TestExecLangDirFile: moat exec --lang (a WASM run, JavaScript on
// QuickJS) reads a --dir and a --file at their guest paths, writes an :rw
// directory, and is refused a write to a read-only one.
func TestExecLangDirFile(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	base := t.TempDir()
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	os.Mkdir(ro, 0o755)
	os.Mkdir(rw, 0o755)
	os.WriteFile(filepath.Join(ro, "in.txt"), []byte("from-ro"), 0o644)
	os.WriteFile(filepath.Join(base, "f.txt"), []byte("the-file"), 0o644)
	main := filepath.Join(base, "main.js")
	os.WriteFile(main, []byte(`
print(std.loadFile("/data/in.txt"), std.loadFile("/work/f.txt"));
const w = std.open("/out/o.txt", "w"); w.puts("written"); w.close();
print(std.open("/data/x.txt", "w") === null ? "refused" : "written to ro");
print(std.loadFile("`+filepath.Join(base, "f.txt")+`") === null ? "no host path" : "host path seen");
`), 0o644)
	r := moat(t, "", "exec", "--data", t.TempDir(), "--lang", "javascript", "--dir", ro+":/data", "--dir", rw+":/out:rw", "--file", filepath.Join(base, "f.txt")+":/work/f.txt", main)
	if want := "from-ro the-file\nrefused\nno host path\n"; r.code != 0 || r.stdout != want {
		t.Errorf("exit %d stdout %q stderr %q; want %q", r.code, r.stdout, r.stderr, want)
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "o.txt")); string(b) != "written" {
		t.Errorf("the rw directory holds %q", b)
	}
	if r := moat(t, "", "exec", "--data", t.TempDir(), "--lang", "javascript", "--dir", ro+":/src", main); r.code == 0 || !strings.Contains(r.stderr, "overlaps /src") {
		t.Errorf("a mount over the run's own /src: %+v", r)
	}
}

// TestExecNativeDirGuest: a native run's --dir HOST:GUEST is bound at
// GUEST in the job's own root, read-only (EROFS) or :rw, and --workdir
// takes the guest path or the host one; the host path itself is not in
// the root. A host directory under /tmp may be shown elsewhere (only at
// its own path would it take the scratch tmpfs's rights). Every GUEST
// that would lie at, above or below what the root holds (/, /proc, the
// system and scratch directories, /etc's files, /dev, /var/run, another
// grant) is refused by name before a job starts, exit 2.
func TestExecNativeDirGuest(t *testing.T) {
	testenv.Root(t, "the native layer stack (uid switch, own root) needs root; CI runs as root")
	base := t.TempDir() // under /tmp: allowed as the host side of a mount
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	os.Mkdir(ro, 0o755)
	os.Mkdir(filepath.Join(ro, "sub"), 0o755)
	os.Mkdir(rw, 0o777)
	os.Chmod(rw, 0o777) // the job's uid is its own: the directory's permissions decide
	os.WriteFile(filepath.Join(ro, "in.txt"), []byte("from-ro"), 0o644)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(ro, link)
	data := t.TempDir()
	sh := func(args ...string) result {
		t.Helper()
		return moat(t, "", append([]string{"exec", "--data", data, "--native"}, args...)...)
	}
	script := `read a < /data/in.txt; echo "$a"; echo "$(pwd)"; ( echo x > /data/new ) 2>/dev/null || echo ro-refused; echo w > /out/o.txt && echo rw-ok; [ -e ` + ro + ` ] && echo host-path-seen; true`
	r := sh("--dir", ro+":/data", "--dir", rw+":/out:rw", "--workdir", "/data/sub", "--", "sh", "-c", script)
	if want := "from-ro\n/data/sub\nro-refused\nrw-ok\n"; r.code != 0 || r.stdout != want {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %s", r.code, r.stdout, want, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "o.txt")); err != nil || string(b) != "w\n" {
		t.Errorf("the rw directory: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		t.Error("a write reached the read-only directory")
	}
	// --workdir by its host path, and a symlinked host path: its target.
	if r := sh("--dir", link+":/data", "--workdir", filepath.Join(ro, "sub"), "--", "sh", "-c", `pwd; read a < ../in.txt; echo "$a"`); r.code != 0 || r.stdout != "/data/sub\nfrom-ro\n" {
		t.Errorf("workdir by host path: exit %d %q %s", r.code, r.stdout, r.stderr)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dir", ro + ":/"}, "cannot be /"},
		{[]string{"--dir", ro + ":/proc"}, "holds /proc"},
		{[]string{"--dir", ro + ":/data/../proc"}, "holds /proc"},
		{[]string{"--dir", ro + ":/usr/local/x"}, "holds /usr"},
		{[]string{"--dir", ro + ":/bin"}, "holds /bin"},
		{[]string{"--dir", ro + ":/tmp/x"}, "holds /tmp"},
		{[]string{"--dir", ro + ":/etc"}, "holds /etc/"},
		{[]string{"--dir", ro + ":/etc/ssl"}, "holds /etc/ssl"},
		{[]string{"--dir", ro + ":/dev"}, "holds /dev"},
		{[]string{"--dir", ro + ":/var/run/x"}, "holds /var/run"},
		{[]string{"--dir", ro + ":/data", "--dir", rw + ":/data/out:rw"}, "overlap"},
		{[]string{"--dir", ro + ":/srv", "--dir", "/srv"}, "holds /srv"},
		{[]string{"--dir", ro + ":data"}, "must be absolute"},
		{[]string{"--file", filepath.Join(ro, "in.txt") + ":/in.txt"}, "its own path"},
	} {
		if _, err := os.Stat("/srv"); err != nil && strings.Contains(strings.Join(tc.args, " "), " /srv") {
			continue
		}
		if r := sh(append(tc.args, "--", "true")...); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d stderr %q; want exit 2 naming %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
