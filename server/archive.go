package server

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"

	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/policy"
)

// ArchiveLimits bound what unpacking one uploaded archive (tar, tar.gz or
// zip) may cost, as limits.archive in the server config. The upload itself
// is bounded by limits.max_module_bytes; these bound what it inflates to,
// which a compressed archive otherwise chooses: 1 MiB of gzip holds 1 GiB
// of zeros. Every archive is read as a stream and each limit is checked
// as the bytes come, so a refused archive costs at most the limit.
type ArchiveLimits struct {
	// MaxBytes bounds the inflated bytes of all entries together. The
	// server holds them in memory while it reads the upload. Default
	// 128MiB; from 1KiB to 1GiB.
	MaxBytes policy.ByteSize `yaml:"max_bytes"`
	// MaxEntries bounds the entries (files and directories) read.
	// Default 1024; from 1 to 100000.
	MaxEntries int `yaml:"max_entries"`
	// MaxEntryBytes bounds one entry's inflated bytes. Default 64MiB;
	// from 1KiB to max_bytes.
	MaxEntryBytes policy.ByteSize `yaml:"max_entry_bytes"`
	// MaxRatio bounds inflated bytes per byte of the upload, once more
	// than 1MiB is inflated (small archives of text compress well and
	// are harmless). Default 100; from 2 to 100000. Sources compress
	// about 5 to 10 times; a bomb, thousands of times.
	MaxRatio int `yaml:"max_ratio"`
}

// Defaults of ArchiveLimits.
const (
	DefaultArchiveMaxBytes      = 128 << 20
	DefaultArchiveMaxEntries    = 1024
	DefaultArchiveMaxEntryBytes = 64 << 20
	DefaultArchiveMaxRatio      = 100
	// ratioFloor is how much may be inflated before MaxRatio applies.
	ratioFloor = 1 << 20
)

func (a *ArchiveLimits) fillDefaults() {
	if a.MaxBytes == 0 {
		a.MaxBytes = DefaultArchiveMaxBytes
	}
	if a.MaxEntries == 0 {
		a.MaxEntries = DefaultArchiveMaxEntries
	}
	if a.MaxEntryBytes == 0 {
		a.MaxEntryBytes = DefaultArchiveMaxEntryBytes
	}
	if a.MaxRatio == 0 {
		a.MaxRatio = DefaultArchiveMaxRatio
	}
}

func (a ArchiveLimits) validate(fail func(field, format string, args ...any) error) error {
	const k = "limits.archive."
	switch {
	case a.MaxBytes < 1<<10 || a.MaxBytes > 1<<30:
		return fail(k+"max_bytes", "%s is outside 1KiB to 1GiB: the server holds an archive's inflated files in memory; the default is %s", a.MaxBytes, policy.ByteSize(DefaultArchiveMaxBytes))
	case a.MaxEntries < 1 || a.MaxEntries > 100_000:
		return fail(k+"max_entries", "%d is outside 1 to 100000; the default is %d", a.MaxEntries, DefaultArchiveMaxEntries)
	case a.MaxEntryBytes < 1<<10 || a.MaxEntryBytes > a.MaxBytes:
		return fail(k+"max_entry_bytes", "%s is outside 1KiB to max_bytes (%s); the default is %s", a.MaxEntryBytes, a.MaxBytes, policy.ByteSize(DefaultArchiveMaxEntryBytes))
	case a.MaxRatio < 2 || a.MaxRatio > 100_000:
		return fail(k+"max_ratio", "%d is outside 2 to 100000; the default is %d", a.MaxRatio, DefaultArchiveMaxRatio)
	}
	return nil
}

// ArchiveLimitError is an archive that went past one of ArchiveLimits. It
// is a 413 naming the limit's knob.
type ArchiveLimitError struct {
	Knob   string // limits.archive.max_bytes, ...
	Limit  int64
	Entry  string // the entry being read, "" when the limit is on the whole
	Reason string
}

