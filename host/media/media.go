// Package media is what the host does to media bytes before it keeps or
// shows them, with no storage of its own: Ingest names an item's type
// from its bytes (Sniff), checks its structure, refuses decompression
// bombs before anything is decoded, and strips an image's metadata;
// Thumbnail decodes an image under a host-wide memory bound (DecodeSlots)
// and makes a PNG of it.
//
// Everything here takes hostile bytes: a guest's media.put, a download of
// media.fetch from anywhere a grant allows. So it never trusts a claimed
// type, a header's dimensions before checking them against
// abi.MaxMediaPixels, or a length field before checking it against the
// bytes that are there; and its failures are *abi.Error values a guest
// can read (invalid_argument for bytes the host will not keep, too_large
// for sizes over a limit, resource_exhausted when a decode cannot get its
// memory), whose messages name the problem and never echo the bytes.
//
// # Why strip by walking the container
//
// Metadata is removed by copying the container's segments or chunks that
// rendering needs and dropping the rest (jpeg.go, png.go, gif.go,
// webp.go), never by decoding and re-encoding: the pixels a client gets
// are those that were stored, byte for byte, with no second lossy
// generation and no cost proportional to the pixels. The same walk is
// where truncation and structural bombs (frames outside the screen, too
// many frames) are caught.
package media

import (
	"bytes"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"golang.org/x/image/webp"
)

// Bounds on animations, which abi.MaxMediaPixels (one frame's) does not
// cover: a viewer decodes every frame.
const (
	maxFrames          = 4096
	maxAnimationPixels = 1 << 30
)

// Item is media the host may keep: its bytes (an image's without its
// metadata), its type (one of abi.MediaTypes) and, for an image, its
// width and height as stored (before any EXIF orientation).
type Item struct {
	Data          []byte
	Type          string
	Width, Height int
}

// Ingest checks data as an item to keep and returns what to store. The
// type is Sniff's; claimed, when not empty, must name the same type (a
// parameter such as "; charset=" is ignored). An image's header
// dimensions are checked against abi.MaxMediaPixels before the standard
// decoders read its header again, and nothing is decoded past headers.
func Ingest(data []byte, claimed string) (*Item, error) {
	if len(data) == 0 {
		return nil, invalid("the data is empty")
	}
	if len(data) > abi.MaxMediaBytes {
		return nil, abi.Errorf(abi.CodeTooLarge, "the data is %d bytes; an item is at most %d (abi.MaxMediaBytes)", len(data), abi.MaxMediaBytes)
	}
	typ := Sniff(data)
	if claimed != "" {
		want, err := CanonicalType(claimed)
		if err != nil {
			return nil, err
		}
		switch {
		case typ == "":
			return nil, invalid("the data was said to be %s but its bytes are of no type the host keeps; they look like %s", want, looksLike(data))
		case typ != want:
			return nil, invalid("the data was said to be %s but its bytes are %s; send the type the bytes are, or none", want, typ)
		}
	}
	if typ == "" {
		return nil, invalid("the bytes are not of a type the host keeps (%s); they look like %s",
			strings.Join(abi.MediaTypes, ", "), looksLike(data))
	}
	it := &Item{Type: typ, Data: data}
	var err error
	switch typ {
	case "image/jpeg":
		var in jpegInfo
		if it.Data, in, err = stripJPEG(data); err == nil {
			it.Width, it.Height = in.width, in.height
		}
	case "image/png":
		var in pngInfo
		if it.Data, in, err = stripPNG(data); err == nil {
			it.Width, it.Height = in.width, in.height
		}
	case "image/gif":
		var in gifInfo
		if it.Data, in, err = stripGIF(data); err == nil {
			it.Width, it.Height = in.width, in.height
		}
	case "image/webp":
		var in webpInfo
		if it.Data, in, err = stripWebP(data); err == nil {
			it.Width, it.Height = in.width, in.height
		}
	}
	if err != nil {
		return nil, err
	}
	if IsImage(typ) {
		if err := checkPixels(it.Width, it.Height); err != nil {
			return nil, err
		}
		// The decoders' own reading of the header must agree with the
		// walk's: a thumbnail is made by them, and a client's decoder
		// reads what they read.
		w, h, err := decodeConfig(it.Data, typ)
		if err != nil {
			return nil, err
		}
		if w != it.Width || h != it.Height {
			return nil, invalid("the image's header says %d×%d in one place and %d×%d in another", it.Width, it.Height, w, h)
		}
	}
	return it, nil
}

// CanonicalType returns the media type t names, lower-cased and without
// parameters, if it is one of abi.MediaTypes; otherwise an
// invalid_argument error listing them.
func CanonicalType(t string) (string, error) {
	mt, _, err := mime.ParseMediaType(t)
	if err != nil || !slices.Contains(abi.MediaTypes, mt) {
		return "", invalid("type %q is not one the host keeps; use one of %s", truncate(t, 64), strings.Join(abi.MediaTypes, ", "))
	}
	return mt, nil
}

// IsImage reports whether typ is an image type the host decodes.
func IsImage(typ string) bool {
	switch typ {
	case "image/jpeg", "image/png", "image/gif", "image/webp":
		return true
	}
	return false
}

// checkPixels refuses an image whose header announces more than
// abi.MaxMediaPixels.
func checkPixels(w, h int) error {
	if w <= 0 || h <= 0 {
		return invalid("the image is %d×%d; an image needs a width and a height", w, h)
	}
	if int64(w)*int64(h) > abi.MaxMediaPixels {
		return abi.Errorf(abi.CodeTooLarge, "the image is %d×%d, %d pixels; the host decodes at most %d (abi.MaxMediaPixels)",
			w, h, int64(w)*int64(h), int64(abi.MaxMediaPixels))
	}
	return nil
}

// decodeConfig reads an image's dimensions with the decoder of its type
// (never image.DecodeConfig, which would try every registered format).
func decodeConfig(data []byte, typ string) (w, h int, err error) {
	var cfg image.Config
	r := bytes.NewReader(data)
	switch typ {
	case "image/jpeg":
		cfg, err = jpeg.DecodeConfig(r)
	case "image/png":
		cfg, err = png.DecodeConfig(r)
	case "image/gif":
		cfg, err = gif.DecodeConfig(r)
	case "image/webp":
		cfg, err = webp.DecodeConfig(r)
	default:
		return 0, 0, invalid("%s is not an image type", typ)
	}
	if err != nil {
		return 0, 0, invalid("the image's header does not decode: %v", err)
	}
	return cfg.Width, cfg.Height, nil
}

// looksLike names what data seems to be, for a refusal's message.
func looksLike(data []byte) string {
	t := http.DetectContentType(data)
	if t == "application/octet-stream" {
		return "no type the host knows"
	}
	return t
}

func invalid(format string, args ...any) *abi.Error {
	return abi.Errorf(abi.CodeInvalidArgument, format, args...)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
