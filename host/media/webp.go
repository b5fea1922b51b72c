package media

import (
	"encoding/binary"
)

// webpInfo is what stripWebP learns of an image.
type webpInfo struct {
	width, height int
	lossless      bool // VP8L
	animated      bool
	alpha         bool
}

// webpKeep are the chunks a WebP keeps: the bitstreams, alpha, the
// extended header, animation and the ICC profile. EXIF and XMP chunks
// (and unknown ones) are dropped, and the extended header's flags for
// them cleared.
var webpKeep = map[string]bool{
	"VP8 ": true, "VP8L": true, "VP8X": true, "ALPH": true, "ANIM": true, "ANMF": true, "ICCP": true,
}

// stripWebP walks a WebP's RIFF chunks and returns its bytes without the
// EXIF and XMP chunks (the VP8X flags saying they are there cleared), the
// RIFF size rewritten, and nothing after the RIFF container. The
// bitstreams are copied as they are. A WebP whose chunks run past the
// end, or that has no bitstream, is refused; so is an animation of more
// than maxFrames frames or maxAnimationPixels pixels together.
func stripWebP(b []byte) ([]byte, webpInfo, error) {
	var info webpInfo
	if len(b) < 20 {
		return nil, info, invalid("the WebP is truncated in its header")
	}
	riff := binary.LittleEndian.Uint32(b[4:])
	if uint64(riff)+8 > uint64(len(b)) || riff < 4 {
		return nil, info, invalid("the WebP is truncated: its RIFF header says %d bytes, the file holds %d", uint64(riff)+8, len(b))
	}
	b = b[:8+riff]
	out := make([]byte, 12, len(b))
	copy(out, b[:12])
	var pixels int64
	frames := 0
	extended, sawImage := false, false
	flagsAt := -1
	for i, first := 12, true; i < len(b); first = false {
		if i+8 > len(b) {
			return nil, info, invalid("the WebP is truncated in a chunk header")
		}
		fourcc := string(b[i : i+4])
		n := binary.LittleEndian.Uint32(b[i+4:])
		padded := uint64(n) + uint64(n&1)
		if uint64(i)+8+uint64(n) > uint64(len(b)) {
			return nil, info, invalid("the WebP's %q chunk at byte %d runs past the end of the file", printable(fourcc), i)
		}
		end := min(uint64(i)+8+padded, uint64(len(b)))
		chunk := b[i:end]
		data := b[i+8 : i+8+int(n)]
		i = int(end)
		if first && fourcc != "VP8 " && fourcc != "VP8L" && fourcc != "VP8X" {
			return nil, info, invalid("the WebP begins with chunk %q, not a bitstream or VP8X", printable(fourcc))
		}
		switch fourcc {
		case "VP8X":
			if !first || n != 10 {
				return nil, info, invalid("the WebP's VP8X chunk is misplaced or short")
			}
			extended = true
			info.animated = data[0]&0x02 != 0
			info.alpha = data[0]&0x10 != 0
			info.width = 1 + int(uint32(data[4])|uint32(data[5])<<8|uint32(data[6])<<16)
			info.height = 1 + int(uint32(data[7])|uint32(data[8])<<8|uint32(data[9])<<16)
			flagsAt = len(out) + 8
			if err := checkPixels(info.width, info.height); err != nil {
				return nil, info, err
			}
		case "VP8 ", "VP8L":
			w, h, err := webpBitstreamSize(fourcc, data)
			if err != nil {
				return nil, info, err
			}
			if !extended {
				info.width, info.height = w, h
				if err := checkPixels(w, h); err != nil {
					return nil, info, err
				}
			} else if w != info.width || h != info.height {
				return nil, info, invalid("the WebP's bitstream is %d×%d but its canvas %d×%d", w, h, info.width, info.height)
			}
			if sawImage {
				return nil, info, invalid("the WebP has more than one still image")
			}
			sawImage = true
			info.lossless = fourcc == "VP8L"
		case "ANMF":
			if !extended || !info.animated || n < 16 {
				return nil, info, invalid("the WebP has an animation frame outside an animation")
			}
			x, y := 2*int(uint32(data[0])|uint32(data[1])<<8|uint32(data[2])<<16), 2*int(uint32(data[3])|uint32(data[4])<<8|uint32(data[5])<<16)
			w, h := 1+int(uint32(data[6])|uint32(data[7])<<8|uint32(data[8])<<16), 1+int(uint32(data[9])|uint32(data[10])<<8|uint32(data[11])<<16)
			if x+w > info.width || y+h > info.height {
				return nil, info, invalid("a WebP frame of %d×%d at %d,%d lies outside the %d×%d canvas", w, h, x, y, info.width, info.height)
			}
			if frames++; frames > maxFrames {
				return nil, info, invalid("the WebP has more than %d frames; the host keeps at most that", maxFrames)
			}
			if pixels += int64(w) * int64(h); pixels > maxAnimationPixels {
				return nil, info, invalid("the WebP's frames hold more than %d pixels together; the host keeps at most that", int64(maxAnimationPixels))
			}
			sawImage = true
		}
		if webpKeep[fourcc] {
			out = append(out, chunk...)
			if uint64(len(chunk)) < 8+padded { // the last chunk's padding byte was missing
				out = append(out, 0)
			}
		}
	}
	if !sawImage {
		return nil, info, invalid("the WebP has no image")
	}
	if flagsAt >= 0 {
		out[flagsAt] &^= 0x08 | 0x04 // EXIF, XMP
	}
	binary.LittleEndian.PutUint32(out[4:], uint32(len(out)-8))
	return out, info, nil
}

// webpBitstreamSize reads the width and height of a VP8 (lossy) or VP8L
// (lossless) bitstream's header.
func webpBitstreamSize(fourcc string, d []byte) (w, h int, err error) {
	if fourcc == "VP8L" {
		if len(d) < 5 || d[0] != 0x2F {
			return 0, 0, invalid("the WebP's VP8L header is malformed")
		}
		bits := binary.LittleEndian.Uint32(d[1:])
		return 1 + int(bits&0x3FFF), 1 + int(bits>>14&0x3FFF), nil
	}
	// VP8: a 3-byte frame tag (key frame: bit 0 clear), the start code
	// 9d 01 2a, then 14-bit width and height (2 bits of scale above each).
	if len(d) < 10 || d[0]&1 != 0 || d[3] != 0x9D || d[4] != 0x01 || d[5] != 0x2A {
		return 0, 0, invalid("the WebP's VP8 header is malformed")
	}
	w = int(binary.LittleEndian.Uint16(d[6:]) & 0x3FFF)
	h = int(binary.LittleEndian.Uint16(d[8:]) & 0x3FFF)
	if w == 0 || h == 0 {
		return 0, 0, invalid("the WebP is %d×%d; an image needs a width and a height", w, h)
	}
	return w, h, nil
}
