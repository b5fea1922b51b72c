package wasmsnap

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/atomicfile"
)

// Images on disk: a file per image, named by the caller after what the
// image depends on, in a directory only the host may read (they hold a
// guest's memory).

// Load reads the image Save wrote at path, for a module defining globals
// globals; nil when there is none, or it is damaged or of another module.
// A use renews the file's time, so that Prune removes it last.
func Load(path string, globals int) *Image {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	img, err := Unmarshal(b)
	if err != nil || len(img.Globals) != globals {
		return nil
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now)
	return img
}

// Save writes img at path (mode 0600, its directory 0700), whole or not
// at all (atomicfile).
func Save(path string, img *Image) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, img.Marshal())
}

// Prune removes the least recently used images (by modification time,
// which Load renews) until those in dir hold at most max bytes. A removed
// image is made again when it is next needed.
func Prune(dir string, max int64) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type file struct {
		path string
		size int64
		at   time.Time
	}
	var files []file
	var total int64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".img") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		files = append(files, file{filepath.Join(dir, e.Name()), info.Size(), info.ModTime()})
		total += info.Size()
	}
	slices.SortFunc(files, func(a, b file) int { return a.at.Compare(b.at) })
	for _, f := range files {
		if total <= max {
			break
		}
		if os.Remove(f.path) == nil {
			total -= f.size
		}
	}
}
