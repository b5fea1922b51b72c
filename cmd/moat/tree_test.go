package main_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// treeSecret stands for a private key outside every plugin: its bytes must
// reach no signature, no upload, no build and no output.
const treeSecret = "TREE-SECRET-5c1d0e-PRIVATE-KEY-BYTES"

// treeKind is a kind of plugin as moat new makes it.
type treeKind struct {
	lang, ext string
	compiled  bool
}

var treeKinds = []treeKind{
	{"javascript", ".js", false},
	{"python", ".py", false},
	{"python-native", ".py", false},
	{"go", ".go", true},
	{"c", ".c", true},
}

// treeCase plants one hostile entry in a plugin's directory dir (its name
// is name, sources end in ext); out is a directory outside it holding
// id_ed25519 and dir/key, both the secret, and moat.yaml, the plugin's
// manifest with the secret in a comment. want is in the refusal, after the
// plugin's directory.
type treeCase struct {
	name    string
	plant   func(t *testing.T, dir, name, ext, out string)
	want    func(name, ext, out string) string
	modules bool // the compiled kinds' module file: sign, verify and deploy read it
	sources bool // a source file: run and build read it (sign, verify and deploy too, for the interpreted and native kinds)
}

func link(t *testing.T, target, at string) {
	t.Helper()
	if err := os.Symlink(target, at); err != nil {
		t.Fatal(err)
	}
}

func fifo(t *testing.T, at string) {
	t.Helper()
	if err := syscall.Mkfifo(at, 0o644); err != nil {
		t.Fatal(err)
	}
}

var treeCases = []treeCase{
	{name: "link to a file outside", sources: true,
		plant: func(t *testing.T, dir, name, ext, out string) {
			link(t, filepath.Join(out, "id_ed25519"), filepath.Join(dir, "helpers"+ext))
		},
		want: func(name, ext, out string) string {
			return "helpers" + ext + " is a symbolic link (to " + filepath.Join(out, "id_ed25519") + "): a plugin's files must be regular files inside its directory"
		}},
	{name: "link to a directory outside", sources: true,
		plant: func(t *testing.T, dir, name, ext, out string) {
			link(t, filepath.Join(out, "dir"), filepath.Join(dir, "lib"))
		},
		want: func(name, ext, out string) string {
			return "lib is a symbolic link (to " + filepath.Join(out, "dir") + ")"
		}},
	{name: "FIFO", sources: true,
		plant: func(t *testing.T, dir, name, ext, out string) { fifo(t, filepath.Join(dir, "pipe"+ext)) },
		want: func(name, ext, out string) string {
			return "pipe" + ext + " is a FIFO (named pipe): a plugin's directory may hold only regular files and directories"
		}},
	{name: "link loop", sources: true,
		plant: func(t *testing.T, dir, name, ext, out string) {
			link(t, "loop2"+ext, filepath.Join(dir, "loop"+ext))
			link(t, "loop"+ext, filepath.Join(dir, "loop2"+ext))
		},
		want: func(name, ext, out string) string { return "loop" + ext + " is a symbolic link (to loop2" + ext + ")" }},
	{name: "link inside the tree", sources: true,
		plant: func(t *testing.T, dir, name, ext, out string) { link(t, "main"+ext, filepath.Join(dir, "alias"+ext)) },
		want:  func(name, ext, out string) string { return "alias" + ext + " is a symbolic link (to main" + ext + ")" }},
	{name: "manifest a link out", sources: true, modules: true,
		plant: func(t *testing.T, dir, name, ext, out string) {
			mf := filepath.Join(dir, "moat.yaml")
			b, err := os.ReadFile(mf)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(out, "moat.yaml"), append(b, "# "+treeSecret+"\n"...), 0o600)
			os.Remove(mf)
			link(t, filepath.Join(out, "moat.yaml"), mf)
		},
		want: func(name, ext, out string) string {
			return "moat.yaml is a symbolic link (to " + filepath.Join(out, "moat.yaml") + ")"
		}},
	{name: "module a link out", modules: true,
		plant: func(t *testing.T, dir, name, ext, out string) {
			link(t, filepath.Join(out, "id_ed25519"), filepath.Join(dir, name+".wasm"))
		},
		want: func(name, ext, out string) string {
			return name + ".wasm is a symbolic link (to " + filepath.Join(out, "id_ed25519") + ")"
		}},
	{name: "module a FIFO", modules: true,
		plant: func(t *testing.T, dir, name, ext, out string) { fifo(t, filepath.Join(dir, name+".wasm")) },
		want:  func(name, ext, out string) string { return name + ".wasm is a FIFO (named pipe)" }},
}

// moatTimed runs the moat binary in dir with env added, failing t if it
// has not ended within a minute (a FIFO opened for reading blocks).
func moatTimed(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, moatBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	r := runCmd(t, cmd)
	if ctx.Err() != nil {
		t.Fatalf("moat %s hung (killed after a minute): %+v", strings.Join(args, " "), r)
	}
	return r
}

