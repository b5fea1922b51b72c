package main_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// cacheFiles counts the regular files under dir (wazero's compiled code,
// snapshots), none when it does not exist.
func cacheFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// TestCacheDirApart: with $MOAT_CACHE_DIR (or --cache-dir, which wins)
// the compile cache is there and not in the data directory, for run
// (strictly confined: Landlock must let the host write it), inspect
// (a second data directory finds the first's machine code) and exec; a
// server configuration's cache_dir wins over the variable, as its
// data_dir wins over $MOAT_DATA; and confine-check shows the cache
// writable under the host's layers.
func TestCacheDirApart(t *testing.T) {
	plugin := filepath.Join(testwasm.RepoRoot(t), "testdata", "plugin.wasm")
	cache := filepath.Join(t.TempDir(), "shared-cache")
	t.Setenv("MOAT_CACHE_DIR", cache)

	data := t.TempDir()
	r := moat(t, "", "run", "--data", data, "--confine", "strict", plugin, "echo", "--input", "confined")
	if r.code != 0 || r.stdout != "confined" {
		t.Fatalf("strict run with the cache apart: %+v", r)
	}
	if n := cacheFiles(t, cache); n == 0 {
		t.Fatalf("the confined run wrote no machine code to $MOAT_CACHE_DIR %s", cache)
	}
	if _, err := os.Stat(filepath.Join(data, "cache")); !os.IsNotExist(err) {
		t.Errorf("run made a cache in --data although $MOAT_CACHE_DIR is set (%v)", err)
	}

	// Another data directory, the same cache: compiled already.
	other := t.TempDir()
	if r := moat(t, "", "inspect", "--data", other, plugin); r.code != 0 || !strings.Contains(r.stdout, "machine code:  from the disk cache") {
		t.Errorf("inspect with another --data did not find the machine code in $MOAT_CACHE_DIR:\n%s%s", r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(other, "cache")); !os.IsNotExist(err) {
		t.Errorf("inspect made a cache in --data although $MOAT_CACHE_DIR is set (%v)", err)
	}

	// --cache-dir wins over the variable.
	flagged := filepath.Join(t.TempDir(), "flagged")
	if r := moat(t, "", "inspect", "--data", other, "--cache-dir", flagged, plugin); r.code != 0 || !strings.Contains(r.stdout, "machine code:  compiled now") {
		t.Errorf("inspect --cache-dir did not compile into a cache of its own:\n%s%s", r.stdout, r.stderr)
	}
	if cacheFiles(t, flagged) == 0 {
		t.Errorf("--cache-dir %s holds nothing", flagged)
	}

	// exec: the interpreter's machine code, not the build cache, follows.
	needTool(t, "/usr/bin/clang-19")
	execData := t.TempDir()
	before := cacheFiles(t, cache)
	if r := moat(t, "", "exec", "--data", execData, "--lang", "c", "-e", `int main(void){return 0;}`); r.code != 0 {
		t.Fatalf("exec: %+v", r)
	}
	if cacheFiles(t, cache) <= before {
		t.Errorf("exec compiled its program but $MOAT_CACHE_DIR gained no file")
	}
	if _, err := os.Stat(filepath.Join(execData, "cache")); !os.IsNotExist(err) {
		t.Errorf("exec made a cache in --data although $MOAT_CACHE_DIR is set (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(execData, "build-cache")); err != nil {
		t.Errorf("the build cache left the data directory: %v", err)
	}

	// A server configuration's cache_dir wins over $MOAT_CACHE_DIR.
	dir := t.TempDir()
	configured := filepath.Join(dir, "configured")
	cfg := filepath.Join(dir, "moat-server.yaml")
	os.WriteFile(cfg, []byte("data_dir: "+filepath.Join(dir, "served")+"\ncache_dir: "+configured+"\n"), 0o644)
	if r := moat(t, "", "inspect", "--config", cfg, plugin); r.code != 0 || !strings.Contains(r.stdout, "machine code:  compiled now") || cacheFiles(t, configured) == 0 {
		t.Errorf("inspect --config did not use its cache_dir %s:\n%s%s", configured, r.stdout, r.stderr)
	}

	r = moat(t, "", "confine-check", "--data", t.TempDir())
	if r.code != 0 || !strings.Contains(r.stdout, "write in the compile cache") || strings.Contains(r.stdout, "NOT HELD") {
		t.Errorf("confine-check with the cache apart:\n%s%s", r.stdout, r.stderr)
	}
}

// TestCacheDirUnusable: a cache directory that cannot be made or written
// (a file, a directory under a file, a directory moat may not write)
// fails the command before it runs anything, exit 2, with one line naming
// the directory, the setting it came from and the fix.
func TestCacheDirUnusable(t *testing.T) {
	plugin := filepath.Join(testwasm.RepoRoot(t), "testdata", "plugin.wasm")
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, []byte("not a directory"), 0o600)
	// A directory moat may not write: as root permissions do not hold,
	// so sysfs, which refuses new files to everyone.
	readOnly := "/sys/kernel"
	if os.Geteuid() != 0 {
		readOnly = t.TempDir()
		os.Chmod(readOnly, 0o500)
		t.Cleanup(func() { os.Chmod(readOnly, 0o700) })
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "moat-server.yaml")
	os.WriteFile(cfg, []byte("cache_dir: "+file+"\n"), 0o644)

	for _, tt := range []struct {
		name string
		env  string
		args []string
		want []string
	}{
		{"env is a file", file, []string{"run", plugin, "echo", "--input", "x"},
			[]string{"compile cache " + file, "$MOAT_CACHE_DIR", "not a directory", "unset it"}},
		{"env under a file, confined", filepath.Join(file, "sub"), []string{"run", "--confine", "strict", plugin, "echo", "--input", "x"},
			[]string{"compile cache " + filepath.Join(file, "sub"), "$MOAT_CACHE_DIR", "not a directory"}},
		{"env not writable", readOnly, []string{"inspect", plugin},
			[]string{"compile cache " + readOnly, "$MOAT_CACHE_DIR", "not writable", "unset it"}},
		{"flag is a file", "", []string{"exec", "--cache-dir", file, "--lang", "javascript", "-e", "1"},
			[]string{"compile cache " + file, "--cache-dir", "give --cache-dir a directory moat may create and write"}},
		{"config is a file", "", []string{"inspect", "--config", cfg, plugin},
			[]string{"compile cache " + file, "cache_dir in " + cfg, "set cache_dir in " + cfg}},
		{"serve flag is a file", "", []string{"serve", "--cache-dir", file, "--listen", "127.0.0.1:0"},
			[]string{"compile cache " + file, "--cache-dir"}},
		{"confine-check env is a file", file, []string{"confine-check"},
			[]string{"compile cache " + file, "$MOAT_CACHE_DIR"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MOAT_CACHE_DIR", tt.env)
			r := moat(t, "", append(tt.args, "--data", t.TempDir())...)
			if r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line", r.code, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q lacks %q", r.stderr, w)
				}
			}
		})
	}
}

