package toolchains

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// NPMPackage is one npm package moat provisions, pinned to a version and
// to the checksum (npm's "integrity", sha512 of the tarball) that version
// had when moat was tested with it: a registry, a mirror or a proxy that
// serves other bytes is refused.
type NPMPackage struct {
	Name, Version, Integrity string
}

func (p NPMPackage) String() string { return p.Name + "@" + p.Version }

// EnvNPMRegistry names the environment variable that points package
// downloads at another npm registry (a mirror). The pinned checksums
// still apply.
const EnvNPMRegistry = "MOAT_NPM_REGISTRY"

// DefaultNPMRegistry is the public npm registry.
const DefaultNPMRegistry = "https://registry.npmjs.org"

// Bounds on what a download may be, whatever a registry sends: the
// largest pinned tarball (kotlin-compiler) is about 90 MB, 94 MB
// unpacked in 130 files.
const (
	maxTarballBytes  = 256 << 20
	maxUnpackedBytes = 1 << 30
)

// maxPackageFiles bounds the entries of one package (a var for tests).
var maxPackageFiles = 50000

// integrityFile, inside an installed package's directory, holds the
// checksum it was installed from: a package whose file matches its pin is
// installed; anything else (an older pin, an interrupted copy, npm's own
// install) is replaced.
const integrityFile = ".moat-integrity"

// NPMInstalled reports whether p is installed in dir (a toolchains
// directory) from its pinned tarball.
// A package npm itself installed (`make toolchains` before it ran moat,
// which checked the same integrity from its lock) counts when its
// package.json names the pinned version.
func NPMInstalled(dir string, p NPMPackage) bool {
	pkgDir := npmPackageDir(dir, p)
	if b, err := os.ReadFile(filepath.Join(pkgDir, integrityFile)); err == nil {
		return strings.TrimSpace(string(b)) == p.Integrity
	}
	b, err := os.ReadFile(filepath.Join(pkgDir, "package.json"))
	if err != nil {
		return false
	}
	var meta struct {
		Version string `json:"version"`
	}
	return json.Unmarshal(b, &meta) == nil && meta.Version == p.Version
}

func npmPackageDir(dir string, p NPMPackage) string {
	return filepath.Join(dir, "npm", "node_modules", filepath.FromSlash(p.Name))
}

// TarballURL is where the registry serves p:
// REGISTRY/NAME/-/BASENAME-VERSION.tgz, npm's layout.
func (p NPMPackage) TarballURL(registry string) string {
	if registry == "" {
		registry = DefaultNPMRegistry
	}
	return strings.TrimRight(registry, "/") + "/" + p.Name + "/-/" + path.Base(p.Name) + "-" + p.Version + ".tgz"
}

