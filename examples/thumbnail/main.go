// Command thumbnail is a plugin that has the host fetch an image, makes a
// thumbnail of it and answers the thumbnail's media id: the plugin never
// touches the network or the image's bytes itself, and clients receive the
// image only from moat (GET /v1/media/{id}, or a signed URL the console
// uses), never from the origin, whose URL a page would otherwise leak to
// its readers' browsers.
//
// Action make takes {"url", "width"?, "height"?, "fit"?} and answers
//
//	{"id":"…","original":{"id","type","size","width","height"},
//	 "thumbnail":{"id","type","size","width","height"}}
//
// where id is the thumbnail's. The URL must be covered by the module's
// http grant (moat.yaml asks for the origin; the operator's profile
// grants it), on every redirect too; the host checks the bytes are an
// image of an allowed type, refuses decompression bombs from the header
// and strips EXIF and GPS metadata before it keeps anything.
package main

import (
	"encoding/json"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

// makeRequest is the input of make.
type makeRequest struct {
	URL    string `json:"url"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Fit    string `json:"fit"`
}

type makeReply struct {
	ID        string        `json:"id"`
	Original  abi.MediaInfo `json:"original"`
	Thumbnail abi.MediaInfo `json:"thumbnail"`
}

func init() { moat.Action("make", makeThumbnail) }

func makeThumbnail(input []byte) ([]byte, error) {
	var req makeRequest
	dec := json.NewDecoder(strings.NewReader(string(input)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, `make: the input is not {"url", "width"?, "height"?, "fit"?}: %v`, err)
	}
	if req.URL == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, `make: "url" is empty; give the image's http or https URL`)
	}
	if req.Width == 0 {
		req.Width = 256
	}
	if req.Height == 0 {
		req.Height = req.Width
	}
	// The host downloads and keeps the original; a refusal (no grant, an
	// address the grant does not name, not an image, too large) comes
	// back with its code and is passed on as it is.
	orig, err := moat.Media.Fetch(req.URL)
	if err != nil {
		return nil, err
	}
	if orig.Width == 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "make: %s is %s, not an image", req.URL, orig.Type)
	}
	thumb, err := moat.Media.Thumbnail(orig.ID, req.Width, req.Height, req.Fit)
	if err != nil {
		return nil, err
	}
	moat.Log.Info("thumbnail made", "original", orig.ID, "thumbnail", thumb.ID, "width", thumb.Width, "height", thumb.Height)
	return json.Marshal(makeReply{ID: thumb.ID, Original: orig, Thumbnail: thumb})
}

func main() {}
