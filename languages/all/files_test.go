package all_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// The interpreted plugins' probes: each reads a granted file, writes one,
// and tries what the grant refuses, printing one "name=outcome" per line,
// where an outcome is ok, the text read, or the errno's name.
var fileProbes = map[string][2]string{
	"javascript": {"main.js", `
const ro = std.getenv("RO"), rw = std.getenv("RW");
const names = {63: "EPERM", 69: "EROFS", 44: "ENOENT", 32: "ELOOP", 8: "EBADF"};
const errno = (e) => names[-e] ?? String(-e);
function read(p) {
  const fd = os.open(p, os.O_RDONLY);
  if (fd < 0) return errno(fd);
  const buf = new ArrayBuffer(64);
  const n = os.read(fd, buf, 0, 64);
  os.close(fd);
  return String.fromCharCode(...new Uint8Array(buf, 0, n));
}
function call(f) {
  try {
    const r = f();
    return r === 0 ? "ok" : errno(r);
  } catch (e) {
    return "threw " + e;
  }
}
function write(p, s) {
  const fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644);
  if (fd < 0) return errno(fd);
  const b = new Uint8Array([...s].map((c) => c.charCodeAt(0)));
  os.write(fd, b.buffer, 0, b.length);
  os.close(fd);
  return "ok";
}
const out = [
  "read=" + read(ro + "/file.txt"),
  "outside=" + read(ro + "/link_up"),
  "write_ro=" + write(ro + "/file.txt", "x"),
  "write_rw=" + write(rw + "/js.txt", "from-js"),
  "write_out=" + write(rw + "/out/js.txt", "x"),
  "mkdir_ro=" + call(() => os.mkdir(ro + "/d", 0o755)),
  "rename_out=" + call(() => os.rename(rw + "/js.txt", rw + "/out/js.txt")),
  "src=" + (std.loadFile("/src/main.js") !== null ? "ok" : "missing"),
];
print(out.join("\n"));
`},
	"python": {"main.py", `
import errno, json, os
ro, rw = os.environ["RO"], os.environ["RW"]
def attempt(f):
    try:
        r = f()
        return "ok" if r is None else r
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def write(p, s):
    with open(p, "w") as f:
        f.write(s)
out = [
    "read=" + attempt(lambda: open(ro + "/file.txt").read()),
    "outside=" + attempt(lambda: open(ro + "/link_up").read()),
    "write_ro=" + attempt(lambda: write(ro + "/file.txt", "x")),
    "write_rw=" + attempt(lambda: write(rw + "/py.txt", "from-python")),
    "write_out=" + attempt(lambda: write(rw + "/out/py.txt", "x")),
    "mkdir_ro=" + attempt(lambda: os.mkdir(ro + "/d")),
    "rename_out=" + attempt(lambda: os.rename(rw + "/py.txt", rw + "/out/py.txt")),
    "src=" + ("ok" if json.dumps([1]) == "[1]" and os.path.exists("/src/main.py") else "missing"),
]
print("\n".join(out))
`},
}

// TestInterpretedPluginFileGrants: a JavaScript (QuickJS) and a Python
// (CPython) plugin see their granted directories at the same paths, beside
// the interpreter's own mounts (/src, CPython's library), with the same
// confinement and errnos as a compiled plugin, and their writes audited.
func TestInterpretedPluginFileGrants(t *testing.T) {
	base := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"ro", "rw", "outside"} {
		must(os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	must(os.WriteFile(filepath.Join(base, "ro/file.txt"), []byte("hello"), 0o644))
	must(os.WriteFile(filepath.Join(base, "outside/secret"), []byte("s3cret"), 0o644))
	must(os.Symlink("../outside/secret", filepath.Join(base, "ro/link_up")))
	must(os.Symlink("../outside", filepath.Join(base, "rw/out")))
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	p, err := policy.ParseProfile("files.yaml", []byte("name: files\ndefault:\n  capabilities:\n    filesystem: ["+ro+", "+rw+":rw]\n"))
	must(err)
	ctx := context.Background()
	h := hosttest.New(t, host.Config{DataDir: t.TempDir(), CacheDir: persistentDir(t, "wazero-cache"), Profile: p,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer h.Close(ctx)

	for _, lang := range []string{"javascript", "python"} {
		t.Run(lang, func(t *testing.T) {
			l := needLanguage(t, lang)
			probe := fileProbes[lang]
			src, err := languages.PluginSource(l, map[string][]byte{probe[0]: []byte(probe[1])})
			must(err)
			sp, err := languages.BuildScriptPlugin(ctx, l, src, t.TempDir(), "")
			if err != nil {
				t.Skipf("%s: %v", lang, err)
			}
			if sp.Script.Env == nil {
				sp.Script.Env = map[string]string{}
			}
			sp.Script.Env["RO"], sp.Script.Env["RW"] = ro, rw
			raw := "name: files-" + lang + "\nversion: 1.0.0\nlanguage: " + lang + "\nactions: [{name: probe}]\ncapabilities:\n  filesystem: [" + ro + ", " + rw + ":rw]\n"
			mf, err := policy.ParseManifest("moat.yaml", []byte(raw))
			must(err)
			m, err := h.Load(ctx, sp.WASM, host.LoadOptions{Manifest: mf, ManifestBytes: []byte(raw), Script: sp.Script})
			must(err)
			defer m.Close(ctx)
			res, err := m.Invoke(ctx, host.Request{Action: "probe", Principal: policy.Principal{User: "ann", Org: "acme"}, CorrelationID: "files-" + lang})
			if err != nil {
				t.Fatal(err)
			}
			want := "read=hello\noutside=EPERM\nwrite_ro=EROFS\nwrite_rw=ok\nwrite_out=EPERM\nmkdir_ro=EROFS\nrename_out=EPERM\nsrc=ok"
			if got := strings.TrimSpace(string(res.Output)); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
			name := map[string]string{"javascript": "js.txt", "python": "py.txt"}[lang]
			if b, _ := os.ReadFile(filepath.Join(rw, name)); !strings.HasPrefix(string(b), "from-") {
				t.Errorf("%s holds %q", name, b)
			}
			evs, err := hosttest.Audit(h).Query(ctx, audit.Filter{CorrelationID: "files-" + lang, Kind: audit.KindOp, Decision: audit.Allow})
			must(err)
			if len(evs) != 1 || evs[0].Op != host.OpFileWrite || evs[0].Attrs["path"] != name {
				t.Errorf("allowed ops: %+v", evs)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(base, "outside/secret")); string(b) != "s3cret" {
		t.Errorf("outside/secret is %q", b)
	}
	if ents, _ := os.ReadDir(filepath.Join(base, "outside")); len(ents) != 1 {
		t.Errorf("outside holds %v", ents)
	}
}
