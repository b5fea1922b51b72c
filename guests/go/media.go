package moat

import "github.com/moat-sandbox/moat/abi"

// MediaStore is the organization's media: images, audio, video and PDF
// documents that the host fetches, checks and keeps, and that clients
// receive only from moat (GET /v1/media/{id} or a signed URL), never from
// where they came from. Use the package variable [Media]; the module
// needs the media capability (capabilities: {media: true}), and Fetch an
// http grant covering the URL as well.
//
// The host decides what an item is from its bytes, never from a claim:
// bytes of no allowed type (abi.MediaTypes), or of another type than the
// one given, are refused with abi.CodeInvalidArgument. JPEG and PNG
// images are kept without their metadata (EXIF, GPS), so an item's id,
// the hex SHA-256 of the bytes kept, may differ from the hash of the
// bytes given. Sizes and the decompression-bomb bound are in abi/media.go.
type MediaStore struct{}

// Media is the organization's media.
var Media MediaStore

// Fetch has the host download url, under the http family's rules (the
// module's http grants, redirects re-checked, addresses checked at
// dial), and keep it. The plugin never sees the bytes; use Get for them.
func (MediaStore) Fetch(url string) (abi.MediaInfo, error) {
	var info abi.MediaInfo
	err := Call(abi.OpMediaFetch, abi.MediaFetchRequest{URL: url}, &info)
	return info, err
}

// Put keeps data, at most abi.MaxMediaInlineBytes. typ, when not "",
// must be what the bytes are (e.g. "image/png"); the host sniffs the type
// either way.
func (MediaStore) Put(data []byte, typ string) (abi.MediaInfo, error) {
	if data == nil {
		data = []byte{}
	}
	var info abi.MediaInfo
	err := Call(abi.OpMediaPut, abi.MediaPutRequest{Data: data, Type: typ}, &info)
	return info, err
}

// Get returns an item of the caller's organization and its bytes. An
// item over abi.MaxMediaInlineBytes fails with abi.CodeTooLarge (clients
// read those from /v1/media/{id}); an id of no item of the organization
// with abi.CodeNotFound.
func (MediaStore) Get(id string) (info abi.MediaInfo, data []byte, err error) {
	var resp abi.MediaGetResponse
	if err := callBytes(abi.OpMediaGet, abi.MediaGetRequest{ID: id}, &resp, "data", func(b []byte) { resp.Data = b }); err != nil {
		return abi.MediaInfo{}, nil, err
	}
	if resp.Data == nil {
		resp.Data = []byte{}
	}
	return resp.MediaInfo, resp.Data, nil
}

// Info describes an item of the caller's organization.
func (MediaStore) Info(id string) (abi.MediaInfo, error) {
	var info abi.MediaInfo
	err := Call(abi.OpMediaInfo, abi.MediaInfoRequest{ID: id}, &info)
	return info, err
}

// Thumbnail makes (and keeps) a thumbnail of the image item id, at most
// width × height (each 1..abi.MaxThumbnailSide), fitted by fit
// (abi.FitContain, FitCover or FitFill; "" is FitContain), and describes
// it. An item that is not an image fails with abi.CodeInvalidArgument.
func (MediaStore) Thumbnail(id string, width, height int, fit string) (abi.MediaInfo, error) {
	var info abi.MediaInfo
	err := Call(abi.OpMediaThumbnail, abi.MediaThumbnailRequest{ID: id, Width: width, Height: height, Fit: fit}, &info)
	return info, err
}