func (e *ArchiveLimitError) Error() string {
	s := "archive: " + e.Reason
	if e.Entry != "" {
		s = "archive: entry " + quoteName(e.Entry) + ": " + e.Reason
	}
	return fmt.Sprintf("%s; the limit is %d (%s in the server config)", s, e.Limit, e.Knob)
}

// ArchiveError is an archive refused for its shape: an entry that is not a
// regular file or directory, a name that leaves the archive, a duplicate,
// a size that lies. It is a 400.
type ArchiveError struct {
	Entry  string
	Reason string
	Err    error
}

func (e *ArchiveError) Error() string {
	if e.Entry == "" {
		return "archive: " + e.Reason
	}
	return "archive: entry " + quoteName(e.Entry) + ": " + e.Reason
}

func (e *ArchiveError) Unwrap() error { return e.Err }

// quoteName quotes an entry name for messages, with control bytes escaped:
// the name comes from the client and goes into logs and the audit trail.
func quoteName(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// archiveProblem turns an unpack error into its problem: 413 for a limit,
// 400 for anything else.
func archiveProblem(err error) *Problem {
	var le *ArchiveLimitError
	if errors.As(err, &le) {
		return problem(http.StatusRequestEntityTooLarge, "too_large", "%v", le)
	}
	var ae *ArchiveError
	if errors.As(err, &ae) {
		return problem(http.StatusBadRequest, "invalid_argument", "%v", ae)
	}
	return problem(http.StatusBadRequest, "invalid_argument", "archive: %v", err)
}

// archiveRule is the audit rule of an unpack error: the limit's knob, or
// "archive" for its shape.
func archiveRule(err error) string {
	var le *ArchiveLimitError
	if errors.As(err, &le) {
		return le.Knob
	}
	return "archive"
}

// onlyFiles ends a refusal of an entry: the plugin tree's rule (package
// plugintree), said for an upload.
const onlyFiles = "an upload may hold only regular files and directories"

// unpacker reads one archive under limits.
type unpacker struct {
	lim        ArchiveLimits
	compressed int64 // the upload's size, for the ratio
	entries    int
	inflated   int64
	files      map[string][]byte // by base name, or by cleaned path (keepPaths)
	paths      map[string]bool   // every entry's cleaned path
	keepPaths  bool
}

// unpackZipTree is unpack of a zip that keys its files by their cleaned
// paths ("data/in.txt"), not their base names: files a program finds
// where the archive put them (Judge0's additional_files), under the same
// refusals and limits.
func unpackZipTree(body []byte, lim ArchiveLimits) (map[string][]byte, error) {
	u := &unpacker{lim: lim, compressed: int64(len(body)), files: map[string][]byte{}, paths: map[string]bool{}, keepPaths: true}
	return u.zip(body)
}

// unpack reads the regular files of a tar, tar.gz or zip archive (mt is
// the upload's media type; gzip is also recognised by its magic), keyed by
// base name: an archive of a plugin directory, whatever its top folder.
//
// It refuses, before holding more than a limit: more inflated bytes,
// entries, bytes in one entry, or inflated bytes per upload byte than lim
// allows (*ArchiveLimitError); and entries that are symbolic or hard
// links, devices, FIFOs or sparse files (the plugin tree's rule,
// plugintree.Refuses, as moat run reads a directory), names that are absolute or climb
// out with "..", two entries of one path or base name, and zip entries
// whose content is not the size they declare (*ArchiveError).
func unpack(mt string, body []byte, lim ArchiveLimits) (map[string][]byte, error) {
	u := &unpacker{lim: lim, compressed: int64(len(body)), files: map[string][]byte{}, paths: map[string]bool{}}
	if mt == "application/zip" || bytes.HasPrefix(body, []byte("PK\x03\x04")) {
		return u.zip(body)
	}
	var r io.Reader = bytes.NewReader(body)
	if mt == "application/gzip" || mt == "application/x-gzip" || bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, &ArchiveError{Reason: "not gzip: " + err.Error(), Err: err}
		}
		defer zr.Close()
		r = zr
	}
	return u.tar(r)
}

