package media_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"runtime"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/media"
	"golang.org/x/image/webp"
)

func code(err error) abi.Code {
	var e *abi.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// TestSniff: each type the host keeps is named from its bytes, and what
// shares a signature with one (another RIFF, Ogg video, Matroska, HEIC,
// QuickTime) or is a page (HTML, SVG) is named nothing.
func TestSniff(t *testing.T) {
	le32 := func(v uint32) string { b := make([]byte, 4); binary.LittleEndian.PutUint32(b, v); return string(b) }
	oggPage := func(packet string) string {
		return "OggS\x00\x02" + strings.Repeat("\x00", 20) + "\x01" + string([]byte{byte(len(packet))}) + packet
	}
	ebml := func(doc string) string {
		el := "\x42\x82" + string([]byte{byte(0x80 | len(doc))}) + doc
		return "\x1A\x45\xDF\xA3" + string([]byte{byte(0x80 | len(el))}) + el
	}
	ftyp := func(brand string) string { return "\x00\x00\x00\x18ftyp" + brand + "\x00\x00\x00\x00isomiso2" }
	// Two MPEG-1 layer III frames, 128 kbit/s at 44.1 kHz: 417 bytes each.
	frame := "\xFF\xFB\x90\x00" + strings.Repeat("\x00", 413)
	tests := []struct {
		name, data, want string
	}{
		{"jpeg", "\xFF\xD8\xFF\xE0rest", "image/jpeg"},
		{"png", "\x89PNG\r\n\x1A\nrest", "image/png"},
		{"gif87", "GIF87a....", "image/gif"},
		{"gif89", "GIF89a....", "image/gif"},
		{"webp", "RIFF" + le32(4) + "WEBPVP8 ", "image/webp"},
		{"wav", "RIFF" + le32(4) + "WAVEfmt ", "audio/wav"},
		{"avi is another RIFF", "RIFF" + le32(4) + "AVI LIST", ""},
		{"flac", "fLaC\x00\x00\x00\x22", "audio/flac"},
		{"ogg vorbis", oggPage("\x01vorbis\x00\x00\x00\x00"), "audio/ogg"},
		{"ogg opus", oggPage("OpusHead\x01\x02"), "audio/ogg"},
		{"ogg theora is video", oggPage("\x80theora\x00\x00\x00"), ""},
		{"mp3 with ID3", "ID3\x04\x00\x00\x00\x00\x00\x10rest", "audio/mpeg"},
		{"ID3 with a bad size", "ID3\x04\x00\x00\x80\x00\x00\x10rest", ""},
		{"mp3 frames", frame + frame, "audio/mpeg"},
		{"one mp3 frame header alone", frame[:4] + "junk", ""},
		{"mp4", ftyp("isom"), "video/mp4"},
		{"mp4 mp42", ftyp("mp42"), "video/mp4"},
		{"heic", ftyp("heic"), ""},
		{"quicktime", ftyp("qt  "), ""},
		{"ftyp box longer than the file", "\x00\x00\x10\x00ftypisom\x00\x00\x00\x00", ""},
		{"webm", ebml("webm"), "video/webm"},
		{"matroska", ebml("matroska"), ""},
		{"pdf", "%PDF-1.7\n", "application/pdf"},
		{"html", "<!DOCTYPE html><script>alert(1)</script>", ""},
		{"svg", `<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`, ""},
		{"zip", "PK\x03\x04", ""},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := media.Sniff([]byte(tt.data)); got != tt.want {
				t.Errorf("Sniff = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestIngestRefuses: bytes the host must not keep are refused with the
// code that says why, whatever they claim to be.
func TestIngestRefuses(t *testing.T) {
	jpg := encodeJPEG(t, gradient(32, 16))
	pngb := encodePNG(t, gradient(32, 16))
	html := []byte("<!DOCTYPE html><html><script>fetch('/v1/modules')</script></html>")
	svg := []byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>`)
	tests := []struct {
		name    string
		data    []byte
		claimed string
		code    abi.Code
		msg     string
	}{
		{"empty", nil, "", abi.CodeInvalidArgument, "empty"},
		{"html", html, "", abi.CodeInvalidArgument, "they look like text/html"},
		{"html claiming image/png", html, "image/png", abi.CodeInvalidArgument, "said to be image/png but its bytes are of no type"},
		{"svg claiming image/png", svg, "image/png", abi.CodeInvalidArgument, "said to be image/png"},
		{"svg claiming image/svg+xml", svg, "image/svg+xml", abi.CodeInvalidArgument, `type "image/svg+xml" is not one the host keeps`},
		{"a png claiming image/jpeg", pngb, "image/jpeg", abi.CodeInvalidArgument, "said to be image/jpeg but its bytes are image/png"},
		{"a claim that does not parse", jpg, "image/jpeg; ;;", abi.CodeInvalidArgument, "not one the host keeps"},
		{"too large", append(append([]byte{}, jpg...), make([]byte, abi.MaxMediaBytes)...), "", abi.CodeTooLarge, "abi.MaxMediaBytes"},
		{"png bomb 100000×100000", pngHeaderOnly(100000, 100000), "", abi.CodeTooLarge, "abi.MaxMediaPixels"},
		{"jpeg bomb 65000×65000", jpegHeaderOnly(65000, 65000), "", abi.CodeTooLarge, "abi.MaxMediaPixels"},
		{"png 0×5", pngHeaderOnly(0, 5), "", abi.CodeInvalidArgument, "needs a width and a height"},
		{"png with a broken CRC", func() []byte { b := bytes.Clone(pngb); b[30] ^= 1; return b }(), "", abi.CodeInvalidArgument, "fails its CRC"},
		{"png with an unknown critical chunk", pngWith(pngb, [][]byte{pngChunk("EVIL", []byte("x"))}, nil), "", abi.CodeInvalidArgument, "critical chunk"},
		{"png without IDAT", pngHeaderOnly(1, 1)[:8+25], "", abi.CodeInvalidArgument, "truncated"},
		{"gif frame outside the screen", gifRaw(10, 10, gifFrame(5, 5, 10, 10, []byte{0x04, 0x01})), "", abi.CodeInvalidArgument, "does not lie within"},
		{"gif screen 65535×65535", gifRaw(65535, 65535, gifFrame(0, 0, 1, 1, []byte{0x04, 0x01})), "", abi.CodeTooLarge, "abi.MaxMediaPixels"},
		{"gif of 5000 frames", gifRaw(1, 1, bytes.Repeat(gifFrame(0, 0, 1, 1, []byte{0x04, 0x01}), 5000)), "", abi.CodeInvalidArgument, "more than 4096 frames"},
		{"gif frames of too many pixels together", gifRaw(8000, 6000, bytes.Repeat(gifFrame(0, 0, 8000, 6000, []byte{0x04, 0x01}), 30)), "", abi.CodeInvalidArgument, "pixels together"},
		{"gif without a frame", gifRaw(4, 4), "", abi.CodeInvalidArgument, "no image"},
		{"jpeg with a second frame", func() []byte {
			b := bytes.Clone(jpg[:len(jpg)-2])
			b = append(b, segment(0xC0, []byte{8, 0, 1, 0, 1, 1, 1, 0x11, 0})...)
			return append(b, 0xFF, 0xD9)
		}(), "", abi.CodeInvalidArgument, "more than one frame"},
		{"jpeg with only a header", []byte{0xFF, 0xD8, 0xFF, 0xD9}, "", abi.CodeInvalidArgument, "no frame or no scan"},
		{"webp whose RIFF size passes the end", func() []byte {
			b := bytes.Clone(readFile(t, "blue-purple-pink.lossy.webp"))
			binary.LittleEndian.PutUint32(b[4:], 1<<30)
			return b
		}(), "", abi.CodeInvalidArgument, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it, err := media.Ingest(tt.data, tt.claimed)
			if code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Ingest = %v, %v; want %s containing %q", it, err, tt.code, tt.msg)
			}
			if bytes.Contains([]byte(err.Error()), []byte("<script")) {
				t.Errorf("the refusal echoes the bytes: %v", err)
			}
		})
	}
}

// TestBombRefusedBeforeDecoding: a 100-byte file announcing
// 100000×100000 pixels (40 GB of RGBA) is refused from its header: the
// refusal allocates what reading a header allocates, not the image.
func TestBombRefusedBeforeDecoding(t *testing.T) {
	for name, bomb := range map[string][]byte{
		"png":  pngHeaderOnly(100000, 100000),
		"jpeg": jpegHeaderOnly(65000, 65000),
		"gif":  gifRaw(65535, 65535, gifFrame(0, 0, 65535, 65535, []byte{0x04, 0x01})),
	} {
		t.Run(name, func(t *testing.T) {
			if len(bomb) > 200 {
				t.Fatalf("the bomb is %d bytes; it should be tiny", len(bomb))
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := media.Ingest(bomb, "")
			runtime.ReadMemStats(&after)
			if code(err) != abi.CodeTooLarge {
				t.Fatalf("Ingest = %v, want too_large", err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("refusing the bomb allocated %d bytes; it must not decode anything", alloc)
			}
		})
	}
}

// TestJPEGStrip: a photo with EXIF (GPS included), XMP, IPTC, a comment
// holding a script, an MPF block, a JFIF thumbnail and an HTML page after
// its end keeps none of them, keeps its ICC profile and its orientation,
// and decodes to exactly the pixels it had.
func TestJPEGStrip(t *testing.T) {
	src := encodeJPEG(t, gradient(64, 48))
	dirty := withMetadata(src, 6)
	it, err := media.Ingest(dirty, "image/jpeg")
	if err != nil {
		t.Fatal(err)
	}
	if it.Type != "image/jpeg" || it.Width != 64 || it.Height != 48 {
		t.Errorf("item %s %d×%d", it.Type, it.Width, it.Height)
	}
	for _, gone := range [][]byte{gpsLatitude, []byte("PhoneCo"), []byte("xmpmeta"), []byte("IPTC-secret"), []byte("<script"), []byte("<html"),
		[]byte("MPF\x00"), []byte("second-image"), {0x88, 0x25} /* the GPSInfo tag */, {0xAB, 0xAB, 0xAB}} {
		if bytes.Contains(it.Data, gone) {
			t.Errorf("the stored JPEG still holds %q", gone)
		}
	}
	if !bytes.Contains(it.Data, []byte("ICC_PROFILE\x00")) {
		t.Error("the ICC profile, which colour needs, was dropped")
	}
	// Segment by segment: only what the strip keeps.
	for i := 2; it.Data[i+1] != 0xDA; {
		m := it.Data[i+1]
		n := int(binary.BigEndian.Uint16(it.Data[i+2:]))
		switch m {
		case 0xE0, 0xE2, 0xC0, 0xC4, 0xDB:
		case 0xE1:
			if n != 34 {
				t.Errorf("an APP1 of %d bytes survives; only the 34-byte orientation block may", n)
			}
		default:
			t.Errorf("marker 0x%02X survives", m)
		}
		i += 2 + n
	}
	if !bytes.HasSuffix(it.Data, []byte{0xFF, 0xD9}) {
		t.Error("the stored JPEG does not end at its end-of-image marker")
	}
	a, err := jpeg.Decode(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	b, err := jpeg.Decode(bytes.NewReader(it.Data))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.(*image.YCbCr).Y, b.(*image.YCbCr).Y) || !bytes.Equal(a.(*image.YCbCr).Cb, b.(*image.YCbCr).Cb) || !bytes.Equal(a.(*image.YCbCr).Cr, b.(*image.YCbCr).Cr) {
		t.Error("the stripped JPEG decodes to other pixels")
	}
	again, err := media.Ingest(it.Data, "")
	if err != nil || !bytes.Equal(again.Data, it.Data) {
		t.Errorf("stripping a stripped JPEG changed it (%v)", err)
	}
}

// TestPNGStrip: text, XMP, EXIF, time and private chunks and trailing
// bytes go; transparency, gamma and the pixels stay.
func TestPNGStrip(t *testing.T) {
	src := encodePNG(t, gradient(40, 30))
	dirty := pngWith(src, [][]byte{
		pngChunk("gAMA", []byte{0, 0, 0xB1, 0x8F}),
		pngChunk("tEXt", []byte("Comment\x00GPS 47.37N 8.54E")),
		pngChunk("zTXt", []byte("Author\x00\x00x\x9c\x03\x00\x00\x00\x00\x01")),
		pngChunk("iTXt", []byte("XML:com.adobe.xmp\x00\x00\x00\x00\x00<x:xmpmeta/>")),
		pngChunk("eXIf", exifWithGPS(1)[6:]),
		pngChunk("tIME", []byte{7, 232, 1, 2, 3, 4, 5}),
		pngChunk("prVt", []byte("private tracking id")),
	}, []byte("<html><script>alert(1)</script>"))
	it, err := media.Ingest(dirty, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"tEXt", "zTXt", "iTXt", "eXIf", "tIME", "prVt", "GPS", "xmpmeta", "tracking", "<script"} {
		if bytes.Contains(it.Data, []byte(gone)) {
			t.Errorf("the stored PNG still holds %q", gone)
		}
	}
	if bytes.Contains(it.Data, gpsLatitude) {
		t.Error("the stored PNG still holds the GPS latitude")
	}
	if !bytes.Contains(it.Data, []byte("gAMA")) {
		t.Error("gAMA, which rendering needs, was dropped")
	}
	a, _ := png.Decode(bytes.NewReader(src))
	b, err := png.Decode(bytes.NewReader(it.Data))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rgba(a).Pix, rgba(b).Pix) {
		t.Error("the stripped PNG decodes to other pixels")
	}
}

// TestGIFStrip: comments and XMP go; the looping extension, every frame
// and their timing stay.
func TestGIFStrip(t *testing.T) {
	src := encodeGIF(t, 3, 8, 8)
	// After the header, screen and global palette, add a comment and an
	// XMP block.
	cut := 13
	if src[10]&0x80 != 0 {
		cut += 3 << (src[10]&7 + 1)
	}
	var dirty []byte
	dirty = append(dirty, src[:cut]...)
	dirty = append(dirty, 0x21, 0xFE, 9, '<', 's', 'c', 'r', 'i', 'p', 't', '>', 'x', 0)
	dirty = append(dirty, 0x21, 0xFF, 11)
	dirty = append(dirty, "XMP DataXMP"...)
	dirty = append(dirty, 6, 'G', 'P', 'S', '4', '7', 'N', 0)
	dirty = append(dirty, src[cut:]...)
	dirty = append(dirty, "trailing"...)
	it, err := media.Ingest(dirty, "image/gif")
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"<script", "XMP DataXMP", "GPS47N", "trailing"} {
		if bytes.Contains(it.Data, []byte(gone)) {
			t.Errorf("the stored GIF still holds %q", gone)
		}
	}
	a, _ := gif.DecodeAll(bytes.NewReader(src))
	b, err := gif.DecodeAll(bytes.NewReader(it.Data))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Image) != 3 || b.LoopCount != a.LoopCount {
		t.Errorf("the stripped GIF has %d frames, loop %d; want 3, %d", len(b.Image), b.LoopCount, a.LoopCount)
	}
	for i := range a.Image {
		if !bytes.Equal(a.Image[i].Pix, b.Image[i].Pix) || a.Delay[i] != b.Delay[i] {
			t.Errorf("frame %d changed", i)
		}
	}
}

// TestWebPStrip: a WebP's EXIF and XMP chunks go and the extended
// header stops announcing them; the bitstream stays and decodes.
func TestWebPStrip(t *testing.T) {
	simple := readFile(t, "blue-purple-pink.lossy.webp")
	dirty := webpExtended(simple, 150, 100)
	if _, err := webp.Decode(bytes.NewReader(dirty)); err != nil {
		t.Fatalf("the fixture does not decode: %v", err)
	}
	it, err := media.Ingest(append(dirty, "trailing"...), "image/webp")
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"EXIF", "XMP ", "xmpmeta", "PhoneCo", "trailing"} {
		if bytes.Contains(it.Data, []byte(gone)) {
			t.Errorf("the stored WebP still holds %q", gone)
		}
	}
	if bytes.Contains(it.Data, gpsLatitude) {
		t.Error("the stored WebP still holds the GPS latitude")
	}
	if it.Data[20]&(0x08|0x04) != 0 {
		t.Errorf("VP8X flags %#x still announce EXIF or XMP", it.Data[20])
	}
	if got := binary.LittleEndian.Uint32(it.Data[4:]); int(got) != len(it.Data)-8 {
		t.Errorf("RIFF size %d for %d bytes", got, len(it.Data))
	}
	a, _ := webp.Decode(bytes.NewReader(simple))
	b, err := webp.Decode(bytes.NewReader(it.Data))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.(*image.YCbCr).Y, b.(*image.YCbCr).Y) || it.Width != 150 || it.Height != 100 {
		t.Errorf("the stripped WebP changed: %d×%d", it.Width, it.Height)
	}
	for _, name := range []string{"yellow_rose.lossy-with-alpha.webp", "gopher-doc.with-alpha.lossless.webp"} {
		if _, err := media.Ingest(readFile(t, name), ""); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTruncated: every proper prefix of a valid image is refused as
// invalid, and none of them panics.
func TestTruncated(t *testing.T) {
	for name, full := range map[string][]byte{
		"jpeg": withMetadata(encodeJPEG(t, gradient(16, 16)), 3),
		"png":  encodePNG(t, gradient(16, 16)),
		"gif":  encodeGIF(t, 2, 4, 4),
		"webp": readFile(t, "blue-purple-pink.lossy.webp"),
	} {
		t.Run(name, func(t *testing.T) {
			// What is stored ends where the image does: nothing trails it.
			it, err := media.Ingest(full, "")
			if err != nil {
				t.Fatalf("the whole file: %v", err)
			}
			full = it.Data
			for n := 1; n < len(full); n++ {
				if _, err := media.Ingest(full[:n], ""); code(err) != abi.CodeInvalidArgument {
					t.Fatalf("the first %d of %d bytes: %v, want invalid_argument", n, len(full), err)
				}
			}
		})
	}
}

// TestMangled: flipping bytes of valid images never panics, and whatever
// is kept strips to itself (the strip is idempotent).
func TestMangled(t *testing.T) {
	seeds := [][]byte{
		withMetadata(encodeJPEG(t, gradient(16, 16)), 6),
		encodePNG(t, gradient(16, 16)),
		encodeGIF(t, 2, 4, 4),
		webpExtended(readFile(t, "blue-purple-pink.lossy.webp"), 150, 100),
	}
	rnd := uint32(1)
	next := func() uint32 { rnd ^= rnd << 13; rnd ^= rnd >> 17; rnd ^= rnd << 5; return rnd }
	kept := 0
	for round := 0; round < 3000; round++ {
		b := bytes.Clone(seeds[round%len(seeds)])
		for k := 0; k < 1+int(next()%3); k++ {
			b[next()%uint32(len(b))] = byte(next())
		}
		it, err := media.Ingest(b, "")
		if err != nil {
			if c := code(err); c != abi.CodeInvalidArgument && c != abi.CodeTooLarge {
				t.Fatalf("round %d: %v", round, err)
			}
			continue
		}
		kept++
		again, err := media.Ingest(it.Data, it.Type)
		if err != nil || !bytes.Equal(again.Data, it.Data) {
			t.Fatalf("round %d: a kept item strips to something else (%v)", round, err)
		}
	}
	t.Logf("%d of 3000 mangled files kept", kept)
}