// TestServeCacheDirApart: moat serve, confined (best-effort: Landlock
// where the kernel has it), keeps machine code in --cache-dir, which wins
// over $MOAT_CACHE_DIR, logs where the cache is and which setting put it
// there, and makes no cache in its data directory.
func TestServeCacheDirApart(t *testing.T) {
	testenv.Slow(t, "confined moat serve processes compiling into fresh caches")
	data := t.TempDir()
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	env := filepath.Join(t.TempDir(), "from-env")
	flagged := filepath.Join(t.TempDir(), "from-flag")
	var log lockedBuffer
	_, base, _ := serveLogged(t, &log, []string{"MOAT_CACHE_DIR=" + env}, "--data", data, "--cache-dir", flagged, "--listen", "127.0.0.1:0")
	if log.line("compile cache", "dir="+flagged, "from=--cache-dir") == "" {
		t.Errorf("serve does not log its compile cache and the setting:\n%s", &log)
	}
	up, ct := storeModule(t, "1.0.0")
	if code, out, err := api(base, key, "POST", "/v1/modules", up, ct); code != 201 {
		t.Fatalf("upload: %d %s %v\n%s", code, out, err, &log)
	}
	if code, out, err := api(base, key, "POST", "/v1/modules/store/actions/kv", "put k v", ""); code != 200 || out != "ok" {
		t.Fatalf("invoke: %d %s %v\n%s", code, out, err, &log)
	}
	if cacheFiles(t, flagged) == 0 {
		t.Errorf("the confined server compiled the module but wrote nothing to --cache-dir %s:\n%s", flagged, &log)
	}
	if cacheFiles(t, env) != 0 {
		t.Errorf("$MOAT_CACHE_DIR %s was used although --cache-dir was given", env)
	}
	if _, err := os.Stat(filepath.Join(data, "cache")); !os.IsNotExist(err) {
		t.Errorf("serve made a cache in its data directory although --cache-dir was given (%v)", err)
	}
}