func (u *unpacker) tar(r io.Reader) (map[string][]byte, error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return u.files, nil
		}
		if err != nil {
			return nil, &ArchiveError{Reason: "not a valid tar: " + err.Error(), Err: err}
		}
		if err := u.entry(h.Name); err != nil {
			return nil, err
		}
		switch h.Typeflag {
		case tar.TypeDir, tar.TypeXGlobalHeader: // git archive writes a global header (the commit)
			continue
		case tar.TypeReg, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			// The types tar and a directory share: the plugin tree's one
			// rule (package plugintree) decides, as for moat run.
			if what, refused := plugintree.Refuses(h.FileInfo().Mode()); refused {
				if h.Typeflag == tar.TypeSymlink {
					what += " (to " + quoteName(h.Linkname) + ")"
				}
				return nil, &ArchiveError{Entry: h.Name, Reason: "is a " + what + "; " + onlyFiles}
			}
		case tar.TypeLink:
			// A hard link on disk is a regular file; in a tar it is an
			// entry with no content, naming another path.
			return nil, &ArchiveError{Entry: h.Name, Reason: "is a hard link (to " + quoteName(h.Linkname) + "); " + onlyFiles}
		default:
			return nil, &ArchiveError{Entry: h.Name, Reason: fmt.Sprintf("has tar type %q; %s", h.Typeflag, onlyFiles)}
		}
		if h.Size < 0 {
			return nil, &ArchiveError{Entry: h.Name, Reason: fmt.Sprintf("declares a negative size %d", h.Size)}
		}
		if h.Size > int64(u.lim.MaxEntryBytes) {
			return nil, &ArchiveLimitError{Knob: "limits.archive.max_entry_bytes", Limit: int64(u.lim.MaxEntryBytes), Entry: h.Name,
				Reason: fmt.Sprintf("declares %d bytes", h.Size)}
		}
		b, err := u.read(h.Name, tr)
		if err != nil {
			return nil, err
		}
		if int64(len(b)) != h.Size {
			return nil, &ArchiveError{Entry: h.Name, Reason: fmt.Sprintf("declares %d bytes but holds %d", h.Size, len(b))}
		}
		if err := u.add(h.Name, b); err != nil {
			return nil, err
		}
	}
}

func (u *unpacker) zip(body []byte) (map[string][]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) { // names are checked below, with a precise message
		return nil, &ArchiveError{Reason: "not a valid zip: " + err.Error(), Err: err}
	}
	if n := len(zr.File); n > u.lim.MaxEntries {
		return nil, &ArchiveLimitError{Knob: "limits.archive.max_entries", Limit: int64(u.lim.MaxEntries),
			Reason: fmt.Sprintf("its directory lists %d entries", n)}
	}
	for _, f := range zr.File {
		if err := u.entry(f.Name); err != nil {
			return nil, err
		}
		mode := f.Mode()
		if mode.IsDir() {
			continue
		}
		if what, refused := plugintree.Refuses(mode); refused {
			return nil, &ArchiveError{Entry: f.Name, Reason: "is a " + what + "; " + onlyFiles}
		}
		if f.UncompressedSize64 > uint64(u.lim.MaxEntryBytes) {
			return nil, &ArchiveLimitError{Knob: "limits.archive.max_entry_bytes", Limit: int64(u.lim.MaxEntryBytes), Entry: f.Name,
				Reason: fmt.Sprintf("declares %d bytes", f.UncompressedSize64)}
		}
		rc, err := f.Open()
		if err != nil {
			return nil, &ArchiveError{Entry: f.Name, Reason: "cannot be read: " + err.Error(), Err: err}
		}
		b, err := u.read(f.Name, zipBody{rc})
		rc.Close()
		if err != nil {
			return nil, err
		}
		if uint64(len(b)) != f.UncompressedSize64 {
			return nil, &ArchiveError{Entry: f.Name, Reason: fmt.Sprintf("declares %d bytes but holds %d", f.UncompressedSize64, len(b))}
		}
		if err := u.add(f.Name, b); err != nil {
			return nil, err
		}
	}
	return u.files, nil
}

