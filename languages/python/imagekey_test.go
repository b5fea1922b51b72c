package python_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	pysdk "github.com/moat-sandbox/moat/guests/python"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/interptest"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// imageLog counts a host's snapshot records: the images it made (each a
// capture: the plugin's top level run cold) and the warnings about an
// image it could not use, with the image each names.
type imageLog struct {
	mu       sync.Mutex
	made     int
	unusable []string // "image" attribute of each warning
	messages []string
}

func (l *imageLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *imageLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *imageLog) WithGroup(string) slog.Handler            { return l }
func (l *imageLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case r.Message == "snapshot made":
		l.made++
	case strings.Contains(r.Message, "snapshot image"):
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool {
			msg += " " + a.Key + "=" + a.Value.String()
			if a.Key == "image" {
				l.unusable = append(l.unusable, a.Value.String())
			}
			return true
		})
		l.messages = append(l.messages, msg)
	}
	return nil
}

func (l *imageLog) counts() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.made, slices.Clone(l.unusable)
}

// imageCase is what a host and a load of the image test's plugin are
// made of; each field is an input an instance is built from.
type imageCase struct {
	profile string // the profile's YAML, BASE for the test's directory
	grants  string // the manifest's filesystem list
	memory  string // the manifest's memory limit
	config  map[string]string
	env     map[string]string // added to the script's environment
	mount   bool              // an extra directory mounted at /extra
	main    string
	sdk     []byte // moat.py
	wasm    func([]byte) []byte
}

const imageProfile = "name: images\ndefault:\n  capabilities:\n    filesystem: [BASE/a, BASE/b:rw]\n"

