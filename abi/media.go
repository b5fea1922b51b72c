package abi

// The media family: images, audio, video and PDF documents that the host
// fetches, checks and keeps, and that clients receive only from moat
// (GET /v1/media/{id}, or a short-lived signed URL), never from where
// they came from. A media item belongs to the caller's organization; its
// id is the hex SHA-256 of its stored bytes (after the host stripped an
// image's metadata), so storing the same bytes twice is one item.
//
// The host sniffs the type from the bytes, never from a header or a
// claim: data whose bytes are not of an allowed type (MediaTypes) is
// refused with CodeInvalidArgument, and so is data claiming one type
// while being another. Images are decoded only after their header's
// width × height is checked against MaxMediaPixels, so a small file
// announcing a huge image (a decompression bomb) costs nothing. JPEG,
// PNG, GIF and WebP images are stored without their metadata (EXIF with
// its GPS position, XMP, IPTC, comments, text chunks, embedded
// thumbnails), their pixels untouched; a JPEG's EXIF orientation is kept,
// alone. Audio, video and PDF are kept as they are. media.fetch follows
// the http family's rules for its URL: the module's http grants,
// redirects re-checked, addresses checked at dial.
const (
	OpMediaFetch     = "media.fetch"
	OpMediaPut       = "media.put"
	OpMediaGet       = "media.get"
	OpMediaInfo      = "media.info"
	OpMediaThumbnail = "media.thumbnail"
)

// MediaTypes are the types the host keeps, as it names them.
var MediaTypes = []string{
	"image/jpeg", "image/png", "image/gif", "image/webp",
	"audio/mpeg", "audio/ogg", "audio/wav", "audio/flac",
	"video/mp4", "video/webm",
	"application/pdf",
}

// Media limits, enforced by the host.
const (
	// MaxMediaBytes bounds an item the host fetches or stores.
	MaxMediaBytes = 32 << 20
	// MaxMediaInlineBytes bounds the data of a media.put request and of a
	// media.get reply: they travel inside one op message, base64 in JSON.
	MaxMediaInlineBytes = 2 << 20
	// MaxMediaPixels bounds width × height of an image the host decodes.
	MaxMediaPixels = 50_000_000
	// MaxThumbnailSide bounds a thumbnail's width and height.
	MaxThumbnailSide = 2048
)

// Thumbnail fits.
const (
	FitContain = "contain" // the whole image within width × height, aspect kept (default)
	FitCover   = "cover"   // width × height filled, aspect kept, the overflow cut from the centre
	FitFill    = "fill"    // exactly width × height, stretched
)

// MediaInfo describes a stored item. Width and Height are 0 for what is
// not an image.
type MediaInfo struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
}

// MediaFetchRequest has the host download URL and keep it.
type MediaFetchRequest struct {
	URL string `json:"url"`
}

// MediaPutRequest keeps Data (base64 in JSON). Type, when set, must be
// what the bytes are; the host sniffs it either way.
type MediaPutRequest struct {
	Data []byte `json:"data"`
	Type string `json:"type,omitempty"`
}

// MediaGetRequest reads an item of the caller's organization; an item
// over MaxMediaInlineBytes is refused with CodeTooLarge (clients fetch
// those from /v1/media/{id}).
type MediaGetRequest struct {
	ID string `json:"id"`
}

// MediaGetResponse is an item's description and its bytes (base64 in
// JSON).
type MediaGetResponse struct {
	MediaInfo
	Data []byte `json:"data"`
}

// MediaInfoRequest describes an item of the caller's organization.
type MediaInfoRequest struct {
	ID string `json:"id"`
}

// MediaThumbnailRequest makes (and keeps) a thumbnail of an image item,
// at most Width × Height (each 1..MaxThumbnailSide), fitted by Fit
// (FitContain when empty), turned upright by a JPEG's EXIF orientation.
// FitContain and FitCover never enlarge; FitFill makes exactly Width ×
// Height. The thumbnail is a PNG, an item of its own (the same request
// twice is the same item), and the reply is its MediaInfo. An animated
// WebP has none.
type MediaThumbnailRequest struct {
	ID     string `json:"id"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Fit    string `json:"fit,omitempty"`
}
