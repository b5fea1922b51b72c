package media_test

import (
	"bytes"
	"compress/lzw"
	"context"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/media"
)

// thumb makes a thumbnail of data through Ingest, as the op does, and
// decodes it.
func thumb(t *testing.T, slots *media.DecodeSlots, data []byte, w, h int, fit string) (*media.Item, *image.RGBA) {
	t.Helper()
	it, err := media.Ingest(data, "")
	if err != nil {
		t.Fatal(err)
	}
	th, err := media.Thumbnail(context.Background(), slots, it.Data, it.Type, w, h, fit)
	if err != nil {
		t.Fatal(err)
	}
	if th.Type != "image/png" {
		t.Fatalf("thumbnail type %s", th.Type)
	}
	m, err := png.Decode(bytes.NewReader(th.Data))
	if err != nil {
		t.Fatal(err)
	}
	if m.Bounds().Dx() != th.Width || m.Bounds().Dy() != th.Height {
		t.Fatalf("the item says %d×%d, the PNG is %v", th.Width, th.Height, m.Bounds())
	}
	return th, rgba(m)
}

// near reports whether c is within 24 of want in every channel.
func near(c color.RGBA, want color.RGBA) bool {
	d := func(a, b uint8) bool { return a-b < 24 || b-a < 24 }
	return d(c.R, want.R) && d(c.G, want.G) && d(c.B, want.B) && d(c.A, want.A)
}

var (
	red  = color.RGBA{255, 0, 0, 255}
	blue = color.RGBA{0, 0, 255, 255}
)

// TestThumbnailFits: contain keeps the aspect within the box, cover
// fills it from the centre, fill stretches; contain and cover never
// enlarge.
func TestThumbnailFits(t *testing.T) {
	slots := media.NewDecodeSlots(0)
	src := encodePNG(t, halves(400, 200))
	tests := []struct {
		name      string
		w, h      int
		fit       string
		wantW     int
		wantH     int
		left      color.RGBA // at the left edge, middle row
		rightEdge color.RGBA
	}{
		{"contain", 100, 100, "", 100, 50, red, blue},
		{"contain named", 100, 100, abi.FitContain, 100, 50, red, blue},
		{"cover", 100, 100, abi.FitCover, 100, 100, red, blue},
		{"cover, a thin strip", 100, 10, abi.FitCover, 100, 10, red, blue},
		{"fill", 50, 80, abi.FitFill, 50, 80, red, blue},
		{"contain never enlarges", 1000, 1000, abi.FitContain, 400, 200, red, blue},
		{"cover never enlarges", 1000, 50, abi.FitCover, 400, 50, red, blue},
		{"fill enlarges", 800, 300, abi.FitFill, 800, 300, red, blue},
		{"one pixel", 1, 1, abi.FitContain, 1, 1, color.RGBA{}, color.RGBA{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th, m := thumb(t, slots, src, tt.w, tt.h, tt.fit)
			if th.Width != tt.wantW || th.Height != tt.wantH {
				t.Fatalf("thumbnail %d×%d, want %d×%d", th.Width, th.Height, tt.wantW, tt.wantH)
			}
			if tt.wantW == 1 {
				return
			}
			if l, r := m.RGBAAt(0, th.Height/2), m.RGBAAt(th.Width-1, th.Height/2); !near(l, tt.left) || !near(r, tt.rightEdge) {
				t.Errorf("left edge %v, right edge %v; want %v, %v", l, r, tt.left, tt.rightEdge)
			}
		})
	}
}

// TestThumbnailOrientation: a JPEG whose EXIF said to turn it is turned:
// its left half (red) is on top for orientation 6 (the camera turned
// clockwise), at the bottom for 8, on the right for 3 and 2.
func TestThumbnailOrientation(t *testing.T) {
	slots := media.NewDecodeSlots(0)
	raw := encodeJPEG(t, halves(80, 40))
	tests := []struct {
		orientation int
		w, h        int // as displayed
		first, last color.RGBA
		vertical    bool // the halves are top and bottom
	}{
		{1, 80, 40, red, blue, false},
		{2, 80, 40, blue, red, false},
		{3, 80, 40, blue, red, false},
		{4, 80, 40, red, blue, false},
		{5, 40, 80, red, blue, true},
		{6, 40, 80, red, blue, true},
		{7, 40, 80, blue, red, true},
		{8, 40, 80, blue, red, true},
	}
	for _, tt := range tests {
		_, m := thumb(t, slots, withMetadata(raw, tt.orientation), 200, 200, abi.FitContain)
		if b := m.Bounds(); b.Dx() != tt.w || b.Dy() != tt.h {
			t.Errorf("orientation %d: %v, want %d×%d", tt.orientation, b, tt.w, tt.h)
			continue
		}
		a, z := m.RGBAAt(2, tt.h/2), m.RGBAAt(tt.w-3, tt.h/2)
		if tt.vertical {
			a, z = m.RGBAAt(tt.w/2, 2), m.RGBAAt(tt.w/2, tt.h-3)
		}
		if !near(a, tt.first) || !near(z, tt.last) {
			t.Errorf("orientation %d: %v then %v, want %v then %v", tt.orientation, a, z, tt.first, tt.last)
		}
	}
}

