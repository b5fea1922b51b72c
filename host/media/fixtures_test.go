package media_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"testing"
)

// The fixtures: real images made by the standard library's encoders, and
// the metadata a camera or an editor adds, spliced in as they would.

// gradient is a w × h image whose pixels differ, so a change to any of
// them shows.
func gradient(w, h int) *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			m.SetNRGBA(x, y, color.NRGBA{uint8(x * 255 / max(1, w-1)), uint8(y * 255 / max(1, h-1)), uint8((x + y) % 256), 255})
		}
	}
	return m
}

// halves is w × h, its left half red and its right half blue: where a
// thumbnail puts each shows how it was turned.
func halves(w, h int) *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.NRGBA{255, 0, 0, 255}
			if x >= w/2 {
				c = color.NRGBA{0, 0, 255, 255}
			}
			m.SetNRGBA(x, y, c)
		}
	}
	return m
}

// rgba is m's pixels as RGBA, whatever the decoder's layout.
func rgba(m image.Image) *image.RGBA {
	out := image.NewRGBA(m.Bounds())
	draw.Draw(out, out.Bounds(), m, m.Bounds().Min, draw.Src)
	return out
}

func encodeJPEG(t testing.TB, m image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodePNG(t testing.TB, m image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// segment is a JPEG marker segment.
func segment(marker byte, payload []byte) []byte {
	s := []byte{0xFF, marker, 0, 0}
	binary.BigEndian.PutUint16(s[2:], uint16(len(payload)+2))
	return append(s, payload...)
}

// gpsLatitude is the GPS IFD's latitude, 47° 22' 12.34", as the rationals
// a camera writes: a test finds these bytes in a file that still has it.
var gpsLatitude = []byte{0, 0, 0, 47, 0, 0, 0, 1, 0, 0, 0, 22, 0, 0, 0, 1, 0, 0, 4, 210, 0, 0, 0, 100}

// exifWithGPS is an APP1 EXIF block (big-endian TIFF) with IFD0 holding
// Make, Orientation and a pointer to a GPS IFD with a latitude, as a
// phone writes it.
func exifWithGPS(orientation int) []byte {
	var t bytes.Buffer
	be := binary.BigEndian
	w16 := func(v uint16) { binary.Write(&t, be, v) }
	w32 := func(v uint32) { binary.Write(&t, be, v) }
	t.WriteString("MM\x00*")
	w32(8)
	// IFD0 at 8: three entries, then the next-IFD offset.
	const ifd0 = 8
	const gpsIFD = ifd0 + 2 + 3*12 + 4 // 50
	const makeAt = gpsIFD + 2 + 2*12 + 4
	const latAt = makeAt + 8
	w16(3)
	w16(0x010F) // Make, ASCII, 8 bytes at makeAt
	w16(2)
	w32(8)
	w32(makeAt)
	w16(0x0112) // Orientation, SHORT, 1
	w16(3)
	w32(1)
	w16(uint16(orientation))
	w16(0)
	w16(0x8825) // GPSInfo, LONG, 1: the GPS IFD's offset
	w16(4)
	w32(1)
	w32(gpsIFD)
	w32(0)
	// GPS IFD: LatitudeRef "N", Latitude (3 rationals at latAt).
	w16(2)
	w16(0x0001)
	w16(2)
	w32(2)
	t.Write([]byte{'N', 0, 0, 0})
	w16(0x0002)
	w16(5)
	w32(3)
	w32(latAt)
	w32(0)
	t.WriteString("PhoneCo\x00")
	t.Write(gpsLatitude)
	return append([]byte("Exif\x00\x00"), t.Bytes()...)
}

// withMetadata is jpg with what cameras and editors add: EXIF with GPS,
// XMP, Photoshop's IPTC, a comment (holding a script, as a polyglot
// would), an MPF block, JFIF with an embedded thumbnail, and an HTML
// page after the end-of-image marker.
func withMetadata(jpg []byte, orientation int) []byte {
	var out bytes.Buffer
	out.Write(jpg[:2])
	jfif := append([]byte("JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x02\x01"), bytes.Repeat([]byte{0xAB}, 2*1*3)...)
	out.Write(segment(0xE0, jfif))
	out.Write(segment(0xE1, exifWithGPS(orientation)))
	out.Write(segment(0xE1, []byte("http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta><exif:GPSLatitude>47,22.2N</exif:GPSLatitude></x:xmpmeta>")))
	out.Write(segment(0xED, []byte("Photoshop 3.0\x008BIM\x04\x04\x00\x00\x00\x00\x00\x10\x1c\x02\x78\x00\x0bIPTC-secret")))
	out.Write(segment(0xFE, []byte("<html><script>alert(document.cookie)</script></html>")))
	out.Write(segment(0xE2, []byte("MPF\x00second-image-here")))
	out.Write(segment(0xE2, append([]byte("ICC_PROFILE\x00\x01\x01"), bytes.Repeat([]byte{7}, 64)...)))
	// The encoder's own segments follow its SOI (it writes no APPn).
	out.Write(jpg[2:])
	out.WriteString("<html><body><script>alert(1)</script></body></html>")
	return out.Bytes()
}

// pngChunk is a PNG chunk with its CRC.
func pngChunk(typ string, data []byte) []byte {
	c := make([]byte, 8, 12+len(data))
	binary.BigEndian.PutUint32(c, uint32(len(data)))
	copy(c[4:], typ)
	c = append(c, data...)
	return binary.BigEndian.AppendUint32(c, crc32.ChecksumIEEE(c[4:]))
}

// pngWith inserts chunks after a PNG's IHDR and appends trailing bytes
// after its IEND.
func pngWith(p []byte, chunks [][]byte, trailing []byte) []byte {
	const ihdrEnd = 8 + 12 + 13
	var out bytes.Buffer
	out.Write(p[:ihdrEnd])
	for _, c := range chunks {
		out.Write(c)
	}
	out.Write(p[ihdrEnd:])
	out.Write(trailing)
	return out.Bytes()
}

// pngHeaderOnly is a PNG whose IHDR says w × h, with one tiny IDAT: a
// decompression bomb's header.
func pngHeaderOnly(w, h uint32) []byte {
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 6 // 8-bit RGBA
	var b bytes.Buffer
	b.Write([]byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'})
	b.Write(pngChunk("IHDR", ihdr))
	b.Write(pngChunk("IDAT", []byte{0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01}))
	b.Write(pngChunk("IEND", nil))
	return b.Bytes()
}

// jpegHeaderOnly is the start of a JPEG whose frame says w × h, then
// EOI: a bomb's header with no pixels at all.
func jpegHeaderOnly(w, h uint16) []byte {
	sof := []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 1, 1, 0x11, 0}
	var b bytes.Buffer
	b.Write([]byte{0xFF, 0xD8})
	b.Write(segment(0xC0, sof))
	b.Write(segment(0xDA, []byte{1, 1, 0, 0, 63, 0}))
	b.Write([]byte{0x00, 0xFF, 0xD9})
	return b.Bytes()
}

func encodeGIF(t testing.TB, frames int, w, h int) []byte {
	t.Helper()
	pal := color.Palette{color.Black, color.White, color.RGBA{255, 0, 0, 255}}
	g := &gif.GIF{}
	for i := 0; i < frames; i++ {
		m := image.NewPaletted(image.Rect(0, 0, w, h), pal)
		for k := range m.Pix {
			m.Pix[k] = uint8((k + i) % len(pal))
		}
		g.Image = append(g.Image, m)
		g.Delay = append(g.Delay, 10)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, g); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// gifRaw is a GIF of a w × h screen with a global palette of two colours
// and the given blocks (frames, extensions), then the trailer.
func gifRaw(w, h uint16, blocks ...[]byte) []byte {
	var b bytes.Buffer
	b.WriteString("GIF89a")
	binary.Write(&b, binary.LittleEndian, w)
	binary.Write(&b, binary.LittleEndian, h)
	b.Write([]byte{0x80, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF})
	for _, bl := range blocks {
		b.Write(bl)
	}
	b.WriteByte(0x3B)
	return b.Bytes()
}

// gifFrame is an image block of w × h at x, y whose LZW data is data,
// in sub-blocks.
func gifFrame(x, y, w, h uint16, data []byte) []byte {
	var b bytes.Buffer
	b.WriteByte(0x2C)
	for _, v := range []uint16{x, y, w, h} {
		binary.Write(&b, binary.LittleEndian, v)
	}
	b.WriteByte(0)
	b.WriteByte(2) // LZW minimum code size
	for len(data) > 0 {
		n := min(255, len(data))
		b.WriteByte(byte(n))
		b.Write(data[:n])
		data = data[n:]
	}
	b.WriteByte(0)
	return b.Bytes()
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// riffChunk is a RIFF chunk, padded to an even length.
func riffChunk(fourcc string, data []byte) []byte {
	c := append([]byte(fourcc), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(c[4:], uint32(len(data)))
	c = append(c, data...)
	if len(data)%2 == 1 {
		c = append(c, 0)
	}
	return c
}

// webpExtended wraps the VP8 bitstream of a simple lossy WebP (w × h) in
// the extended format with EXIF and XMP chunks, as an editor writes it.
func webpExtended(simple []byte, w, h int) []byte {
	vp8 := simple[12:] // the VP8 chunk, whole
	x := make([]byte, 10)
	x[0] = 0x08 | 0x04 // EXIF, XMP
	x[4], x[5], x[6] = byte(w-1), byte((w-1)>>8), byte((w-1)>>16)
	x[7], x[8], x[9] = byte(h-1), byte((h-1)>>8), byte((h-1)>>16)
	var body bytes.Buffer
	body.WriteString("WEBP")
	body.Write(riffChunk("VP8X", x))
	body.Write(vp8)
	body.Write(riffChunk("EXIF", exifWithGPS(1)[6:]))
	body.Write(riffChunk("XMP ", []byte("<x:xmpmeta>GPS 47,22N</x:xmpmeta>")))
	out := append([]byte("RIFF"), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(out[4:], uint32(body.Len()))
	return append(out, body.Bytes()...)
}