// TestPluginTreeHostile (issue 27): one rule reads a plugin's tree on
// every path. For each kind of plugin (JavaScript, Python, native Python,
// Go, C) and each hostile entry (a link to a secret file outside, to a
// directory outside, a FIFO, a link loop, a link inside the tree, the
// manifest a link out, and for the compiled kinds the module a link out or
// a FIFO), every command that reads the entry (run, build, sign, verify,
// and deploy to a moat serve this test starts) refuses it with exit 2 and
// the message naming the entry, its target and the fix, without hanging;
// no signature or module is written, no temporary file is left, the
// secret's bytes are in no output, and the server stores nothing and holds
// no byte of the secret.
func TestPluginTreeHostile(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	work := t.TempDir()
	out := t.TempDir()
	writeFile(t, filepath.Join(out, "id_ed25519"), treeSecret)
	os.Mkdir(filepath.Join(out, "dir"), 0o755)
	writeFile(t, filepath.Join(out, "dir", "key"), treeSecret)
	tmp := t.TempDir() // the moat processes' TMPDIR: empty after each
	env := []string{"TMPDIR=" + tmp}
	if r := moatTimed(t, work, env, "keygen", "--out", "rel"); r.code != 0 {
		t.Fatalf("keygen: %+v", r)
	}
	data := t.TempDir()
	var rest bytes.Buffer
	_, base := startServe(t, &rest, "--data", data, "--listen", "127.0.0.1:0")
	key := strings.TrimSpace(moatTimed(t, work, nil, "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	if !strings.HasPrefix(key, "moat_") {
		t.Fatalf("keys create printed %q", key)
	}
	n := 0
	kinds := treeKinds
	if testing.Short() {
		// One interpreted kind and one compiled (the module's own cases):
		// the five kinds cost about 80 s of make check, and the rule that
		// reads the tree is one (package bundle).
		kinds = []treeKind{treeKinds[0], treeKinds[3]}
	}
	for _, k := range kinds {
		for _, c := range treeCases {
			if !c.sources && !k.compiled {
				continue // an interpreted or native plugin has no module file
			}
			var cmds [][]string
			if c.sources {
				cmds = append(cmds, []string{"run", "--data", filepath.Join(work, "data"), "DIR", "greet", "--input", "x"})
				if k.compiled {
					cmds = append(cmds, []string{"build", "--data", filepath.Join(work, "data"), "DIR"})
				}
			}
			if c.modules || !k.compiled {
				if !c.sources || !k.compiled {
					cmds = append(cmds, []string{"run", "--data", filepath.Join(work, "data"), "DIR", "greet", "--input", "x"})
				}
				cmds = append(cmds, []string{"sign", "DIR", "--key", filepath.Join(work, "rel.key")},
					[]string{"verify", "DIR", "--key", filepath.Join(work, "rel.pub")},
					[]string{"deploy", "DIR", "--server", base})
			}
			t.Run(k.lang+"/"+c.name, func(t *testing.T) {
				name := "p" + strings.ReplaceAll(strings.ReplaceAll(k.lang, "-", ""), "script", "")
				parent := t.TempDir()
				if r := moatTimed(t, parent, env, "new", name, "--lang", k.lang); r.code != 0 {
					t.Fatalf("new: %+v", r)
				}
				dir := filepath.Join(parent, name)
				c.plant(t, dir, name, k.ext, out)
				want := filepath.Join(dir, c.want(name, k.ext, out))
				seen := map[string]bool{}
				for _, args := range cmds {
					args = append([]string(nil), args...)
					for i := range args {
						if args[i] == "DIR" {
							args[i] = dir
						}
					}
					if seen[args[0]] {
						continue
					}
					seen[args[0]] = true
					if args[0] == "build" {
						testenv.Require(t, langMissing(k.lang))
					}
					n++
					r := moatTimed(t, parent, append(env, "MOAT_API_KEY="+key), args...)
					if r.code != 2 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "remove") {
						t.Errorf("moat %s: exit %d, stderr %q; want exit 2 and %q", args[0], r.code, r.stderr, want)
					}
					if strings.Contains(r.stdout+r.stderr, treeSecret) {
						t.Errorf("moat %s showed the secret's bytes", args[0])
					}
				}
				if sigs, _ := filepath.Glob(filepath.Join(dir, "*.minisig")); len(sigs) != 0 {
					t.Errorf("a signature was written: %v", sigs)
				}
				if c.sources && k.compiled {
					if _, err := os.Lstat(filepath.Join(dir, name+".wasm")); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("a module was built: %v", err)
					}
				}
				if left, _ := os.ReadDir(tmp); len(left) != 0 {
					t.Errorf("left in TMPDIR: %v", left)
				}
				if b, _ := os.ReadFile(filepath.Join(out, "id_ed25519")); string(b) != treeSecret {
					t.Errorf("the secret was written through the link: %q", b)
				}
			})
		}
	}
	t.Logf("%d refused invocations", n)
	// The server got nothing: no module, no byte of the secret anywhere
	// in its data directory (its database, blobs, unpacked sources).
	req, _ := http.NewRequest("GET", base+"/v1/modules", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var list struct{ Modules []any }
	if res.StatusCode != 200 || json.Unmarshal(body, &list) != nil || len(list.Modules) != 0 {
		t.Errorf("GET /v1/modules: %s %s; want no module", res.Status, body)
	}
	assertNoSecret(t, data)
}

