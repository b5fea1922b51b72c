package server

import (
	"errors"
	"path"
	"testing"
)

// FuzzArchive feeds unpack arbitrary uploads under small limits. Whatever
// the bytes, it must not panic, must fail only with an *ArchiveError or an
// *ArchiveLimitError, and what it accepts must be within every limit:
// the entries' bytes, each one's bytes, their number, and names that are
// plain base names. The seeds (testdata/fuzz/FuzzArchive) are a tar, a
// tar.gz, a zip, a small bomb of each and archives with a link, a
// traversal and a duplicate.
func FuzzArchive(f *testing.F) {
	lim := ArchiveLimits{MaxBytes: 64 << 10, MaxEntries: 8, MaxEntryBytes: 16 << 10, MaxRatio: 10}
	types := []string{"application/x-tar", "application/gzip", "application/zip", "application/octet-stream"}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		mt := types[int(kind)%len(types)]
		files, err := unpack(mt, body, lim)
		if err != nil {
			var ae *ArchiveError
			var le *ArchiveLimitError
			if !errors.As(err, &ae) && !errors.As(err, &le) {
				t.Fatalf("%s: error of type %T: %v", mt, err, err)
			}
			if p := archiveProblem(err); p.Status != 400 && p.Status != 413 {
				t.Fatalf("%s: problem status %d for %v", mt, p.Status, err)
			}
			return
		}
		if len(files) > lim.MaxEntries {
			t.Fatalf("%s: %d files, over max_entries %d", mt, len(files), lim.MaxEntries)
		}
		var total int
		for name, b := range files {
			if name != path.Base(name) || name == ".." || name == "." || name == "/" || name == "" {
				t.Fatalf("%s: file name %q is not a base name", mt, name)
			}
			if len(b) > int(lim.MaxEntryBytes) {
				t.Fatalf("%s: %s is %d bytes, over max_entry_bytes", mt, name, len(b))
			}
			total += len(b)
		}
		if total > int(lim.MaxBytes) {
			t.Fatalf("%s: %d bytes in all, over max_bytes", mt, total)
		}
		if total > ratioFloor && total > lim.MaxRatio*len(body) {
			t.Fatalf("%s: %d bytes from %d, over max_ratio", mt, total, len(body))
		}
	})
}
