package media

import (
	"bytes"
	"encoding/binary"
)

// Sniff names the type of data among abi.MediaTypes from its bytes alone,
// or returns "" when the bytes are none of them. It reads signatures and,
// where a signature is shared (RIFF holds WebP and WAV, Ogg holds audio
// and video, ISO BMFF holds MP4 and HEIC, EBML holds WebM and Matroska),
// the field that tells them apart. It never decodes: Ingest checks the
// structure of what Sniff named.
//
// The standard library's http.DetectContentType is not used to decide:
// it names WebP, FLAC, most MP4 brands and Ogg's codecs not at all, and
// calls any RIFF file or any EBML file by one name.
func Sniff(data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte{0xFF, 0xD8, 0xFF}):
		return "image/jpeg"
	case bytes.HasPrefix(data, pngSignature):
		return "image/png"
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return "image/gif"
	case len(data) >= 12 && bytes.HasPrefix(data, []byte("RIFF")) && string(data[8:12]) == "WEBP":
		return "image/webp"
	case len(data) >= 12 && bytes.HasPrefix(data, []byte("RIFF")) && string(data[8:12]) == "WAVE":
		return "audio/wav"
	case bytes.HasPrefix(data, []byte("fLaC")):
		return "audio/flac"
	case bytes.HasPrefix(data, []byte("OggS")):
		if oggAudio(data) {
			return "audio/ogg"
		}
	case bytes.HasPrefix(data, []byte("%PDF-")):
		return "application/pdf"
	case bytes.HasPrefix(data, []byte{0x1A, 0x45, 0xDF, 0xA3}):
		if ebmlDocType(data) == "webm" {
			return "video/webm"
		}
	case len(data) >= 12 && string(data[4:8]) == "ftyp":
		if mp4Brand(data) {
			return "video/mp4"
		}
	case bytes.HasPrefix(data, []byte("ID3")):
		if len(data) >= 10 && data[3] < 0xFF && data[4] < 0xFF && syncsafe(data[6:10]) {
			return "audio/mpeg"
		}
	default:
		if mpegFrames(data) {
			return "audio/mpeg"
		}
	}
	return ""
}

// oggAudio reports whether the first page of an Ogg stream begins a
// Vorbis, Opus or FLAC stream: Ogg also carries video (Theora), which is
// not a type the host keeps.
func oggAudio(data []byte) bool {
	// The page header: "OggS", version, flags, granule (8), serial (4),
	// sequence (4), checksum (4), segments, then the segment table.
	if len(data) < 27 || data[4] != 0 {
		return false
	}
	body := 27 + int(data[26])
	if len(data) < body+8 {
		return false
	}
	p := data[body:]
	return bytes.HasPrefix(p, []byte("\x01vorbis")) || bytes.HasPrefix(p, []byte("OpusHead")) || bytes.HasPrefix(p, []byte("\x7fFLAC"))
}

// mp4Brands are the ISO BMFF brands of MP4 video (and MP4 audio, which a
// browser plays as video/mp4): HEIC, AVIF and QuickTime share the box
// structure and are not among the host's types.
var mp4Brands = map[string]bool{
	"isom": true, "iso2": true, "iso3": true, "iso4": true, "iso5": true, "iso6": true,
	"mp41": true, "mp42": true, "mp71": true, "avc1": true, "dash": true, "mmp4": true,
	"M4V ": true, "M4A ": true, "MSNV": true,
}

// mp4Brand reports whether the leading ftyp box is well formed and names
// an MP4 brand as its major brand.
func mp4Brand(data []byte) bool {
	size := binary.BigEndian.Uint32(data)
	if size < 16 || size%4 != 0 || uint64(size) > uint64(len(data)) {
		return false
	}
	return mp4Brands[string(data[8:12])]
}

// ebmlDocType reads the DocType of the EBML header at the start of data
// ("webm", "matroska"), or "" when the header is malformed.
func ebmlDocType(data []byte) string {
	id, n := ebmlVint(data, false)
	if n == 0 || id != 0x1A45DFA3 {
		return ""
	}
	size, m := ebmlVint(data[n:], true)
	if m == 0 || size > uint64(len(data)-n-m) || size > 4096 {
		return ""
	}
	hdr := data[n+m : n+m+int(size)]
	for len(hdr) > 0 {
		eid, a := ebmlVint(hdr, false)
		if a == 0 {
			return ""
		}
		esize, b := ebmlVint(hdr[a:], true)
		if b == 0 || esize > uint64(len(hdr)-a-b) {
			return ""
		}
		if eid == 0x4282 { // DocType
			return string(hdr[a+b : a+b+int(esize)])
		}
		hdr = hdr[a+b+int(esize):]
	}
	return ""
}

// ebmlVint reads an EBML variable-length integer: an element id (marker
// bits kept) or, when size, a size (marker bits dropped). n is 0 when
// data does not hold one.
func ebmlVint(data []byte, size bool) (v uint64, n int) {
	if len(data) == 0 || data[0] == 0 {
		return 0, 0
	}
	for n = 1; data[0]&(0x80>>(n-1)) == 0; n++ {
	}
	if n > 8 || len(data) < n {
		return 0, 0
	}
	v = uint64(data[0])
	if size {
		v &^= 0x80 >> (n - 1)
	}
	for _, b := range data[1:n] {
		v = v<<8 | uint64(b)
	}
	return v, n
}

// syncsafe reports whether b (an ID3v2 tag's size) has each byte's top
// bit clear, as the format requires.
func syncsafe(b []byte) bool {
	for _, c := range b {
		if c&0x80 != 0 {
			return false
		}
	}
	return true
}

// mpegFrames reports whether data starts with two consecutive MPEG audio
// frames (a file without an ID3 tag): one frame header alone is 11 set
// bits, which too many files hold by chance.
func mpegFrames(data []byte) bool {
	n := mpegFrameLen(data)
	return n > 0 && len(data) >= n+4 && mpegFrameLen(data[n:]) > 0
}

// mpegFrameLen is the length of the MPEG audio frame whose header starts
// data, or 0 when it is not one.
func mpegFrameLen(data []byte) int {
	if len(data) < 4 || data[0] != 0xFF || data[1]&0xE0 != 0xE0 {
		return 0
	}
	version := data[1] >> 3 & 3 // 0: MPEG 2.5, 1: reserved, 2: MPEG 2, 3: MPEG 1
	layer := data[1] >> 1 & 3   // 1: III, 2: II, 3: I, 0: reserved
	bitrate := int(data[2] >> 4)
	rate := int(data[2] >> 2 & 3)
	pad := int(data[2] >> 1 & 1)
	if version == 1 || layer == 0 || bitrate == 0 || bitrate == 15 || rate == 3 {
		return 0
	}
	var kbps = [2][3][15]int{
		{ // MPEG 1: layers I, II, III
			{0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448},
			{0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384},
			{0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320},
		},
		{ // MPEG 2 and 2.5
			{0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256},
			{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160},
			{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160},
		},
	}
	rates := [4][3]int{{11025, 12000, 8000}, {}, {22050, 24000, 16000}, {44100, 48000, 32000}}
	v := 1
	if version == 3 {
		v = 0
	}
	l := 3 - int(layer) // 0: I, 1: II, 2: III
	br := kbps[v][l][bitrate] * 1000
	sr := rates[version][rate]
	switch {
	case l == 0:
		return (12*br/sr + pad) * 4
	case l == 2 && v == 1:
		return 72*br/sr + pad
	default:
		return 144*br/sr + pad
	}
}