// TestThumbnailAverages: a 1000×1000 checkerboard of black and white
// pixels reduces to grey, every pixel of it: the box reduction counts
// every source pixel, where sampling would alias to black or white.
func TestThumbnailAverages(t *testing.T) {
	m := image.NewGray(image.Rect(0, 0, 1000, 1000))
	for y := 0; y < 1000; y++ {
		for x := 0; x < 1000; x++ {
			if (x+y)%2 == 0 {
				m.Pix[y*m.Stride+x] = 255
			}
		}
	}
	_, th := thumb(t, media.NewDecodeSlots(0), encodePNG(t, m), 37, 37, abi.FitContain)
	for y := 0; y < 37; y++ {
		for x := 0; x < 37; x++ {
			if c := th.RGBAAt(x, y); c.R < 110 || c.R > 145 {
				t.Fatalf("pixel %d,%d is %v, not grey", x, y, c)
			}
		}
	}
}

// TestThumbnailTypes: every image type the host keeps has a thumbnail:
// paletted and 16-bit PNG, a GIF whose first frame covers part of its
// screen, lossy WebP with alpha and lossless WebP.
func TestThumbnailTypes(t *testing.T) {
	slots := media.NewDecodeSlots(0)
	pal := image.NewPaletted(image.Rect(0, 0, 300, 100), color.Palette{red, blue, color.RGBA{}})
	for i := range pal.Pix {
		pal.Pix[i] = uint8(i % 300 / 150)
	}
	deep := image.NewRGBA64(image.Rect(0, 0, 300, 100))
	partial := gifRaw(20, 10, gifFrame(5, 5, 2, 2, lzwData(t, 4)))
	for name, data := range map[string][]byte{
		"jpeg":          encodeJPEG(t, gradient(300, 100)),
		"paletted png":  encodePNG(t, pal),
		"16-bit png":    encodePNG(t, deep),
		"gif":           encodeGIF(t, 3, 300, 100),
		"partial gif":   partial,
		"lossy webp":    readFile(t, "yellow_rose.lossy-with-alpha.webp"),
		"lossless webp": readFile(t, "gopher-doc.with-alpha.lossless.webp"),
	} {
		t.Run(name, func(t *testing.T) {
			it, err := media.Ingest(data, "")
			if err != nil {
				t.Fatal(err)
			}
			th, _ := thumb(t, slots, data, 60, 60, abi.FitContain)
			if th.Width > 60 || th.Height > 60 || (th.Width != 60 && th.Height != 60 && it.Width > 60) {
				t.Errorf("%d×%d from %d×%d", th.Width, th.Height, it.Width, it.Height)
			}
		})
	}
}

// lzwData is the GIF LZW stream (code size 2) of n zero pixels.
func lzwData(t *testing.T, n int) []byte {
	var b bytes.Buffer
	w := lzw.NewWriter(&b, lzw.LSB, 2)
	if _, err := w.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return b.Bytes()
}

// TestThumbnailRefuses: what has no thumbnail, or asks for a bad one, is
// refused with its code; so is a GIF whose 1×1 frame's LZW data expands
// to 16 million pixels (the decoder stops at the frame's one).
func TestThumbnailRefuses(t *testing.T) {
	slots := media.NewDecodeSlots(0)
	pngb := encodePNG(t, gradient(20, 20))
	bomb := gifRaw(1, 1, gifFrame(0, 0, 1, 1, lzwData(t, 16<<20)))
	animated := func() []byte {
		b := webpExtended(readFile(t, "blue-purple-pink.lossy.webp"), 150, 100)
		b[20] |= 0x02
		return b
	}()
	tests := []struct {
		name      string
		data      []byte
		typ       string
		w, h      int
		fit, want string
		code      abi.Code
	}{
		{"zero width", pngb, "image/png", 0, 10, "", "1 to 2048", abi.CodeInvalidArgument},
		{"too wide", pngb, "image/png", abi.MaxThumbnailSide + 1, 10, "", "1 to 2048", abi.CodeInvalidArgument},
		{"unknown fit", pngb, "image/png", 10, 10, "stretch<script>", "fit must be contain, cover or fill", abi.CodeInvalidArgument},
		{"not an image", []byte("%PDF-1.7\n"), "application/pdf", 10, 10, "", "not an image", abi.CodeInvalidArgument},
		{"LZW bomb", bomb, "image/gif", 10, 10, "", "does not decode", abi.CodeInvalidArgument},
		{"animated webp", animated, "image/webp", 10, 10, "", "animated WebP", abi.CodeInvalidArgument},
		{"a PNG that is not what it says", []byte("\x89PNG\r\n\x1a\nnonsense"), "image/png", 10, 10, "", "header does not decode", abi.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := media.Thumbnail(context.Background(), slots, tt.data, tt.typ, tt.w, tt.h, tt.fit)
			if code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Thumbnail = %v, want %s containing %q", err, tt.code, tt.want)
			}
			if strings.Contains(err.Error(), "<script") {
				t.Errorf("the refusal echoes the request: %v", err)
			}
		})
	}
	if len(bomb) > (16<<20)/1000 {
		t.Errorf("the LZW bomb is %d bytes for 16 Mi pixels; it should be a thousandth of that", len(bomb))
	}
}

// TestDecodeSlotsBound: a decode needing more than the whole bound is
// refused at once, naming the knob.
func TestDecodeSlotsBound(t *testing.T) {
	data := encodePNG(t, gradient(1000, 1000))
	_, err := media.Thumbnail(context.Background(), media.NewDecodeSlots(1<<20), data, "image/png", 10, 10, "")
	if code(err) != abi.CodeResourceExhausted || !strings.Contains(err.Error(), "media.decode_bytes") {
		t.Fatalf("Thumbnail with 1 MiB of slots = %v, want resource_exhausted naming media.decode_bytes", err)
	}
}
