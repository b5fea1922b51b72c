package media

import (
	"bytes"
	"encoding/binary"
)

// gifInfo is what stripGIF learns of an image.
type gifInfo struct {
	width, height int // the logical screen
	frames        int
}

// stripGIF walks a GIF's blocks without decompressing them and returns
// its bytes without comments, plain-text extensions and application
// extensions other than the looping ones (NETSCAPE2.0, ANIMEXTS1.0): XMP
// lives in one. Image blocks and graphic control extensions are copied as
// they are, and nothing after the trailer is kept.
//
// The walk is also the bomb check: every frame must lie within the
// logical screen (whose pixels Ingest bounds), there may be at most
// maxFrames frames, and all of them together at most maxAnimationPixels
// pixels, so a small file cannot make a viewer decode an unbounded
// animation. Each frame's LZW data cannot yield more than its frame's
// pixels: the decoder stops there.
func stripGIF(b []byte) ([]byte, gifInfo, error) {
	var info gifInfo
	if len(b) < 13 {
		return nil, info, invalid("the GIF is truncated in its header")
	}
	info.width = int(binary.LittleEndian.Uint16(b[6:]))
	info.height = int(binary.LittleEndian.Uint16(b[8:]))
	if err := checkPixels(info.width, info.height); err != nil {
		return nil, info, err
	}
	i := 13
	if b[10]&0x80 != 0 {
		i += 3 << (b[10]&7 + 1)
	}
	if i > len(b) {
		return nil, info, invalid("the GIF is truncated in its colour table")
	}
	out := make([]byte, 0, len(b))
	out = append(out, b[:i]...)
	var pixels int64
	for {
		if i >= len(b) {
			return nil, info, invalid("the GIF is truncated: it ends before its trailer")
		}
		start := i
		switch b[i] {
		case 0x3B: // trailer
			if info.frames == 0 {
				return nil, info, invalid("the GIF has no image")
			}
			return append(out, 0x3B), info, nil
		case 0x21: // extension: label, then sub-blocks
			if i+2 > len(b) {
				return nil, info, invalid("the GIF is truncated in an extension")
			}
			label := b[i+1]
			end, ok := subBlocks(b, i+2)
			if !ok {
				return nil, info, invalid("the GIF is truncated in an extension")
			}
			i = end
			switch label {
			case 0xF9: // graphic control: delay, disposal, transparency
				out = append(out, b[start:end]...)
			case 0xFF: // application: only the looping ones
				if end-start >= 14 && b[start+2] == 11 {
					id := b[start+3 : start+14]
					if bytes.Equal(id, []byte("NETSCAPE2.0")) || bytes.Equal(id, []byte("ANIMEXTS1.0")) {
						out = append(out, b[start:end]...)
					}
				}
			}
		case 0x2C: // image descriptor
			if i+10 > len(b) {
				return nil, info, invalid("the GIF is truncated in an image descriptor")
			}
			x, y := int(binary.LittleEndian.Uint16(b[i+1:])), int(binary.LittleEndian.Uint16(b[i+3:]))
			w, h := int(binary.LittleEndian.Uint16(b[i+5:])), int(binary.LittleEndian.Uint16(b[i+7:]))
			if w == 0 || h == 0 || x+w > info.width || y+h > info.height {
				return nil, info, invalid("a GIF frame of %d×%d at %d,%d does not lie within the %d×%d screen", w, h, x, y, info.width, info.height)
			}
			if info.frames++; info.frames > maxFrames {
				return nil, info, invalid("the GIF has more than %d frames; the host keeps at most that", maxFrames)
			}
			if pixels += int64(w) * int64(h); pixels > maxAnimationPixels {
				return nil, info, invalid("the GIF's frames hold more than %d pixels together; the host keeps at most that", int64(maxAnimationPixels))
			}
			flags := b[i+9]
			i += 10
			if flags&0x80 != 0 {
				i += 3 << (flags&7 + 1)
			}
			if i >= len(b) {
				return nil, info, invalid("the GIF is truncated in a frame")
			}
			if lzw := b[i]; lzw < 2 || lzw > 8 {
				return nil, info, invalid("a GIF frame has an LZW code size of %d; it must be 2 to 8", lzw)
			}
			end, ok := subBlocks(b, i+1)
			if !ok {
				return nil, info, invalid("the GIF is truncated in a frame")
			}
			i = end
			out = append(out, b[start:end]...)
		default:
			return nil, info, invalid("the GIF has block 0x%02X at byte %d, which the format does not define", b[i], i)
		}
	}
}

// subBlocks returns the index after the data sub-blocks starting at i
// (each a length byte and that many bytes, ended by a zero length).
func subBlocks(b []byte, i int) (int, bool) {
	for {
		if i >= len(b) {
			return 0, false
		}
		n := int(b[i])
		i++
		if n == 0 {
			return i, true
		}
		i += n
	}
}