// TestImageKeyEveryInput: a resident Python plugin's image is reused only
// when every input its instances are built from is the same. Each case
// loads the plugin on a new host sharing the cache directory (as the next
// moat run, or another of moat serve's hosts, does) with one input
// changed from the base the first host made an image for: a change makes
// a new image (a cold top level, counted), the same inputs start from the
// image on disk (no capture); and the instance serves, reading the
// directories granted now and not those granted before.
func TestImageKeyEveryInput(t *testing.T) {
	testenv.Slow(t, "thirteen snapshot captures")
	base := t.TempDir()
	for _, d := range []string{"a", "b", "c"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, d, "x"), []byte("in-"+d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	main := "# run " + hex.EncodeToString(nonce) + "\n" + strings.ReplaceAll(`import json
import moat

TOP = "top"


@moat.action("seen")
def seen(inp):
    out = {"config": moat.config("who") or ""}
    for d in ("a", "b", "c"):
        try:
            with open("BASE/" + d + "/x") as f:
                out[d] = f.read()
        except OSError as e:
            out[d] = type(e).__name__
    return json.dumps(out)
`, "BASE", base)
	cache := imageCache(t)
	baseCase := imageCase{profile: imageProfile, grants: "[BASE/a]", memory: "64MiB", main: main, sdk: pysdk.SDK}

	first, firstLog := loadImageCase(t, cache, base, baseCase)
	if got := seenImage(t, first); got["a"] != "in-a" || got["b"] != "FileNotFoundError" {
		t.Fatalf("the base load saw %v", got)
	}
	if made, bad := firstLog.counts(); made != 1 || len(bad) != 0 || first.SnapshotBytes() == 0 {
		t.Fatalf("the base load made %d images (unusable: %v), image bytes %d; want one image", made, bad, first.SnapshotBytes())
	}

	for _, c := range []struct {
		name   string
		change func(*imageCase)
		same   bool
		want   map[string]string // what the action reads now
	}{
		{name: "nothing changed", same: true, change: func(*imageCase) {}, want: map[string]string{"a": "in-a", "b": "FileNotFoundError"}},
		{name: "a granted directory added", change: func(c *imageCase) { c.grants = "[BASE/a, BASE/b]" },
			want: map[string]string{"a": "in-a", "b": "in-b"}},
		{name: "the granted directory removed", change: func(c *imageCase) { c.grants = "[]" },
			want: map[string]string{"a": "FileNotFoundError", "b": "FileNotFoundError"}},
		{name: "another directory granted in its place", change: func(c *imageCase) { c.grants = "[BASE/b]" },
			want: map[string]string{"a": "FileNotFoundError", "b": "in-b"}},
		{name: "the grant read-write", change: func(c *imageCase) { c.grants = "[BASE/b:rw]" },
			want: map[string]string{"a": "FileNotFoundError", "b": "in-b"}},
		{name: "the profile", change: func(c *imageCase) {
			c.profile = "name: images2\ndefault:\n  capabilities:\n    filesystem: [BASE/a, BASE/c]\n"
		}, want: map[string]string{"a": "in-a"}},
		{name: "the config", change: func(c *imageCase) { c.config = map[string]string{"who": "ann"} },
			want: map[string]string{"a": "in-a", "config": "ann"}},
		{name: "the memory limit", change: func(c *imageCase) { c.memory = "96MiB" }, want: map[string]string{"a": "in-a"}},
		{name: "the environment", change: func(c *imageCase) { c.env = map[string]string{"MOAT_TEST_ENV": "1"} },
			want: map[string]string{"a": "in-a"}},
		{name: "a mount", change: func(c *imageCase) { c.mount = true }, want: map[string]string{"a": "in-a"}},
		{name: "the plugin's files", change: func(c *imageCase) { c.main += "\nCHANGED = 1\n" }, want: map[string]string{"a": "in-a"}},
		{name: "the SDK (moat.py)", change: func(c *imageCase) {
			c.sdk = append(bytes.Clone(pysdk.SDK), "\n# another release of the SDK\n"...)
		}, want: map[string]string{"a": "in-a"}},
		{name: "the interpreter's WASM", change: func(c *imageCase) {
			// A custom section: the same interpreter, other bytes.
			c.wasm = func(b []byte) []byte { return append(bytes.Clone(b), 0, 5, 4, 'm', 'o', 'a', 't') }
		}, want: map[string]string{"a": "in-a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := baseCase
			in.config, in.env = maps.Clone(baseCase.config), maps.Clone(baseCase.env)
			c.change(&in)
			m, log := loadImageCase(t, cache, base, in)
			got := seenImage(t, m)
			for k, want := range c.want {
				if got[k] != want {
					t.Errorf("the plugin read %s as %q, want %q (all: %v)", k, got[k], want, got)
				}
			}
			made, bad := log.counts()
			if len(bad) != 0 {
				t.Errorf("images found unusable: %v", bad)
			}
			switch {
			case c.same && made != 0:
				t.Errorf("the same inputs made %d new images; want the image on disk reused", made)
			case !c.same && made != 1:
				t.Errorf("a change made %d new images; want 1 (the old image is another input's)", made)
			}
			if m.SnapshotBytes() == 0 {
				t.Error("the instance did not start from an image")
			}
		})
	}
}

// TestImageHostile: a file in the image's place that is not the image
// made for these inputs (truncated, damaged, another image's copied over
// it, garbage) is never restored: the host says so naming the file, makes
// the image again, and the plugin serves with its own grants.
func TestImageHostile(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, d, "x"), []byte("in-"+d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	main := "# run " + hex.EncodeToString(nonce) + "\n" + strings.ReplaceAll(`import json
import moat

@moat.action("seen")
def seen(inp):
    out = {"config": ""}
    for d in ("a", "b"):
        try:
            with open("BASE/" + d + "/x") as f:
                out[d] = f.read()
        except OSError as e:
            out[d] = type(e).__name__
    return json.dumps(out)
`, "BASE", base)
	cache := imageCache(t)
	mine := imageCase{profile: imageProfile, grants: "[BASE/a]", memory: "64MiB", main: main, sdk: pysdk.SDK}
	other := mine
	other.grants = "[BASE/b, BASE/a]" // another image, of other grants
	m, _ := loadImageCase(t, cache, base, mine)
	seenImage(t, m)
	m.Close(context.Background())
	m, _ = loadImageCase(t, cache, base, other)
	seenImage(t, m)
	m.Close(context.Background())
	imgs, _ := filepath.Glob(filepath.Join(cache, "snapshots", "*.img"))
	if len(imgs) != 2 {
		t.Fatalf("%d images, want 2", len(imgs))
	}
	// Which is whose: load mine again, and see which file it touched.
	var minePath, otherPath string
	{
		before := map[string][]byte{}
		for _, p := range imgs {
			before[p], _ = os.ReadFile(p)
		}
		m, log := loadImageCase(t, cache, base, mine)
		seenImage(t, m)
		m.Close(context.Background())
		if made, _ := log.counts(); made != 0 {
			t.Fatalf("reloading the same inputs made %d images", made)
		}
		// Break one: the one restored next must be made again.
		for _, p := range imgs {
			if err := os.WriteFile(p, before[p][:10], 0o600); err != nil {
				t.Fatal(err)
			}
			m, log := loadImageCase(t, cache, base, mine)
			seenImage(t, m)
			m.Close(context.Background())
			if _, bad := log.counts(); len(bad) == 1 {
				minePath = p
			} else {
				otherPath = p
			}
			if err := os.WriteFile(p, before[p], 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if minePath == "" || otherPath == "" {
			t.Fatalf("cannot tell the images apart: %v", imgs)
		}
	}
	otherBytes, _ := os.ReadFile(otherPath)
	good, _ := os.ReadFile(minePath)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0xff
	// The other grants' image written under this image's name, as its
	// own: it passes every check of the file, and its instance cannot
	// start (libc's preopens are the other grants').
	forged, err := wasmsnap.Unmarshal(otherBytes)
	if err != nil {
		t.Fatal(err)
	}
	forged.Key = filepath.Base(minePath)
	for _, c := range []struct {
		name  string
		plant []byte
		// remade: the file is found unusable and made again at once;
		// else an instance failed to start from it: the image is
		// dropped, and this process's instances start cold.
		remade bool
	}{
		{"truncated", good[:len(good)/3], true},
		{"a byte flipped", flipped, true},
		{"another image's copied over it (other grants)", otherBytes, true},
		{"garbage", []byte("not an image at all"), true},
		{"empty", []byte{}, true},
		{"another image's forged under this one's name", forged.Marshal(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.remade && c.name != "truncated" && !strings.HasPrefix(c.name, "another") {
				testenv.Slow(t, "an image made again per case (about 2 CPU-s); truncated shows a damaged file")
			}
			if err := os.WriteFile(minePath, c.plant, 0o600); err != nil {
				t.Fatal(err)
			}
			m, log := loadImageCase(t, cache, base, mine)
			got := seenImage(t, m)
			if got["a"] != "in-a" || got["b"] != "FileNotFoundError" {
				t.Errorf("the plugin read %v; want its own grant (a) only", got)
			}
			made, bad := log.counts()
			if want := map[bool]int{true: 1, false: 0}[c.remade]; len(bad) != 1 || bad[0] != minePath || made != want {
				t.Errorf("unusable images named %v, images made %d; want %s named once and %d made\n%s", bad, made, minePath, want,
					strings.Join(log.messages, "\n"))
			}
			for _, msg := range log.messages {
				if !strings.Contains(msg, "clear=rm -r "+filepath.Join(cache, "snapshots")) {
					t.Errorf("the warning does not say how to clear the images: %s", msg)
				}
			}
			now, err := os.ReadFile(minePath)
			switch {
			case c.remade && (err != nil || bytes.Equal(now, c.plant)):
				t.Errorf("the planted file is still there, or no image replaced it (%v)", err)
			case !c.remade && !errors.Is(err, fs.ErrNotExist):
				t.Errorf("the image no instance could start from is still there (%v)", err)
			}
			if !c.remade && m.SnapshotBytes() != 0 {
				t.Error("the module still has the image its instance could not start from")
			}
			m.Close(context.Background())
		})
	}
}

// imageCache is a cache directory with the suite's compiled interpreter
// linked in, and no images.
func imageCache(t *testing.T) string {
	t.Helper()
	cache := filepath.Join(t.TempDir(), "cache")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	suiteCache := interptest.CacheDir(t.TempDir())
	if ents, err := os.ReadDir(suiteCache); err == nil {
		for _, e := range ents {
			if e.IsDir() && e.Name() != "snapshots" {
				if err := os.Symlink(filepath.Join(suiteCache, e.Name()), filepath.Join(cache, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return cache
}

// loadImageCase makes a host on cache and loads the plugin c describes
// on it, as org "acme"; both close when the test ends.
func loadImageCase(t *testing.T, cache, base string, c imageCase) (*host.Module, *imageLog) {
	t.Helper()
	p, err := policy.ParseProfile("images.yaml", []byte(strings.ReplaceAll(c.profile, "BASE", base)))
	if err != nil {
		t.Fatal(err)
	}
	log := &imageLog{}
	h, err := host.New(context.Background(), host.Config{DataDir: t.TempDir(), CacheDir: cache, Profile: p, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	l, err := languages.Lookup("python")
	if err != nil {
		t.Fatal(err)
	}
	sdk := pysdk.SDK
	pysdk.SDK = c.sdk
	defer func() { pysdk.SDK = sdk }()
	src, err := languages.PluginSource(l, map[string][]byte{"main.py": []byte(c.main)})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := languages.BuildScriptPlugin(context.Background(), l, src, t.TempDir(), "")
	if errors.Is(err, toolchains.ErrMissing) {
		testenv.Require(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	if c.wasm != nil {
		sp.WASM = c.wasm(sp.WASM)
	}
	if len(c.env) > 0 {
		sp.Script.Env = maps.Clone(sp.Script.Env)
		if sp.Script.Env == nil {
			sp.Script.Env = map[string]string{}
		}
		maps.Copy(sp.Script.Env, c.env)
	}
	if c.mount {
		sp.Script.Mounts = append(slices.Clone(sp.Script.Mounts), host.Mount{HostDir: t.TempDir(), GuestPath: "/extra", ReadOnly: true})
	}
	raw := strings.ReplaceAll("name: images\nversion: 0.1.0\nlanguage: python\nkind: moat\ncapabilities:\n  filesystem: "+c.grants+
		"\nlimits: {memory: "+c.memory+"}\nactions:\n  - {name: seen, timeout: 20s}\n", "BASE", base)
	mf, err := policy.ParseManifest("moat.yaml", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(context.Background(), sp.WASM, host.LoadOptions{Name: "images", Org: "acme", Manifest: mf, ManifestBytes: []byte(raw),
		Script: sp.Script, Config: c.config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, log
}

// seenImage calls the plugin's action and decodes what it read.
func seenImage(t *testing.T, m *host.Module) map[string]string {
	t.Helper()
	res, err := m.Invoke(context.Background(), host.Request{Action: "seen", Principal: policy.Principal{User: "ann", Org: "acme"}})
	if err != nil {
		t.Fatalf("seen: %v", err)
	}
	var got map[string]string
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatalf("seen: %q: %v", res.Output, err)
	}
	return got
}
