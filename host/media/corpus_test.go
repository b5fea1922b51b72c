package media_test

import (
	"bytes"
	"context"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/media"
)

// TestStandardLibraryCorpus runs Ingest and Thumbnail over the images
// the Go distribution tests its own decoders with (progressive, restart
// markers, CMYK, every chroma subsampling, grey, interlaced GIF and PNG,
// the PNG suite's bit depths and colour types): each one the decoder
// reads is kept, decodes to the same pixels after the strip, and has a
// thumbnail; one it refused would have no thumbnail either. (The
// distribution's 72 files all decode today.)
func TestStandardLibraryCorpus(t *testing.T) {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	root := filepath.Join(strings.TrimSpace(string(goroot)), "src", "image")
	var files []string
	for _, pat := range []string{"testdata/*.jpeg", "testdata/*.png", "testdata/*.gif", "png/testdata/pngsuite/*.png"} {
		m, _ := filepath.Glob(filepath.Join(root, pat))
		files = append(files, m...)
	}
	if len(files) < 50 {
		t.Skipf("the Go distribution's image test files are not at %s (%d found)", root, len(files))
	}
	slots := media.NewDecodeSlots(0)
	kept := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(f, root+"/")
		want, werr := decodeAny(data)
		it, err := media.Ingest(data, "")
		if werr != nil {
			// The decoder refuses it; the host may keep its structure
			// (it does not decode at ingest), but never makes a thumbnail.
			if err == nil {
				if _, terr := media.Thumbnail(context.Background(), slots, it.Data, it.Type, 32, 32, ""); terr == nil {
					t.Errorf("%s: the decoder refuses it (%v), yet it has a thumbnail", name, werr)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: the decoder reads it, Ingest refuses it: %v", name, err)
			continue
		}
		kept++
		got, err := decodeAny(it.Data)
		if err != nil || !bytes.Equal(rgba(want).Pix, rgba(got).Pix) {
			t.Errorf("%s: the stored bytes decode to other pixels (%v)", name, err)
		}
		if _, err := media.Thumbnail(context.Background(), slots, it.Data, it.Type, 32, 32, ""); err != nil {
			t.Errorf("%s: thumbnail: %v", name, err)
		}
	}
	t.Logf("%d of %d files kept and thumbnailed", kept, len(files))
}

func decodeAny(data []byte) (image.Image, error) {
	switch media.Sniff(data) {
	case "image/jpeg":
		return jpeg.Decode(bytes.NewReader(data))
	case "image/png":
		return png.Decode(bytes.NewReader(data))
	case "image/gif":
		return gif.Decode(bytes.NewReader(data))
	}
	return nil, os.ErrInvalid
}
