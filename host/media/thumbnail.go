package media

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"
	"runtime"

	"github.com/moat-sandbox/moat/abi"
	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/webp"
	"golang.org/x/sync/semaphore"
)

// DefaultDecodeBytes is the memory DecodeSlots lets image decodes hold at
// once when none is configured: room for the largest image the host
// decodes (abi.MaxMediaPixels of 16-bit PNG, 400 MB) and then some.
const DefaultDecodeBytes = 1 << 30

// DecodeSlots bounds the memory that image decodes (thumbnails) and
// downloads (media.fetch, Hold) hold at once, across every invocation of
// every host that shares it. Each decode
// estimates what it will allocate from the image's header (pixels, bit
// depth, progressive JPEG's coefficients, the resampling buffers) and
// takes that much before it decodes, waiting within its invocation's
// deadline while others hold the rest. A decode that alone needs more
// than the whole bound is refused at once (resource_exhausted).
//
// The pixel cap (abi.MaxMediaPixels) keeps any one decode finite; this
// keeps many of them from adding up to more memory than the machine has.
type DecodeSlots struct {
	sem   *semaphore.Weighted
	bytes int64
}

// NewDecodeSlots returns slots for bytes of decoding at once
// (DefaultDecodeBytes when bytes <= 0).
func NewDecodeSlots(bytes int64) *DecodeSlots {
	if bytes <= 0 {
		bytes = DefaultDecodeBytes
	}
	return &DecodeSlots{sem: semaphore.NewWeighted(bytes), bytes: bytes}
}

// Bytes is the bound.
func (s *DecodeSlots) Bytes() int64 { return s.bytes }

// collectAfterBytes is the size of a decode after which its memory is
// collected before its share of the bound goes to the next (see
// releaseCollected).
const collectAfterBytes = 32 << 20

// acquire takes n bytes, waiting within ctx. Its release collects first
// when n is collectAfterBytes or more (releaseCollected); it must be
// called after the memory the decode allocated is unreachable.
func (s *DecodeSlots) acquire(ctx context.Context, n int64) (release func(), err error) {
	if n > s.bytes {
		return nil, abi.Errorf(abi.CodeResourceExhausted,
			"decoding this image needs about %d bytes of memory; the host decodes at most %d bytes at once (media.decode_bytes)", n, s.bytes)
	}
	if err := s.sem.Acquire(ctx, n); err != nil {
		return nil, ctxError(ctx, "waiting for memory to decode the image (other decodes held it)")
	}
	return func() { s.releaseCollected(n) }, nil
}

// releaseCollected gives n bytes back to the bound after a collection,
// when n is large. The bound counts what decodes hold, but the memory of
// a decode that ended is only garbage until the collector runs, and Go
// paces it to let the heap grow to twice what is live first: the next
// decode would allocate beside the last one's pixels rather than in
// them, and six thumbnails of one 381 KB PNG of 50 Mpx grew the server
// by 1.8 GiB under a 1 GiB bound. Collecting before the bytes are given
// back makes the next decode reuse that memory, so the heap holds the
// bound and what the rest of the process holds, not twice it. A
// collection costs a few milliseconds of marking (pixels hold no
// pointers); a decode this large takes far longer.
func (s *DecodeSlots) releaseCollected(n int64) {
	if n >= collectAfterBytes {
		runtime.GC()
	}
	s.sem.Release(n)
}

// FetchHoldBytes is what a download holds of DecodeSlots while it runs:
// the body (at most abi.MaxMediaBytes) and the copy Ingest keeps of it.
const FetchHoldBytes = 2 * abi.MaxMediaBytes

// Hold takes n bytes of the bound for media work other than a decode (a
// download and its ingest: FetchHoldBytes), waiting within ctx; what
// names the work in a refusal. Downloads share the bound with decodes so
// that many concurrent media.fetch calls of 32 MiB bodies cannot add up
// to more memory than the bound either.
func (s *DecodeSlots) Hold(ctx context.Context, n int64, what string) (release func(), err error) {
	if n > s.bytes {
		return nil, abi.Errorf(abi.CodeResourceExhausted,
			"%s needs about %d bytes of memory; the host holds at most %d bytes of media work at once (media.decode_bytes)", what, n, s.bytes)
	}
	if err := s.sem.Acquire(ctx, n); err != nil {
		return nil, ctxError(ctx, "waiting for memory for "+what+" (other media work held it)")
	}
	return func() { s.releaseCollected(n) }, nil
}

