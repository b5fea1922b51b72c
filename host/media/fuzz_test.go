package media_test

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/media"
)

// FuzzIngest: whatever the bytes, Ingest refuses them with a code or keeps
// an item of an allowed type within the pixel cap that strips to itself;
// a small kept image's thumbnail is made or refused, never a panic.
func FuzzIngest(f *testing.F) {
	f.Add(withMetadata(encodeJPEG(f, gradient(16, 8)), 6))
	f.Add(encodePNG(f, gradient(9, 7)))
	f.Add(encodeGIF(f, 2, 4, 3))
	f.Add(webpExtended(readFile(f, "blue-purple-pink.lossy.webp"), 150, 100))
	f.Add(readFile(f, "gopher-doc.with-alpha.lossless.webp"))
	f.Add(pngHeaderOnly(100000, 100000))
	f.Add([]byte("%PDF-1.7\n"))
	slots := media.NewDecodeSlots(0)
	f.Fuzz(func(t *testing.T, data []byte) {
		it, err := media.Ingest(data, "")
		if err != nil {
			if c := code(err); c != abi.CodeInvalidArgument && c != abi.CodeTooLarge {
				t.Fatalf("refused with %v", err)
			}
			return
		}
		if !slices.Contains(abi.MediaTypes, it.Type) || int64(it.Width)*int64(it.Height) > abi.MaxMediaPixels {
			t.Fatalf("kept %s %d×%d", it.Type, it.Width, it.Height)
		}
		again, err := media.Ingest(it.Data, it.Type)
		if err != nil || !bytes.Equal(again.Data, it.Data) || again.Width != it.Width || again.Height != it.Height {
			t.Fatalf("a kept item does not strip to itself: %v", err)
		}
		if media.IsImage(it.Type) && it.Width*it.Height <= 1<<16 {
			if _, err := media.Thumbnail(context.Background(), slots, it.Data, it.Type, 8, 8, abi.FitCover); err != nil {
				if c := code(err); c != abi.CodeInvalidArgument {
					t.Fatalf("thumbnail refused with %v", err)
				}
			}
		}
	})
}
