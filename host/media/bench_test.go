package media_test

import (
	"context"
	"testing"

	"github.com/moat-sandbox/moat/host/media"
)

// BenchmarkIngest: checking and stripping a 24-megapixel photo with its
// metadata (the walk copies the file once; nothing is decoded).
func BenchmarkIngest(b *testing.B) {
	data := withMetadata(encodeJPEG(b, gradient(6000, 4000)), 6)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := media.Ingest(data, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkThumbnail: a 256×256 thumbnail of a 24-megapixel JPEG (the
// decode is most of it) and of a 2-megapixel PNG.
func BenchmarkThumbnail(b *testing.B) {
	for _, c := range []struct {
		name string
		data []byte
		typ  string
	}{
		{"jpeg-6000x4000", encodeJPEG(b, gradient(6000, 4000)), "image/jpeg"},
		{"png-1600x1200", encodePNG(b, gradient(1600, 1200)), "image/png"},
	} {
		b.Run(c.name, func(b *testing.B) {
			slots := media.NewDecodeSlots(0)
			for b.Loop() {
				if _, err := media.Thumbnail(context.Background(), slots, c.data, c.typ, 256, 256, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