// ctxError is the refusal of work that ctx ended.
func ctxError(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return abi.Errorf(abi.CodeTimeout, "the invocation's deadline passed %s", what)
	}
	return abi.Errorf(abi.CodeCanceled, "the invocation was canceled %s", what)
}

// Thumbnail sizes, as the resampling chooses them.
const (
	// kernelTmpBytes bounds the temporary buffer x/image/draw's
	// Catmull-Rom scaler allocates (32 bytes per pixel of destination
	// width × source height); past it the scaler is ApproxBiLinear, which
	// needs none, after the box reduction has brought the source within
	// twice the thumbnail.
	kernelTmpBytes = 32 << 20
	// bandPixels is how many source pixels the box reduction converts
	// to RGBA at a time.
	bandPixels = 1 << 16
)

// Thumbnail decodes the image data (of type typ, as Ingest stored it)
// and returns a PNG of it at most width × height, fitted by fit
// (abi.FitContain when empty; abi.FitCover crops the centre; abi.FitFill
// stretches), turned upright by the orientation a JPEG kept. contain and
// cover never enlarge; fill makes exactly width × height.
//
// The decode takes its estimated memory from slots first, and the work
// after it checks ctx between bands of rows. Large reductions first
// average blocks of pixels (a box filter: every source pixel counts once,
// so nothing aliases, and the memory is the thumbnail's, not the
// source's), then resample the rest with Catmull-Rom.
func Thumbnail(ctx context.Context, slots *DecodeSlots, data []byte, typ string, width, height int, fit string) (*Item, error) {
	if width < 1 || height < 1 || width > abi.MaxThumbnailSide || height > abi.MaxThumbnailSide {
		return nil, invalid("a thumbnail is 1 to %d pixels wide and high, not %d×%d", abi.MaxThumbnailSide, width, height)
	}
	switch fit {
	case "":
		fit = abi.FitContain
	case abi.FitContain, abi.FitCover, abi.FitFill:
	default:
		return nil, invalid("fit must be %s, %s or %s (or empty, for %s)", abi.FitContain, abi.FitCover, abi.FitFill, abi.FitContain)
	}
	if !IsImage(typ) {
		return nil, invalid("the item is %s, not an image; only images have thumbnails", typ)
	}
	rw, rh, err := decodeConfig(data, typ)
	if err != nil {
		return nil, err
	}
	if err := checkPixels(rw, rh); err != nil {
		return nil, err
	}
	orientation := 1
	if typ == "image/jpeg" {
		orientation = jpegMeta(data).orientation
	}
	transposed := orientation >= 5
	dw, dh := rw, rh // as displayed
	if transposed {
		dw, dh = rh, rw
	}
	crop, ow, oh := fitBox(dw, dh, width, height, fit)
	src := displayedToRaw(crop, orientation, rw, rh)
	tw, th := ow, oh // the thumbnail before it is turned upright
	if transposed {
		tw, th = oh, ow
	}
	fx, fy := max(1, src.Dx()/tw), max(1, src.Dy()/th)
	iw, ih := max(1, src.Dx()/fx), max(1, src.Dy()/fy)
	scaleH := src.Dy()
	if fx > 1 || fy > 1 {
		scaleH = ih
	}
	catmull := int64(tw)*int64(scaleH)*32 <= kernelTmpBytes
	cost := decodeBytes(data, typ, rw, rh) + 2<<20 + int64(src.Dx())*4 + int64(iw)*(int64(ih)*4+32) + 3*int64(ow)*int64(oh)*4
	if catmull {
		cost += int64(tw) * int64(scaleH) * 32
	}
	release, err := slots.acquire(ctx, cost)
	if err != nil {
		return nil, err
	}
	// The work is a function of its own so that nothing it allocated is
	// reachable from this frame when release collects.
	item, err := thumbnail(ctx, data, typ, rw, rh, src, orientation, fx, fy, tw, th, catmull)
	release()
	return item, err
}