// zipBody reads a zip entry, turning archive/zip's own check of the
// declared size (it fails a read past the declared size with ErrFormat,
// and one that ends short with ErrUnexpectedEOF) into a plain end, so
// that the caller compares the sizes and says which lied.
type zipBody struct{ r io.Reader }

func (z zipBody) Read(p []byte) (int, error) {
	n, err := z.r.Read(p)
	if errors.Is(err, zip.ErrFormat) || errors.Is(err, io.ErrUnexpectedEOF) {
		return n, errSizeLie
	}
	return n, err
}

var errSizeLie = errors.New("the entry's content is not the size its header declares")

// entry counts an entry and checks its name.
func (u *unpacker) entry(name string) error {
	u.entries++
	if u.entries > u.lim.MaxEntries {
		return &ArchiveLimitError{Knob: "limits.archive.max_entries", Limit: int64(u.lim.MaxEntries), Reason: "it holds more entries"}
	}
	switch {
	case name == "":
		return &ArchiveError{Entry: name, Reason: "has an empty name"}
	case strings.ContainsRune(name, 0) || strings.ContainsAny(name, "\\"):
		return &ArchiveError{Entry: name, Reason: "has a NUL or backslash in its name; use / between directories"}
	case strings.HasPrefix(name, "/") || len(name) >= 2 && name[1] == ':':
		return &ArchiveError{Entry: name, Reason: "is an absolute path; archive the plugin directory with relative names"}
	}
	for el := range strings.SplitSeq(strings.TrimSuffix(name, "/"), "/") {
		if el == ".." {
			return &ArchiveError{Entry: name, Reason: "climbs out of the archive with ..; archive the plugin directory with relative names"}
		}
	}
	clean := path.Clean(name)
	if u.paths[clean] {
		return &ArchiveError{Entry: name, Reason: "appears twice; the archive must hold each path once"}
	}
	u.paths[clean] = true
	return nil
}

// read reads one entry's content, counting it against the limits as it
// inflates.
func (u *unpacker) read(name string, r io.Reader) ([]byte, error) {
	var buf bytes.Buffer
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			u.inflated += int64(n)
			if int64(buf.Len()+n) > int64(u.lim.MaxEntryBytes) {
				return nil, &ArchiveLimitError{Knob: "limits.archive.max_entry_bytes", Limit: int64(u.lim.MaxEntryBytes), Entry: name,
					Reason: "inflates to more"}
			}
			if u.inflated > int64(u.lim.MaxBytes) {
				return nil, &ArchiveLimitError{Knob: "limits.archive.max_bytes", Limit: int64(u.lim.MaxBytes), Entry: name,
					Reason: "the archive inflates to more"}
			}
			if u.inflated > ratioFloor && u.inflated > int64(u.lim.MaxRatio)*max(u.compressed, 1) {
				return nil, &ArchiveLimitError{Knob: "limits.archive.max_ratio", Limit: int64(u.lim.MaxRatio), Entry: name,
					Reason: fmt.Sprintf("the archive inflates to more than %d times its %d bytes", u.lim.MaxRatio, u.compressed)}
			}
			buf.Write(chunk[:n])
		}
		switch {
		case err == io.EOF:
			return buf.Bytes(), nil
		case errors.Is(err, errSizeLie):
			return nil, &ArchiveError{Entry: name, Reason: err.Error(), Err: err}
		case err != nil:
			return nil, &ArchiveError{Entry: name, Reason: "cannot be read: " + err.Error(), Err: err}
		}
	}
}

// add keeps a regular file by its base name.
func (u *unpacker) add(name string, b []byte) error {
	if u.keepPaths {
		u.files[path.Clean(name)] = b // entry refused a second entry of the path
		return nil
	}
	base := path.Base(name)
	if _, dup := u.files[base]; dup {
		return &ArchiveError{Entry: name, Reason: fmt.Sprintf("a second file named %s; the archive must hold one plugin", base)}
	}
	u.files[base] = b
	return nil
}