// assertNoSecret fails t if a file under dir holds the secret's bytes.
func assertNoSecret(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(treeSecret)) {
				t.Errorf("%s holds the secret's bytes", p)
			}
		}
		return nil
	})
}

// TestServeRefusesHostileArchive (issue 27, the server's side): an upload
// to moat serve whose archive holds a link (symbolic or hard), a device, a
// FIFO, an absolute name or a name climbing out with .. is refused at the
// unpack, 400 invalid_argument naming the entry, with a load deny audited
// under the rule "archive"; nothing is stored, and the link's target's
// bytes are nowhere in the server's data.
func TestServeRefusesHostileArchive(t *testing.T) {
	data := t.TempDir()
	var rest bytes.Buffer
	_, base := startServe(t, &rest, "--data", data, "--listen", "127.0.0.1:0")
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	mf := []byte("name: p\nversion: 0.1.0\nlanguage: javascript\nactions:\n  - name: greet\n")
	type ent struct {
		name string
		typ  byte
		link string
		body []byte
	}
	tarOf := func(es ...ent) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, e := range es {
			tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Size: int64(len(e.body)), Mode: 0o644, Devmajor: 1, Devminor: 3})
			tw.Write(e.body)
		}
		tw.Close()
		return b.Bytes()
	}
	zipLink := func() []byte {
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		w, _ := zw.Create("p/moat.yaml")
		w.Write(mf)
		h := &zip.FileHeader{Name: "p/helpers.js"}
		h.SetMode(fs.ModeSymlink | 0o777)
		w, _ = zw.CreateHeader(h)
		w.Write([]byte("/root/.ssh/id_ed25519"))
		zw.Close()
		return b.Bytes()
	}
	main := ent{name: "p/main.js", typ: tar.TypeReg, body: []byte("console.log(1)\n")}
	yaml := ent{name: "p/moat.yaml", typ: tar.TypeReg, body: mf}
	for i, tc := range []struct {
		name, ctype string
		body        []byte
		want        string
	}{
		{"tar symlink out", "application/x-tar", tarOf(yaml, main, ent{name: "p/helpers.js", typ: tar.TypeSymlink, link: "/root/.ssh/id_ed25519"}), `entry "p/helpers.js": is a symbolic link (to "/root/.ssh/id_ed25519")`},
		{"tar symlink dir", "application/x-tar", tarOf(yaml, main, ent{name: "p/lib", typ: tar.TypeSymlink, link: "/root"}), `entry "p/lib": is a symbolic link`},
		{"tar hard link", "application/x-tar", tarOf(yaml, main, ent{name: "p/h.js", typ: tar.TypeLink, link: "/etc/shadow"}), `entry "p/h.js": is a hard link`},
		{"tar FIFO", "application/x-tar", tarOf(yaml, main, ent{name: "p/pipe.js", typ: tar.TypeFifo}), `entry "p/pipe.js": is a FIFO`},
		{"tar device", "application/x-tar", tarOf(yaml, main, ent{name: "p/null.js", typ: tar.TypeChar}), `entry "p/null.js": is a character device`},
		{"tar ..", "application/x-tar", tarOf(yaml, ent{name: "p/../../main.js", typ: tar.TypeReg, body: []byte("x")}), "climbs out of the archive"},
		{"tar absolute", "application/x-tar", tarOf(yaml, ent{name: "/etc/main.js", typ: tar.TypeReg, body: []byte("x")}), "is an absolute path"},
		{"zip symlink", "application/zip", zipLink(), `entry "p/helpers.js": is a symbolic link`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "tree-archive-" + string(rune('a'+i))
			req, _ := http.NewRequest("POST", base+"/v1/modules", bytes.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", tc.ctype)
			req.Header.Set("X-Request-Id", id)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var p struct{ Code, Detail string }
			json.Unmarshal(body, &p)
			if res.StatusCode != 400 || p.Code != "invalid_argument" || !strings.Contains(p.Detail, tc.want) {
				t.Fatalf("upload: %s %s; want 400 invalid_argument with %q", res.Status, body, tc.want)
			}
			req, _ = http.NewRequest("GET", base+"/v1/audit?correlation_id="+id, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			res, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var a struct{ Events []map[string]any }
			json.NewDecoder(res.Body).Decode(&a)
			res.Body.Close()
			found := false
			for _, e := range a.Events {
				if e["kind"] == "load" && e["decision"] == "deny" && e["rule"] == "archive" {
					found = true
				}
			}
			if !found {
				t.Errorf("no load deny audited under rule archive: %v", a.Events)
			}
		})
	}
	req, _ := http.NewRequest("GET", base+"/v1/modules", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Modules []any }
	json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	if len(list.Modules) != 0 {
		t.Errorf("stored %d modules, want none", len(list.Modules))
	}
}