// thumbnail decodes the image and makes its thumbnail (see Thumbnail,
// which has checked the request and holds the memory it takes).
func thumbnail(ctx context.Context, data []byte, typ string, rw, rh int, src image.Rectangle, orientation, fx, fy, tw, th int, catmull bool) (*Item, error) {
	img, err := decode(data, typ, rw, rh)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx, "while the image was decoded")
	}
	var from image.Image = img
	fromRect := src.Add(img.Bounds().Min)
	if fx > 1 || fy > 1 {
		reduced, err := boxReduce(ctx, img, fromRect, fx, fy)
		if err != nil {
			return nil, err
		}
		from, fromRect = reduced, reduced.Bounds()
	}
	thumb := image.NewRGBA(image.Rect(0, 0, tw, th))
	switch {
	case fromRect.Dx() == tw && fromRect.Dy() == th:
		draw.Draw(thumb, thumb.Bounds(), from, fromRect.Min, draw.Src)
	case catmull:
		xdraw.CatmullRom.Scale(thumb, thumb.Bounds(), from, fromRect, xdraw.Src, nil)
	default:
		xdraw.ApproxBiLinear.Scale(thumb, thumb.Bounds(), from, fromRect, xdraw.Src, nil)
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx, "while the thumbnail was made")
	}
	upright := orient(thumb, orientation)
	var buf bytes.Buffer
	if err := png.Encode(&buf, upright); err != nil {
		return nil, abi.Errorf(abi.CodeInternal, "encoding the thumbnail: %v", err)
	}
	return Ingest(buf.Bytes(), "image/png")
}

// fitBox places a thumbnail of at most w × h on an image of sw × sh (as
// displayed): the part of the image it shows, and its size.
func fitBox(sw, sh, w, h int, fit string) (crop image.Rectangle, ow, oh int) {
	full := image.Rect(0, 0, sw, sh)
	fw, fh := float64(w)/float64(sw), float64(h)/float64(sh)
	switch fit {
	case abi.FitFill:
		return full, w, h
	case abi.FitCover:
		s := math.Max(fw, fh)
		if s >= 1 { // never enlarge: the centre at its own size
			ow, oh = min(w, sw), min(h, sh)
			x, y := (sw-ow)/2, (sh-oh)/2
			return image.Rect(x, y, x+ow, y+oh), ow, oh
		}
		cw := min(sw, max(1, int(math.Round(float64(w)/s))))
		ch := min(sh, max(1, int(math.Round(float64(h)/s))))
		x, y := (sw-cw)/2, (sh-ch)/2
		return image.Rect(x, y, x+cw, y+ch), w, h
	default: // contain
		s := math.Min(1, math.Min(fw, fh))
		ow = min(w, max(1, int(math.Round(float64(sw)*s))))
		oh = min(h, max(1, int(math.Round(float64(sh)*s))))
		return full, ow, oh
	}
}

// displayedToRaw maps a rectangle of the image as displayed to the
// rectangle of the stored pixels (rw × rh) it shows, under EXIF
// orientation o.
func displayedToRaw(r image.Rectangle, o, rw, rh int) image.Rectangle {
	f := func(x, y int) image.Point {
		switch o {
		case 2:
			return image.Pt(rw-x, y)
		case 3:
			return image.Pt(rw-x, rh-y)
		case 4:
			return image.Pt(x, rh-y)
		case 5:
			return image.Pt(y, x)
		case 6:
			return image.Pt(y, rh-x)
		case 7:
			return image.Pt(rw-y, rh-x)
		case 8:
			return image.Pt(rw-y, x)
		}
		return image.Pt(x, y)
	}
	a, b := f(r.Min.X, r.Min.Y), f(r.Max.X, r.Max.Y)
	return image.Rect(a.X, a.Y, b.X, b.Y) // Rect puts min before max
}

