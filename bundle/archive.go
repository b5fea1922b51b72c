package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"path/filepath"

	"github.com/moat-sandbox/moat/policy"
)

// Archive is the upload of b to moat serve (POST /v1/modules, what `moat
// deploy` sends) and its Content-Type: for a module, a multipart form
// (parts module, manifest, signature); for a Script or a Native plugin, a
// gzipped tar of its files in the canonical form its signature covers
// (Signed), moat.yaml and its signature, which the server unpacks and
// reads back with FromArchive.
func (b *Bundle) Archive() ([]byte, string, error) {
	if b.Kind == Wasm {
		return b.form()
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	seen := map[string]bool{}
	tr := tar.NewReader(bytes.NewReader(b.Signed))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, "", fmt.Errorf("packing %s: %w", b.Path, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, "", err
		}
		seen[h.Name] = true
		if err := add(h.Name, data); err != nil {
			return nil, "", err
		}
	}
	if !seen[policy.ManifestFile] {
		if err := add(policy.ManifestFile, b.ManifestBytes); err != nil {
			return nil, "", err
		}
	}
	if b.Signature != nil {
		if err := add(b.Name+".minisig", b.Signature); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), "application/gzip", nil
}

// form is a module's upload: a multipart form of the module, its manifest
// and its signature, each part named as its file.
func (b *Bundle) form() ([]byte, string, error) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	parts := []struct {
		name, file string
		data       []byte
	}{{"module", filepath.Base(b.Path), b.Signed}, {"manifest", policy.ManifestFile, b.ManifestBytes}, {"signature", filepath.Base(b.SignaturePath), b.Signature}}
	for _, p := range parts {
		if p.data == nil {
			continue
		}
		fw, err := w.CreateFormFile(p.name, p.file)
		if err != nil {
			return nil, "", err
		}
		if _, err := fw.Write(p.data); err != nil {
			return nil, "", err
		}
	}
	if err := w.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), w.FormDataContentType(), nil
}
