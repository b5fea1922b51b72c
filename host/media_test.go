package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/png"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// TestMediaGuest drives the media family end to end from a real Go guest
// (testdata/mediaguest, through the SDK's moat.Call): an image is put,
// thumbnailed and read back, each new item audited as a mutation with
// its id; a bomb is refused from its header; another organization finds
// nothing by the same id; a module without the media grant is denied and
// audited.
func TestMediaGuest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := policyHost(t, `
name: test
on_ungranted: deny_at_call
default:
  capabilities: {media: true}
`)
	wasm := testwasm.BuildGo(t, "./testdata/mediaguest", true)
	load := func(name, caps string) *host.Module {
		mf := mustManifest(t, "name: "+name+"\nversion: 1.0.0\nactions: [{name: media}]\ncapabilities: "+caps+"\n")
		m, err := h.Load(ctx, wasm, host.LoadOptions{Manifest: mf})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	gallery, bare := load("gallery", "{media: true}"), load("bare", "{kv: true}")
	call := func(m *host.Module, who policy.Principal, cid, op string, req any) (json.RawMessage, abi.Code, string) {
		t.Helper()
		in, _ := json.Marshal(map[string]any{"op": op, "req": req})
		res, err := m.Invoke(ctx, host.Request{Action: "media", Input: in, Principal: who, CorrelationID: cid})
		if err != nil {
			return nil, abi.CodeOf(err), err.Error()
		}
		return res.Output, "", ""
	}
	var img bytes.Buffer
	m := image.NewNRGBA(image.Rect(0, 0, 120, 80))
	for i := range m.Pix {
		m.Pix[i] = uint8(i)
	}
	png.Encode(&img, m)

	out, code, msg := call(gallery, ann, "m-put", abi.OpMediaPut, abi.MediaPutRequest{Data: img.Bytes()})
	var put abi.MediaInfo
	if code != "" || json.Unmarshal(out, &put) != nil || put.Type != "image/png" || put.Width != 120 || len(put.ID) != 64 {
		t.Fatalf("put = %s %s %s", out, code, msg)
	}
	evs := auditEvents(t, h, audit.Filter{CorrelationID: "m-put", Kind: audit.KindOp})
	if len(evs) != 1 || evs[0].Op != abi.OpMediaPut || evs[0].Decision != audit.Allow || evs[0].MutationID == "" ||
		evs[0].Attrs["id"] != put.ID || evs[0].Org != "acme" || evs[0].Module != "gallery" {
		t.Errorf("the put's audit events: %+v", evs)
	}

	out, code, msg = call(gallery, ann, "m-thumb", abi.OpMediaThumbnail, abi.MediaThumbnailRequest{ID: put.ID, Width: 30, Height: 30, Fit: abi.FitCover})
	var th abi.MediaInfo
	if code != "" || json.Unmarshal(out, &th) != nil || th.Width != 30 || th.Height != 30 || th.Type != "image/png" {
		t.Fatalf("thumbnail = %s %s %s", out, code, msg)
	}
	if evs := auditEvents(t, h, audit.Filter{CorrelationID: "m-thumb", Kind: audit.KindOp}); len(evs) != 1 || evs[0].Attrs["id"] != th.ID {
		t.Errorf("the thumbnail's audit events: %+v", evs)
	}
	out, code, msg = call(gallery, ann, "m-get", abi.OpMediaGet, abi.MediaGetRequest{ID: th.ID})
	var got abi.MediaGetResponse
	if code != "" || json.Unmarshal(out, &got) != nil {
		t.Fatalf("get = %s %s %s", out, code, msg)
	}
	if dec, err := png.Decode(bytes.NewReader(got.Data)); err != nil || dec.Bounds().Dx() != 30 {
		t.Errorf("the thumbnail read back: %v", err)
	}
	if evs := auditEvents(t, h, audit.Filter{CorrelationID: "m-get", Kind: audit.KindOp}); len(evs) != 0 {
		t.Errorf("a get is not a mutation, yet it was audited: %+v", evs)
	}

	// A 100000×100000 PNG in 57 bytes.
	bomb := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x01\x86\xa0\x00\x01\x86\xa0\x08\x06\x00\x00\x00"), 0, 0, 0, 0)
	bomb = fixCRC(bomb)
	if _, code, msg = call(gallery, ann, "", abi.OpMediaPut, abi.MediaPutRequest{Data: bomb}); code != abi.CodeTooLarge || !strings.Contains(msg, "abi.MaxMediaPixels") {
		t.Errorf("the bomb: %s %s", code, msg)
	}

	globex := policy.Principal{User: "gus", Org: "globex"}
	_, code, msgOther := call(gallery, globex, "", abi.OpMediaInfo, abi.MediaInfoRequest{ID: put.ID})
	_, code2, msgNone := call(gallery, globex, "", abi.OpMediaInfo, abi.MediaInfoRequest{ID: strings.Repeat("0", 64)})
	if code != abi.CodeNotFound || code2 != abi.CodeNotFound || msgOther != msgNone {
		t.Errorf("another org's id: %s %q; nobody's: %s %q; want the same not_found", code, msgOther, code2, msgNone)
	}

	if _, code, msg = call(bare, ann, "m-denied", abi.OpMediaInfo, abi.MediaInfoRequest{ID: put.ID}); code != abi.CodeDenied {
		t.Errorf("a module without media: %s %s", code, msg)
	}
	if evs := auditEvents(t, h, audit.Filter{CorrelationID: "m-denied", Kind: audit.KindOp}); len(evs) != 1 || evs[0].Decision != audit.Deny || evs[0].Op != abi.OpMediaInfo {
		t.Errorf("the denial's audit events: %+v", evs)
	}
}

// fixCRC completes a PNG signature and IHDR chunk whose CRC is zero, and
// appends an empty IDAT and IEND.
func fixCRC(b []byte) []byte {
	chunk := func(typ string, data []byte) []byte {
		c := append([]byte{byte(len(data) >> 24), byte(len(data) >> 16), byte(len(data) >> 8), byte(len(data))}, typ...)
		c = append(c, data...)
		sum := crc32.ChecksumIEEE(c[4:])
		return append(c, byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum))
	}
	out := append([]byte{}, b[:8]...)
	out = append(out, chunk("IHDR", b[16:29])...)
	out = append(out, chunk("IDAT", []byte{0x78, 0x9c, 3, 0, 0, 0, 0, 1})...)
	return append(out, chunk("IEND", nil)...)
}