// orient turns m (stored pixels) upright under EXIF orientation o.
func orient(m *image.RGBA, o int) *image.RGBA {
	if o <= 1 || o > 8 {
		return m
	}
	rw, rh := m.Rect.Dx(), m.Rect.Dy()
	dw, dh := rw, rh
	if o >= 5 {
		dw, dh = rh, rw
	}
	out := image.NewRGBA(image.Rect(0, 0, dw, dh))
	for y := 0; y < dh; y++ {
		for x := 0; x < dw; x++ {
			var sx, sy int
			switch o {
			case 2:
				sx, sy = rw-1-x, y
			case 3:
				sx, sy = rw-1-x, rh-1-y
			case 4:
				sx, sy = x, rh-1-y
			case 5:
				sx, sy = y, x
			case 6:
				sx, sy = y, rh-1-x
			case 7:
				sx, sy = rw-1-y, rh-1-x
			case 8:
				sx, sy = rw-1-y, x
			}
			copy(out.Pix[y*out.Stride+4*x:y*out.Stride+4*x+4], m.Pix[sy*m.Stride+4*sx:])
		}
	}
	return out
}

// boxReduce averages blocks of src's rectangle r into the pixels of an
// RGBA image of r.Dx()/fx × r.Dy()/fy (at least 1 × 1): block boundaries
// fall at whole pixels, so blocks differ by at most one row or column,
// and every source pixel counts once, with the weight of its block's
// share. Source rows are converted a band at a time, so it holds the
// result and one band, never a copy of the source.
func boxReduce(ctx context.Context, src image.Image, r image.Rectangle, fx, fy int) (*image.RGBA, error) {
	sw, sh := r.Dx(), r.Dy()
	iw, ih := max(1, sw/fx), max(1, sh/fy)
	xs := make([]int, iw+1) // block ox covers columns xs[ox] to xs[ox+1]
	for ox := range xs {
		xs[ox] = ox * sw / iw
	}
	dst := image.NewRGBA(image.Rect(0, 0, iw, ih))
	rows := min(sh, max(1, bandPixels/sw))
	band := image.NewRGBA(image.Rect(0, 0, sw, rows))
	acc := make([]uint64, 4*iw)
	oy := 0
	for y0 := 0; y0 < sh; y0 += rows {
		if ctx.Err() != nil {
			return nil, ctxError(ctx, "while the thumbnail was made")
		}
		n := min(rows, sh-y0)
		convertRows(band, src, image.Pt(r.Min.X, r.Min.Y+y0), sw, n)
		for k := 0; k < n; k++ {
			row := band.Pix[k*band.Stride : k*band.Stride+4*sw]
			for ox := 0; ox < iw; ox++ {
				a := acc[4*ox : 4*ox+4 : 4*ox+4]
				p := row[4*xs[ox] : 4*xs[ox+1]]
				for j := 0; j+4 <= len(p); j += 4 {
					a[0] += uint64(p[j])
					a[1] += uint64(p[j+1])
					a[2] += uint64(p[j+2])
					a[3] += uint64(p[j+3])
				}
			}
			y := y0 + k
			if y+1 != (oy+1)*sh/ih { // the block of rows goes on
				continue
			}
			blockRows := uint64((oy+1)*sh/ih - oy*sh/ih)
			out := dst.Pix[oy*dst.Stride:]
			for ox := 0; ox < iw; ox++ {
				cnt := uint64(xs[ox+1]-xs[ox]) * blockRows
				for c := 0; c < 4; c++ {
					out[4*ox+c] = uint8((acc[4*ox+c] + cnt/2) / cnt)
					acc[4*ox+c] = 0
				}
			}
			oy++
		}
	}
	return dst, nil
}

