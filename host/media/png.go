package media

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

var pngSignature = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'}

// pngInfo is what stripPNG learns of an image.
type pngInfo struct {
	width, height int
	depth         int   // bits per sample
	colorType     int   // IHDR's colour type
	interlaced    bool  // Adam7
	frames        int   // an APNG's frames (acTL); 0 for a still image
	framePixels   int64 // the pixels of every APNG frame together
}

// pngKeep are the chunks a PNG keeps: the critical ones, and the
// ancillary ones that change how the pixels look or move (transparency,
// colour space and gamma, the background, the pixel aspect, APNG's
// animation). Every other ancillary chunk is dropped: tEXt, zTXt and
// iTXt (text, XMP), eXIf (EXIF, GPS), tIME, and private chunks that could
// carry anything.
var pngKeep = map[string]bool{
	"IHDR": true, "PLTE": true, "IDAT": true, "IEND": true,
	"tRNS": true, "cHRM": true, "gAMA": true, "iCCP": true, "sBIT": true, "sRGB": true,
	"cICP": true, "mDCV": true, "cLLI": true, "bKGD": true, "pHYs": true,
	"acTL": true, "fcTL": true, "fdAT": true,
}

// stripPNG walks a PNG's chunks, checking each one's length and CRC, and
// returns its bytes with only the chunks of pngKeep, copied as they are
// (the pixels are untouched), and nothing after IEND. A PNG whose chunks
// run past the end, fail their CRC, miss IHDR, IDAT or IEND, or hold a
// critical chunk the format does not define is refused.
func stripPNG(b []byte) ([]byte, pngInfo, error) {
	var info pngInfo
	if !bytes.HasPrefix(b, pngSignature) {
		return nil, info, invalid("the PNG has no signature")
	}
	out := make([]byte, 0, len(b))
	out = append(out, pngSignature...)
	sawIDAT := false
	for i, first := len(pngSignature), true; ; first = false {
		if i+12 > len(b) {
			return nil, info, invalid("the PNG is truncated: it ends before its IEND chunk")
		}
		n := binary.BigEndian.Uint32(b[i:])
		typ := string(b[i+4 : i+8])
		if n > 1<<31-1 || uint64(i)+12+uint64(n) > uint64(len(b)) {
			return nil, info, invalid("the PNG's %q chunk at byte %d runs past the end of the file", printable(typ), i)
		}
		chunk := b[i : i+12+int(n)]
		data := chunk[8 : 8+n]
		if crc32.ChecksumIEEE(chunk[4:8+n]) != binary.BigEndian.Uint32(chunk[8+n:]) {
			return nil, info, invalid("the PNG's %q chunk at byte %d fails its CRC", printable(typ), i)
		}
		i += len(chunk)
		if first != (typ == "IHDR") {
			return nil, info, invalid("the PNG does not begin with its IHDR chunk")
		}
		switch typ {
		case "IHDR":
			if n != 13 {
				return nil, info, invalid("the PNG's IHDR chunk is %d bytes, not 13", n)
			}
			w, h := binary.BigEndian.Uint32(data), binary.BigEndian.Uint32(data[4:])
			if w == 0 || h == 0 || w > 1<<31-1 || h > 1<<31-1 {
				return nil, info, invalid("the PNG is %d×%d; an image needs a width and a height", w, h)
			}
			info.width, info.height = int(w), int(h)
			if err := checkPixels(info.width, info.height); err != nil {
				return nil, info, err
			}
			info.depth, info.colorType, info.interlaced = int(data[8]), int(data[9]), data[12] == 1
		case "IDAT":
			sawIDAT = true
		case "acTL":
			if n != 8 {
				return nil, info, invalid("the PNG's acTL chunk is %d bytes, not 8", n)
			}
			f := binary.BigEndian.Uint32(data)
			if f > maxFrames {
				return nil, info, invalid("the PNG animates %d frames; the host keeps at most %d", f, maxFrames)
			}
			info.frames = int(f)
		case "fcTL":
			if n != 26 {
				return nil, info, invalid("the PNG's fcTL chunk is %d bytes, not 26", n)
			}
			w, h := binary.BigEndian.Uint32(data[4:]), binary.BigEndian.Uint32(data[8:])
			x, y := binary.BigEndian.Uint32(data[12:]), binary.BigEndian.Uint32(data[16:])
			if uint64(x)+uint64(w) > uint64(info.width) || uint64(y)+uint64(h) > uint64(info.height) {
				return nil, info, invalid("an APNG frame of %d×%d at %d,%d lies outside the %d×%d image", w, h, x, y, info.width, info.height)
			}
			if info.framePixels += int64(w) * int64(h); info.framePixels > maxAnimationPixels {
				return nil, info, invalid("the APNG's frames hold more than %d pixels together; the host keeps at most that", int64(maxAnimationPixels))
			}
		}
		if typ == "IEND" {
			if !sawIDAT {
				return nil, info, invalid("the PNG has no image data (IDAT)")
			}
			out = append(out, chunk...)
			return out, info, nil
		}
		switch {
		case pngKeep[typ]:
			out = append(out, chunk...)
		case typ[0]&0x20 == 0: // an upper-case first letter: critical
			return nil, info, invalid("the PNG has a critical chunk %q that the format does not define", printable(typ))
		}
	}
}

// printable keeps a chunk type from putting control bytes into a message.
func printable(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7E {
			b[i] = '?'
		}
	}
	return string(b)
}
