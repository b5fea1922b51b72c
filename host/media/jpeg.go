package media

import (
	"bytes"
	"encoding/binary"
)

// jpegInfo is what stripJPEG learns of an image.
type jpegInfo struct {
	width, height int
	components    int
	progressive   bool
	orientation   int // EXIF orientation, 1..8 (1 when none)
}

// stripJPEG walks a JPEG's markers and returns its bytes without the
// segments that carry metadata rather than pixels: APP1 (EXIF, with its
// GPS directory, and XMP), APP13 (Photoshop and IPTC), COM, every other
// APPn but JFIF's APP0 (rewritten without its embedded thumbnail), ICC
// profiles in APP2 and Adobe's APP14 (which decoders need for colour),
// and whatever follows the end-of-image marker (where a polyglot keeps
// its second file). The frame, tables and scans are copied byte for byte,
// so the pixels are exactly those of the original: the strip is lossless.
//
// The orientation an EXIF block held is kept, as a minimal EXIF block of
// that one tag: without it a photo taken with the phone turned would be
// shown on its side.
//
// A JPEG that ends before its end-of-image marker, has no frame or no
// scan, has a segment running past the end, or uses a marker outside
// baseline, extended and progressive JPEG is refused.
func stripJPEG(b []byte) ([]byte, jpegInfo, error) {
	info := jpegInfo{orientation: 1}
	if len(b) < 4 || b[0] != 0xFF || b[1] != 0xD8 {
		return nil, info, invalid("the JPEG has no start-of-image marker")
	}
	out := make([]byte, 0, len(b))
	out = append(out, 0xFF, 0xD8)
	exifAt := len(out) // where the minimal EXIF block goes: after SOI, or after JFIF's APP0
	sawFrame, sawScan := false, false
	i := 2
	for {
		if i >= len(b) {
			return nil, info, invalid("the JPEG is truncated: it ends before its end-of-image marker")
		}
		if b[i] != 0xFF {
			return nil, info, invalid("the JPEG has data where a marker should be, at byte %d", i)
		}
		for i < len(b) && b[i] == 0xFF { // fill bytes
			i++
		}
		if i >= len(b) {
			return nil, info, invalid("the JPEG is truncated: it ends before its end-of-image marker")
		}
		m := b[i]
		i++
		switch {
		case m == 0xD9: // EOI: anything after it is not the image's
			if !sawFrame || !sawScan {
				return nil, info, invalid("the JPEG has no frame or no scan before its end-of-image marker")
			}
			out = append(out, 0xFF, 0xD9)
			if info.orientation != 1 {
				out = insertAt(out, exifAt, exifOrientation(info.orientation))
			}
			return out, info, nil
		case m == 0x01: // TEM, no length
			out = append(out, 0xFF, m)
			continue
		case m == 0x00, m == 0xD8, m >= 0xD0 && m <= 0xD7:
			return nil, info, invalid("the JPEG has marker 0x%02X outside a scan, at byte %d", m, i-1)
		}
		if i+2 > len(b) {
			return nil, info, invalid("the JPEG is truncated in the length of marker 0x%02X", m)
		}
		n := int(binary.BigEndian.Uint16(b[i:]))
		if n < 2 || i+n > len(b) {
			return nil, info, invalid("the JPEG's segment 0x%02X at byte %d runs past the end of the file", m, i-2)
		}
		seg := b[i+2 : i+n] // the payload, after the length
		whole := b[i-2 : i+n]
		i += n
		switch {
		case m == 0xE0: // APP0: JFIF, kept without its thumbnail; JFXX (thumbnails) dropped
			if len(seg) >= 14 && bytes.HasPrefix(seg, []byte("JFIF\x00")) && len(out) == 2 {
				out = append(out, 0xFF, 0xE0, 0, 16)
				out = append(out, seg[:12]...)
				out = append(out, 0, 0) // no thumbnail
				exifAt = len(out)
			}
		case m == 0xE1: // APP1: EXIF or XMP; only the orientation survives
			if bytes.HasPrefix(seg, []byte("Exif\x00\x00")) {
				if o := readOrientation(seg[6:]); o != 0 {
					info.orientation = o
				}
			}
		case m == 0xE2: // APP2: ICC profiles kept; FlashPix and MPF (more images) dropped
			if bytes.HasPrefix(seg, []byte("ICC_PROFILE\x00")) {
				out = append(out, whole...)
			}
		case m == 0xEE: // APP14: Adobe's colour transform, which decoding needs
			if bytes.HasPrefix(seg, []byte("Adobe")) {
				out = append(out, whole...)
			}
		case m >= 0xE0 && m <= 0xEF, m == 0xFE: // other APPn, COM
		case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC: // SOFn
			if sawFrame {
				return nil, info, invalid("the JPEG has more than one frame (hierarchical JPEG is not kept)")
			}
			if len(seg) < 6 {
				return nil, info, invalid("the JPEG's frame header is too short")
			}
			sawFrame = true
			info.height = int(binary.BigEndian.Uint16(seg[1:]))
			info.width = int(binary.BigEndian.Uint16(seg[3:]))
			info.components = int(seg[5])
			info.progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE
			if err := checkPixels(info.width, info.height); err != nil {
				return nil, info, err
			}
			out = append(out, whole...)
		case m == 0xC4, m == 0xDB, m == 0xDD, m == 0xCC: // DHT, DQT, DRI, DAC
			out = append(out, whole...)
		case m == 0xDA: // SOS, then entropy-coded data up to the next marker
			if !sawFrame {
				return nil, info, invalid("the JPEG has a scan before its frame header")
			}
			sawScan = true
			out = append(out, whole...)
			end, ok := scanEnd(b, i)
			if !ok {
				return nil, info, invalid("the JPEG is truncated inside a scan")
			}
			out = append(out, b[i:end]...)
			i = end
		default:
			return nil, info, invalid("the JPEG has marker 0x%02X, which the host does not keep", m)
		}
	}
}