// InstallNPM downloads p's tarball from the registry ($MOAT_NPM_REGISTRY,
// else the public one), checks it against the pinned checksum before
// reading a byte of it as an archive, and unpacks it into
// dir/npm/node_modules/NAME, replacing what was there in one rename.
// Only regular files and directories are unpacked (no links, no device
// files), every path stays inside the package's directory, and sizes are
// bounded. progress, when not nil, is called as bytes arrive with the
// bytes so far and the total (-1 when the registry does not say).
func InstallNPM(ctx context.Context, dir string, p NPMPackage, progress func(done, total int64)) error {
	want, err := integritySum(p.Integrity)
	if err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	final := npmPackageDir(dir, p)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	tgz, err := os.CreateTemp(filepath.Dir(final), ".download-*.tgz")
	if err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	defer os.Remove(tgz.Name())
	defer tgz.Close()

	url := p.TarballURL(os.Getenv(EnvNPMRegistry))
	if err := download(ctx, url, tgz, progress); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	if _, err := tgz.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	h := sha512.New()
	if _, err := io.Copy(h, tgz); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	if got := h.Sum(nil); string(got) != string(want) {
		return fmt.Errorf("npm %s: %s has checksum sha512-%s, want %s: the registry served other bytes than the pinned release (a mirror out of date, or tampering); nothing was installed",
			p, url, base64.StdEncoding.EncodeToString(got), p.Integrity)
	}
	if _, err := tgz.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(final), ".unpack-")
	if err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	defer os.RemoveAll(tmp)
	if err := unpackTarball(tgz, tmp); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, integrityFile), []byte(p.Integrity+"\n"), 0o644); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	if err := os.RemoveAll(final); err != nil {
		return fmt.Errorf("npm %s: replacing %s: %w", p, final, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	if err := linkBins(dir, p); err != nil {
		return fmt.Errorf("npm %s: %w", p, err)
	}
	return nil
}

// linkBins makes node_modules/.bin/NAME for each command the package's
// package.json declares ("bin"), as npm does: mk/guests.mk runs .bin/asc.
// A name with a slash or a target outside the package is skipped.
func linkBins(dir string, p NPMPackage) error {
	pkgDir := npmPackageDir(dir, p)
	b, err := os.ReadFile(filepath.Join(pkgDir, "package.json"))
	if err != nil {
		return nil // no package.json: no commands
	}
	var meta struct {
		Bin json.RawMessage `json:"bin"`
	}
	if json.Unmarshal(b, &meta) != nil || len(meta.Bin) == 0 {
		return nil
	}
	bins := map[string]string{}
	var one string
	if json.Unmarshal(meta.Bin, &one) == nil {
		bins[path.Base(p.Name)] = one
	} else if json.Unmarshal(meta.Bin, &bins) != nil {
		return nil
	}
	binDir := filepath.Join(dir, "npm", "node_modules", ".bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	for name, target := range bins {
		t := path.Clean(strings.TrimPrefix(target, "./"))
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || !filepath.IsLocal(t) {
			continue
		}
		link := filepath.Join(binDir, name)
		os.Remove(link)
		if err := os.Symlink("../"+p.Name+"/"+t, link); err != nil {
			return err
		}
		if fi, err := os.Stat(filepath.Join(pkgDir, filepath.FromSlash(t))); err == nil && fi.Mode().IsRegular() {
			os.Chmod(filepath.Join(pkgDir, filepath.FromSlash(t)), 0o755)
		}
	}
	return nil
}

// integritySum decodes npm's "sha512-BASE64" integrity string.
func integritySum(integrity string) ([]byte, error) {
	b64, ok := strings.CutPrefix(integrity, "sha512-")
	if !ok {
		return nil, fmt.Errorf("integrity %q: want sha512-BASE64", integrity)
	}
	sum, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(sum) != sha512.Size {
		return nil, fmt.Errorf("integrity %q: not a base64 sha512", integrity)
	}
	return sum, nil
}

// download copies url's body into w, at most maxTarballBytes.
func download(ctx context.Context, url string, w io.Writer, progress func(done, total int64)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("download: %w (is the npm registry reachable? set $%s for a mirror)", err, EnvNPMRegistry)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download %s: %s", url, resp.Status)
	}
	if resp.ContentLength > maxTarballBytes {
		return fmt.Errorf("download %s: %d bytes, more than the %d a toolchain package may be", url, resp.ContentLength, maxTarballBytes)
	}
	var done int64
	buf := make([]byte, 256<<10)
	body := io.LimitReader(resp.Body, maxTarballBytes+1)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			done += int64(n)
			if done > maxTarballBytes {
				return fmt.Errorf("download %s: more than the %d bytes a toolchain package may be", url, maxTarballBytes)
			}
			if progress != nil {
				progress(done, resp.ContentLength)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("download %s: %w", url, rerr)
		}
	}
}

// unpackTarball unpacks an npm tarball (gzip, tar, every entry under one
// top directory, "package/" by convention) into dest, without its top
// directory.
func unpackTarball(r io.Reader, dest string) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	// Everything the decompressor yields counts, skipped entries and tar
	// headers included: the checksum vouches for the bytes, the bound for
	// what a mistake in a pin could cost.
	tr := tar.NewReader(&boundedReader{r: gz, left: maxUnpackedBytes + int64(maxPackageFiles)*1024})
	var total int64
	entries := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unpack: %w", err)
		}
		if entries++; entries > maxPackageFiles {
			return fmt.Errorf("unpack: more than %d entries", maxPackageFiles)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		_, rel, ok := strings.Cut(name, "/")
		if !ok || rel == "" {
			continue // the top directory itself
		}
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("unpack: entry %q leaves the package", hdr.Name)
		}
		target := filepath.Join(dest, filepath.FromSlash(rel))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return fmt.Errorf("unpack: %w", err)
			}
		case tar.TypeReg:
			if total += hdr.Size; hdr.Size < 0 || total > maxUnpackedBytes {
				return fmt.Errorf("unpack: more than %d bytes unpacked", maxUnpackedBytes)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return fmt.Errorf("unpack: %w", err)
			}
			mode := os.FileMode(0o644)
			if hdr.Mode&0o111 != 0 {
				mode = 0o755
			}
			// O_EXCL: a second entry of the same name is refused rather
			// than written through whatever the first one made.
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return fmt.Errorf("unpack: %w", err)
			}
			_, err = io.Copy(f, io.LimitReader(tr, hdr.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("unpack %s: %w", rel, err)
			}
		default:
			// Links, devices, FIFOs: npm ignores them too; nothing moat
			// uses is one.
		}
	}
}

// boundedReader fails once more than left bytes were read through it.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("more than %d bytes unpacked", maxUnpackedBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}
