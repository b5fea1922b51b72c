package bundle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/moat-sandbox/moat/policy"
)

// PageSection is the name of the custom section of a compiled module that
// holds its pages' files. They are in the .wasm, not beside it, because a
// module's digest and signature are of its bytes alone: in a section of
// it they are signed, stored, uploaded and verified with it, by every
// path a module already takes, and no second artifact can drift from it.
const PageSection = "moat.pages"

// Bounds on the section, checked before anything is allocated from a
// length in it: a module's bytes come from an upload.
const (
	maxSectionFiles = 256      // policy allows 32 pages × 64 files, deduplicated; a real plugin has a handful
	maxSectionBytes = 16 << 20 // every file's bytes together
	maxSectionName  = 128      // policy's page file names are at most 128 bytes
)

// The section's payload (after its name) is a version byte, a count, then
// for each file its name and its bytes, every length an unsigned LEB128:
//
//	1 count { len name  len bytes }
//
// in name order, without duplicates. It is not a tar (languages.PackSources)
// because a reader of it needs no more than these few bounded fields, and
// a hostile module can shape nothing else.
const pageSectionVersion = 1

// EmbedPages returns wasm with the pages' files of mf (read from dir,
// beside moat.yaml, by package plugintree's rule) in its PageSection,
// replacing any it had: what `moat build` writes for a compiled plugin
// with pages. A module whose manifest has no pages is returned without
// the section. A missing page file is refused, naming it and the fix.
func EmbedPages(wasm []byte, mf *policy.Manifest, dir string) ([]byte, error) {
	files := map[string][]byte{}
	for _, name := range mf.PageFiles() {
		b, err := plugintree.ReadFile(dir, name)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // CheckPageFiles below names the page and the fix
			}
			return nil, fmt.Errorf("page file %s: %w", name, unwrapPathError(err))
		}
		files[name] = b
	}
	if err := checkPageFiles(mf, files); err != nil {
		return nil, err
	}
	return withPageSection(wasm, files)
}

// withPageSection returns wasm without any PageSection and, when files is
// not empty, with one holding files appended (a custom section may be
// anywhere; at the end it moves no other section).
func withPageSection(wasm []byte, files map[string][]byte) ([]byte, error) {
	secs, err := sections(wasm)
	if err != nil {
		return nil, err
	}
	out := slices.Clip(wasm[:8])
	for _, s := range secs {
		if s.name != PageSection {
			out = append(out, wasm[s.start:s.end]...)
		}
	}
	if len(files) == 0 {
		return out, nil
	}
	names := make([]string, 0, len(files))
	total := 0
	for n, b := range files {
		names = append(names, n)
		total += len(b)
	}
	if len(names) > maxSectionFiles || total > maxSectionBytes {
		return nil, fmt.Errorf("pages: %d files of %d bytes; a module's pages may have at most %d files of %d bytes together", len(names), total, maxSectionFiles, maxSectionBytes)
	}
	slices.Sort(names)
	var p []byte
	p = binary.AppendUvarint(p, uint64(len(PageSection)))
	p = append(p, PageSection...)
	p = append(p, pageSectionVersion)
	p = binary.AppendUvarint(p, uint64(len(names)))
	for _, n := range names {
		p = binary.AppendUvarint(p, uint64(len(n)))
		p = append(p, n...)
		p = binary.AppendUvarint(p, uint64(len(files[n])))
		p = append(p, files[n]...)
	}
	out = append(out, 0)
	out = binary.AppendUvarint(out, uint64(len(p)))
	return append(out, p...), nil
}