// scanEnd returns the index of the marker that ends the entropy-coded
// data starting at i: the first 0xFF followed by neither a stuffed 0x00,
// a restart marker nor a fill byte.
func scanEnd(b []byte, i int) (int, bool) {
	for {
		j := bytes.IndexByte(b[i:], 0xFF)
		if j < 0 {
			return 0, false
		}
		i += j
		if i+1 >= len(b) {
			return 0, false
		}
		switch n := b[i+1]; {
		case n == 0x00, n >= 0xD0 && n <= 0xD7:
			i += 2
		case n == 0xFF:
			// Fill before a marker: the marker loop skips it.
			return i, true
		default:
			return i, true
		}
	}
}

// readOrientation reads the Orientation tag (0x0112) of the first IFD of
// a TIFF structure (an EXIF block after "Exif\0\0"): 1..8, or 0 when there
// is none or the block is malformed.
func readOrientation(t []byte) int {
	if len(t) < 8 {
		return 0
	}
	var bo binary.ByteOrder
	switch string(t[:4]) {
	case "II*\x00":
		bo = binary.LittleEndian
	case "MM\x00*":
		bo = binary.BigEndian
	default:
		return 0
	}
	off := bo.Uint32(t[4:])
	if off < 8 || uint64(off)+2 > uint64(len(t)) {
		return 0
	}
	n := int(bo.Uint16(t[off:]))
	p := int(off) + 2
	for k := 0; k < n && p+12 <= len(t); k, p = k+1, p+12 {
		if bo.Uint16(t[p:]) != 0x0112 {
			continue
		}
		if bo.Uint16(t[p+2:]) != 3 || bo.Uint32(t[p+4:]) != 1 { // SHORT, count 1
			return 0
		}
		if o := int(bo.Uint16(t[p+8:])); o >= 1 && o <= 8 {
			return o
		}
		return 0
	}
	return 0
}

// exifOrientation is an APP1 segment holding an EXIF block of one tag,
// Orientation = o, and nothing else.
func exifOrientation(o int) []byte {
	seg := []byte{
		0xFF, 0xE1, 0, 34,
		'E', 'x', 'i', 'f', 0, 0,
		'M', 'M', 0, '*', 0, 0, 0, 8, // TIFF header: big-endian, IFD0 at 8
		0, 1, // one entry
		0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, byte(o), 0, 0, // Orientation, SHORT, 1, o
		0, 0, 0, 0, // no next IFD
	}
	return seg
}

// insertAt returns b with ins inserted at index at.
func insertAt(b []byte, at int, ins []byte) []byte {
	b = append(b, ins...)
	copy(b[at+len(ins):], b[at:len(b)-len(ins)])
	copy(b[at:], ins)
	return b
}
