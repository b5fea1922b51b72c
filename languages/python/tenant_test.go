package python_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// tenantHosts are two hosts, as moat serve makes one per organization,
// that share one cache directory (its snapshot images) and a profile
// granting BASE/a and BASE/b. The compiled interpreter is linked in from
// the suite's cache so that nothing is compiled again; the images start
// empty.
func tenantHosts(t *testing.T, base string) (*host.Host, *host.Host, string) {
	t.Helper()
	cache := imageCache(t)
	p, err := policy.ParseProfile("tenants.yaml", []byte(strings.ReplaceAll("name: tenants\ndefault:\n  capabilities:\n    filesystem: [BASE/a, BASE/b]\n", "BASE", base)))
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *host.Host {
		h, err := host.New(context.Background(), host.Config{DataDir: t.TempDir(), CacheDir: cache, Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		return h
	}
	return mk(), mk(), cache
}

// loadTenant loads main.py as org's resident plugin "tenant" on h, with
// the file grants given (a manifest filesystem list, BASE replaced).
func loadTenant(t *testing.T, h *host.Host, org, base, grants, main string) (*host.Module, error) {
	t.Helper()
	l, err := languages.Lookup("python")
	if err != nil {
		t.Fatal(err)
	}
	src, err := languages.PluginSource(l, map[string][]byte{"main.py": []byte(main)})
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
	raw := strings.ReplaceAll("name: tenant\nversion: 0.1.0\nlanguage: python\nkind: moat\ncapabilities:\n  filesystem: "+grants+
		"\nlimits: {memory: 64MiB}\nactions:\n  - {name: seen, timeout: 10s}\n", "BASE", base)
	mf, err := policy.ParseManifest("moat.yaml", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return h.Load(context.Background(), sp.WASM, host.LoadOptions{Name: "tenant", Org: org, Manifest: mf, ManifestBytes: []byte(raw), Script: sp.Script})
}

// seen calls the plugin's action as a user of org and decodes its JSON.
func seen(t *testing.T, m *host.Module, org string) map[string]string {
	t.Helper()
	res, err := m.Invoke(context.Background(), host.Request{Action: "seen", Principal: policy.Principal{User: "u-" + org, Org: org}})
	if err != nil {
		t.Fatalf("%s's call: %v", org, err)
	}
	var got map[string]string
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatalf("%s's call: %q: %v", org, res.Output, err)
	}
	return got
}

// TestResidentImageStaysWithItsOrganization: two organizations deploy the
// same main.py on two hosts sharing a cache directory, as moat serve's
// per-organization hosts do. What the first's top level kept (what it read
// from its file grant, a random key it made) must never reach the
// second's instances, whichever deploys first, and a second whose grants
// have another shape must load and serve (the image of the first,
// restored under other mounts, had left the op device's descriptor
// pointing elsewhere: "cannot open /dev/moat/ops: Bad file descriptor").
func TestResidentImageStaysWithItsOrganization(t *testing.T) {
	base := t.TempDir()
	for org, pw := range map[string]string{"a": "password-of-a", "b": "password-of-b"} {
		if err := os.MkdirAll(filepath.Join(base, org), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, org, "config"), []byte(pw), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Sources no earlier run has captured: every image here is made here.
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	tag := "# run " + hex.EncodeToString(nonce) + "\n"
	// reads: the top level reads every grant it can find, as a plugin
	// loading its configuration does.
	reads := tag + `import json, os
import moat

SEEN = {}
for d in ("BASE/a", "BASE/b"):
    try:
        with open(d + "/config") as f:
            SEEN[d] = f.read()
    except OSError as e:
        SEEN[d] = type(e).__name__

KEY = os.urandom(16).hex()


@moat.action("seen")
def seen(inp):
    return json.dumps(dict(SEEN, key=KEY))
`
	// keeps: the top level reads no grant, but keeps a secret of its
	// own making (a signing key).
	keeps := tag + `import json, os
import moat

KEY = os.urandom(16).hex()


@moat.action("seen")
def seen(inp):
    return json.dumps({"key": KEY})
`
	reads = strings.ReplaceAll(reads, "BASE", base)
	a, b := base+"/a", base+"/b"
	for i, tt := range []struct {
		name           string
		main           string
		grantsA        string
		grantsB        string
		wantA, wantB   map[string]string // besides key
		imageA, imageB bool              // instances start from an image
	}{
		// The same grant shape: before, B's instances started from A's
		// image and read A's password.
		{name: "top level reads its grant, same shape", main: reads, grantsA: "[BASE/a]", grantsB: "[BASE/b]",
			wantA: map[string]string{a: "password-of-a", b: "FileNotFoundError"}, wantB: map[string]string{a: "FileNotFoundError", b: "password-of-b"}},
		// Another shape: before, B's instances failed with EBADF on the
		// op device.
		{name: "top level reads its grant, other shape", main: reads, grantsA: "[BASE/a]", grantsB: "[]",
			wantA: map[string]string{a: "password-of-a", b: "FileNotFoundError"}, wantB: map[string]string{a: "FileNotFoundError", b: "FileNotFoundError"}, imageB: true},
		{name: "top level reads no grant, same shape", main: keeps, grantsA: "[BASE/a]", grantsB: "[BASE/b]", imageA: true, imageB: true},
		{name: "top level reads no grant, other shape", main: keeps, grantsA: "[BASE/a]", grantsB: "[BASE/a, BASE/b]", imageA: true, imageB: true},
		{name: "top level reads no grant, no grants", main: keeps, grantsA: "[]", grantsB: "[]", imageA: true, imageB: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if i >= 3 {
				testenv.Slow(t, "two more image shapes of a top level that reads no grant (about 4 CPU-s each); the same shape's case shows the path")
			}
			orders := []bool{false, true}
			if testing.Short() {
				orders = orders[:1] // A loaded first; make test also loads B first (about 3 CPU-s a case)
			}
			for _, bFirst := range orders {
				ha, hb, cache := tenantHosts(t, base)
				var ma, mb *host.Module
				var err error
				load := func(who string) {
					t.Helper()
					if who == "a" {
						ma, err = loadTenant(t, ha, "org-a", base, tt.grantsA, tt.main)
					} else {
						mb, err = loadTenant(t, hb, "org-b", base, tt.grantsB, tt.main)
					}
					if err != nil {
						t.Fatalf("org-%s's load (after the other's: %v): %v", who, who == "a" == bFirst, err)
					}
				}
				if bFirst {
					load("b")
					load("a")
				} else {
					load("a")
					load("b")
				}
				ga, gb := seen(t, ma, "org-a"), seen(t, mb, "org-b")
				for k, want := range tt.wantA {
					if ga[k] != want {
						t.Errorf("b first %v: org-a's top level saw %s as %q, want %q", bFirst, k, ga[k], want)
					}
				}
				for k, want := range tt.wantB {
					if gb[k] != want {
						t.Errorf("b first %v: org-b's top level saw %s as %q, want %q (org-a's: %q)", bFirst, k, gb[k], want, ga[k])
					}
				}
				if ga["key"] == "" || ga["key"] == gb["key"] {
					t.Errorf("b first %v: org-a's and org-b's top-level keys are %q and %q: one organization's instances hold the other's", bFirst, ga["key"], gb["key"])
				}
				if got := ma.SnapshotBytes() > 0; got != tt.imageA {
					t.Errorf("b first %v: org-a's instances start from an image: %v, want %v", bFirst, got, tt.imageA)
				}
				if got := mb.SnapshotBytes() > 0; got != tt.imageB {
					t.Errorf("b first %v: org-b's instances start from an image: %v, want %v", bFirst, got, tt.imageB)
				}
				// Each image on disk is one organization's: two images
				// when both have one, none made from a grant's content.
				imgs, _ := filepath.Glob(filepath.Join(cache, "snapshots", "*.img"))
				want := 0
				for _, ok := range []bool{tt.imageA, tt.imageB} {
					if ok {
						want++
					}
				}
				if len(imgs) != want {
					t.Errorf("b first %v: %d images in the shared cache, want %d", bFirst, len(imgs), want)
				}
				for _, p := range imgs {
					body, _ := os.ReadFile(p)
					if strings.Contains(string(body), "password-of-") {
						t.Errorf("b first %v: the image %s holds a grant's content", bFirst, filepath.Base(p))
					}
				}
				ma.Close(context.Background())
				mb.Close(context.Background())
			}
		})
	}
}