// ReadPages returns the files in wasm's PageSection (nil when it has
// none), checked against mf: each is one of the pages' files (a file the
// manifest does not name is refused, not ignored: the section is written
// from the manifest, so one that differs was built for another, and
// serving a file nobody declared is what a page's access rules cannot
// see), at most once, within the bounds; a second PageSection is refused.
// Whether every page's file is there is CheckPageFiles' (the caller's).
func ReadPages(wasm []byte, mf *policy.Manifest) (map[string][]byte, error) {
	secs, err := sections(wasm)
	if err != nil {
		return nil, err
	}
	var payload []byte
	found := false
	for _, s := range secs {
		if s.name != PageSection {
			continue
		}
		if found {
			return nil, fmt.Errorf("the module has two %s sections; build it again with moat build", PageSection)
		}
		found, payload = true, wasm[s.payload:s.end]
	}
	if !found {
		return nil, nil
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("its %s section: "+format+"; build the module again with moat build", append([]any{PageSection}, a...)...)
	}
	r := &leb{b: payload}
	if v, ok := r.byte(); !ok || v != pageSectionVersion {
		return nil, bad("unknown version")
	}
	n, ok := r.uvarint(maxSectionFiles)
	if !ok {
		return nil, bad("the count of files is past %d or truncated", maxSectionFiles)
	}
	allowed := []string{}
	if mf != nil {
		allowed = mf.PageFiles()
	}
	files := make(map[string][]byte, n)
	total := 0
	for i := uint64(0); i < n; i++ {
		nl, ok := r.uvarint(maxSectionName)
		if !ok {
			return nil, bad("file %d: its name's length is past %d or truncated", i, maxSectionName)
		}
		name, ok := r.bytes(nl)
		if !ok {
			return nil, bad("file %d: its name is truncated", i)
		}
		if !slices.Contains(allowed, string(name)) {
			return nil, bad("it holds %q, which no page of the manifest names", name)
		}
		if _, dup := files[string(name)]; dup {
			return nil, bad("it holds %q twice", name)
		}
		cl, ok := r.uvarint(uint64(maxSectionBytes - total))
		if !ok {
			return nil, bad("file %s: its length is past the %d bytes a module's pages may have or truncated", name, maxSectionBytes)
		}
		content, ok := r.bytes(cl)
		if !ok {
			return nil, bad("file %s is truncated", name)
		}
		total += len(content)
		files[string(name)] = bytes.Clone(content)
	}
	if r.off != len(r.b) {
		return nil, bad("%d bytes after its last file", len(r.b)-r.off)
	}
	return files, nil
}

// section is one section of a module: its bytes are wasm[start:end], its
// payload (after a custom section's name) wasm[payload:end].
type section struct {
	start, payload, end int
	name                string // a custom section's name; "" for the others
}

// sections splits a module into its sections (wasmrewrite.WalkSections
// checks each one's size), reading each custom section's name. The rest
// is the host's to check at load.
func sections(wasm []byte) ([]section, error) {
	if !isModule(wasm) || len(wasm) < 8 {
		return nil, errors.New("not a WebAssembly module")
	}
	var out []section
	err := wasmrewrite.WalkSections(wasm, func(ws wasmrewrite.Section) error {
		s := section{start: ws.Start, payload: ws.BodyStart, end: ws.End}
		if ws.ID == 0 {
			cr := &leb{b: wasm[:s.end], off: ws.BodyStart}
			nl, ok := cr.uvarint(uint64(s.end - ws.BodyStart))
			name, ok2 := cr.bytes(nl)
			if !ok || !ok2 {
				return fmt.Errorf("custom section at byte %d: its name is truncated", s.start)
			}
			s.name, s.payload = string(name), cr.off
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("module: %w", err)
	}
	return out, nil
}

// leb reads bytes and unsigned LEB128 numbers from b, each bounded.
type leb struct {
	b   []byte
	off int
}

func (r *leb) byte() (byte, bool) {
	if r.off >= len(r.b) {
		return 0, false
	}
	r.off++
	return r.b[r.off-1], true
}

// uvarint reads a number of at most max (and false past it, or when it is
// truncated or longer than 10 bytes).
func (r *leb) uvarint(max uint64) (uint64, bool) {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 || v > max {
		return 0, false
	}
	r.off += n
	return v, true
}

func (r *leb) bytes(n uint64) ([]byte, bool) {
	if n > uint64(len(r.b)-r.off) {
		return nil, false
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b, true
}