// convertRows writes n rows of src, w pixels from sp, into the top of
// band as premultiplied RGBA. A paletted image (GIF, palette PNG) is
// converted through its palette here; the standard library's draw
// would read it a pixel at a time through color.Color.
func convertRows(band *image.RGBA, src image.Image, sp image.Point, w, n int) {
	if p, ok := src.(*image.Paletted); ok {
		var pal [256][4]uint8
		for i, c := range p.Palette {
			r, g, b, a := c.RGBA()
			pal[i] = [4]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
		}
		for k := 0; k < n; k++ {
			in := p.Pix[p.PixOffset(sp.X, sp.Y+k):][:w]
			out := band.Pix[k*band.Stride:]
			for x, ix := range in {
				copy(out[4*x:4*x+4], pal[ix][:])
			}
		}
		return
	}
	draw.Draw(band, image.Rect(0, 0, w, n), src, sp, draw.Src)
}

// decode decodes an image with its type's decoder. A GIF's first frame is
// drawn onto its screen (w × h) when it covers less of it.
func decode(data []byte, typ string, w, h int) (image.Image, error) {
	var (
		img image.Image
		err error
	)
	r := bytes.NewReader(data)
	switch typ {
	case "image/jpeg":
		img, err = jpeg.Decode(r)
	case "image/png":
		img, err = png.Decode(r)
	case "image/gif":
		img, err = gif.Decode(r)
	case "image/webp":
		if webpAnimated(data) {
			return nil, invalid("the image is an animated WebP, which the host does not decode; thumbnail a still image")
		}
		img, err = webp.Decode(r)
	}
	if err != nil {
		return nil, invalid("the image does not decode: %v", err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		if typ != "image/gif" || !b.In(image.Rect(0, 0, w, h)) {
			return nil, invalid("the image decodes to %d×%d, not the %d×%d its header says", b.Dx(), b.Dy(), w, h)
		}
		screen := image.NewRGBA(image.Rect(0, 0, w, h))
		draw.Draw(screen, b, img, b.Min, draw.Src)
		img = screen
	}
	return img, nil
}

// decodeBytes estimates what decoding data allocates: the decoded pixels
// in the decoder's own layout, and what the decoder keeps besides.
func decodeBytes(data []byte, typ string, w, h int) int64 {
	px := (int64(w) + 16) * (int64(h) + 16) // JPEG rounds up to whole blocks
	switch typ {
	case "image/jpeg":
		m := jpegMeta(data)
		per := int64(3)
		switch m.components {
		case 1:
			per = 1
		case 4: // CMYK and YCCK: the planes, black, then the CMYK image
			per = 8
		}
		if m.progressive { // every coefficient kept, 4 bytes each
			per += 4 * int64(max(m.components, 1))
		}
		return px * per
	case "image/png":
		per := int64(4)
		if len(data) > 28 && data[24] == 16 {
			per = 8
		}
		if len(data) > 28 && data[28] == 1 { // Adam7: each pass, then the image
			per *= 2
		}
		return px * per
	case "image/gif":
		return px * 5 // the frame, and the screen it may be drawn onto
	default: // WebP: lossless decodes to ARGB words and then NRGBA
		return px * 8
	}
}

// jpegMeta reads what a stored JPEG's segments before its first scan say:
// the orientation the host kept, the components, and whether it is
// progressive.
func jpegMeta(b []byte) jpegInfo {
	info := jpegInfo{orientation: 1}
	for i := 2; i+4 <= len(b) && b[i] == 0xFF; {
		m := b[i+1]
		n := int(binary.BigEndian.Uint16(b[i+2:]))
		if m == 0xDA || n < 2 || i+2+n > len(b) {
			break
		}
		seg := b[i+4 : i+2+n]
		switch {
		case m == 0xE1 && bytes.HasPrefix(seg, []byte("Exif\x00\x00")):
			if o := readOrientation(seg[6:]); o != 0 {
				info.orientation = o
			}
		case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC && len(seg) >= 6:
			info.components = int(seg[5])
			info.progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE
		}
		i += 2 + n
	}
	return info
}

// webpAnimated reports whether a WebP's VP8X header says it animates.
func webpAnimated(b []byte) bool {
	return len(b) >= 21 && string(b[12:16]) == "VP8X" && b[20]&0x02 != 0
}
