package wasmsnap

import (
	"fmt"
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
// globals; nil when there is none, or it is damaged, of another module or
// of another file (Open).
func Load(path string, globals int) *Image {
	img, _ := Open(path, globals)
	return img
}

// Open reads the image Save wrote at path, for a module defining globals
// globals. The error wraps fs.ErrNotExist when there is none; otherwise it
// says why the file is no image to use: damaged (torn, truncated, another
// format), made for another file (Image.Key: copied or renamed here), or
// of a module with other globals. A use renews the file's time, so that
// Prune removes it last.
func Open(path string, globals int) (*Image, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	img, err := Unmarshal(b)
	switch {
	case err != nil:
		return nil, err
	case img.Key != filepath.Base(path):
		return nil, fmt.Errorf("wasmsnap: the image was made as %q, not as this file (copied or renamed from another image)", clipKey(img.Key))
	case len(img.Globals) != globals:
		return nil, fmt.Errorf("wasmsnap: the image has %d globals; the module has %d (another module's image)", len(img.Globals), globals)
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now)
	return img, nil
}

func clipKey(k string) string {
	if len(k) > 80 {
		return k[:80] + "..."
	}
	return k
}

// Save writes img at path (mode 0600, its directory 0700), whole or not
// at all (atomicfile), bound to the file's name (Image.Key).
func Save(path string, img *Image) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	c := *img
	c.Key = filepath.Base(path)
	return atomicfile.Write(path, c.Marshal())
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
