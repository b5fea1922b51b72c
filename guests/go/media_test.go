package moat

import (
	"bytes"
	"errors"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// TestMedia: each wrapper sends its op's request and reads the item's
// description; Get's bytes arrive intact (past the first reply buffer
// too); a nil Put sends empty data, never null; codes are kept.
func TestMedia(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0, 0xff, 7}, 30<<10)...)
	var sent []string
	info := abi.MediaInfo{ID: "ab12", Type: "image/png", Size: int64(len(png)), Width: 64, Height: 48}
	reply := func(op string, resp any) {
		h.ops[op] = func(b []byte) ([]byte, error) {
			sent = append(sent, op+" "+string(b))
			if bytes.Contains(b, []byte(`"id":"gone"`)) {
				return nil, abi.Errorf(abi.CodeNotFound, "no media item gone")
			}
			return abi.Marshal(resp)
		}
	}
	reply(abi.OpMediaFetch, info)
	reply(abi.OpMediaPut, info)
	reply(abi.OpMediaGet, abi.MediaGetResponse{MediaInfo: info, Data: png})
	reply(abi.OpMediaInfo, info)
	thumb := abi.MediaInfo{ID: "cd34", Type: "image/png", Size: 99, Width: 16, Height: 12}
	reply(abi.OpMediaThumbnail, thumb)

	if got, err := Media.Fetch("https://img.example.com/a.png"); err != nil || got != info {
		t.Errorf("Fetch = %+v, %v", got, err)
	}
	if got, err := Media.Put([]byte{1, 2, 0xff}, "image/png"); err != nil || got != info {
		t.Errorf("Put = %+v, %v", got, err)
	}
	if _, err := Media.Put(nil, ""); err != nil {
		t.Error(err)
	}
	gi, data, err := Media.Get("ab12")
	if err != nil || gi != info || !bytes.Equal(data, png) {
		t.Errorf("Get = %+v, %d bytes, %v", gi, len(data), err)
	}
	if got, err := Media.Info("ab12"); err != nil || got != info {
		t.Errorf("Info = %+v, %v", got, err)
	}
	if got, err := Media.Thumbnail("ab12", 16, 16, abi.FitCover); err != nil || got != thumb {
		t.Errorf("Thumbnail = %+v, %v", got, err)
	}
	want := []string{
		`media.fetch {"url":"https://img.example.com/a.png"}`,
		`media.put {"data":"AQL/","type":"image/png"}`,
		`media.put {"data":""}`,
		`media.get {"id":"ab12"}`,
		`media.info {"id":"ab12"}`,
		`media.thumbnail {"id":"ab12","width":16,"height":16,"fit":"cover"}`,
	}
	for i := range want {
		if at(sent, i) != want[i] {
			t.Errorf("request %d = %q\nwant %q", i, at(sent, i), want[i])
		}
	}
	var e *abi.Error
	if _, _, err := Media.Get("gone"); !errors.As(err, &e) || e.Code != abi.CodeNotFound {
		t.Errorf("Get of no item = %v; want not_found", err)
	}
}
