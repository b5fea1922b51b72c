package ops_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/jpeg"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/media"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// photo is a JPEG with an APP1 EXIF block carrying a GPS position, as a
// phone writes one.
func photo(t *testing.T, w, h int) []byte {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range m.Pix {
		m.Pix[i] = uint8(i * 7)
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, nil); err != nil {
		t.Fatal(err)
	}
	exif := []byte("Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x01\x88\x25\x00\x04\x00\x00\x00\x01\x00\x00\x00\x1a\x00\x00\x00\x00GPS-47.3769N-8.5417E")
	seg := append([]byte{0xFF, 0xE1, byte((len(exif) + 2) >> 8), byte(len(exif) + 2)}, exif...)
	return append(append(append([]byte{}, b.Bytes()[:2]...), seg...), b.Bytes()[2:]...)
}

func mediaEnv(t *testing.T, st *store.Store, org string) *ops.Env {
	return mediaEnvQuota(t, st, org, 1<<20)
}

// mediaEnvQuota is mediaEnv with the media family provisioned as a host
// does it, with the given quota.
func mediaEnvQuota(t *testing.T, st *store.Store, org string, quota int64) *ops.Env {
	t.Helper()
	svc, err := ops.Provision(context.Background(), ops.Core{Store: st}, map[string]any{"media": &media.FamilyConfig{QuotaBytes: policy.ByteSize(quota)}})
	if err != nil {
		t.Fatal(err)
	}
	env := &ops.Env{Module: "gallery", Store: st, Logger: slog.New(slog.DiscardHandler), Services: svc}
	env.Begin(context.Background(), "a", policy.Principal{User: "ann", Org: org}, "c")
	return env
}

func mcall(t *testing.T, env *ops.Env, g ops.Gate, op string, req any) ([]byte, error) {
	t.Helper()
	o, ok := ops.Lookup([]byte(op))
	if !ok {
		t.Fatalf("no op %s", op)
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return ops.Dispatch(env, g, o, b)
}

// minfo runs an op whose reply is a MediaInfo.
func minfo(t *testing.T, env *ops.Env, g ops.Gate, op string, req any) abi.MediaInfo {
	t.Helper()
	reply, err := mcall(t, env, g, op, req)
	if err != nil {
		t.Fatal(err)
	}
	var in abi.MediaInfo
	if err := json.Unmarshal(reply, &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestMediaOps drives the media family through Dispatch as a transport
// does: what is put is stored stripped under the id of its stored bytes,
// read back whole, described, thumbnailed; hostile and oversized requests
// are refused with their code and the op's name; another organization's
// item is exactly as absent as one nobody has.
func TestMediaOps(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	env := mediaEnv(t, st, "acme")
	jpg := photo(t, 64, 32)

	put := minfo(t, env, allowAll, abi.OpMediaPut, abi.MediaPutRequest{Data: jpg, Type: "image/jpeg"})
	if put.Type != "image/jpeg" || put.Width != 64 || put.Height != 32 || put.Size >= int64(len(jpg)) {
		t.Errorf("put: %+v (from %d bytes)", put, len(jpg))
	}
	if env.Subject() != put.ID {
		t.Errorf("the audit subject is %q, not the item %s", env.Subject(), put.ID)
	}
	reply, err := mcall(t, env, allowAll, abi.OpMediaGet, abi.MediaGetRequest{ID: put.ID})
	if err != nil {
		t.Fatal(err)
	}
	var got abi.MediaGetResponse
	if err := json.Unmarshal(reply, &got); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(got.Data)
	if got.MediaInfo != put || hex.EncodeToString(sum[:]) != put.ID {
		t.Errorf("get: %+v; its bytes hash to another id", got.MediaInfo)
	}
	if bytes.Contains(got.Data, []byte("GPS-47.3769N")) {
		t.Error("the stored photo still holds its GPS position")
	}
	if again := minfo(t, env, allowAll, abi.OpMediaPut, abi.MediaPutRequest{Data: jpg}); again != put {
		t.Errorf("the same bytes again: %+v, want %+v", again, put)
	}
	if in := minfo(t, env, allowAll, abi.OpMediaInfo, abi.MediaInfoRequest{ID: put.ID}); in != put {
		t.Errorf("info: %+v", in)
	}
	th := minfo(t, env, allowAll, abi.OpMediaThumbnail, abi.MediaThumbnailRequest{ID: put.ID, Width: 16, Height: 16})
	if th.Type != "image/png" || th.Width != 16 || th.Height != 8 || th.ID == put.ID {
		t.Errorf("thumbnail: %+v", th)
	}
	if again := minfo(t, env, allowAll, abi.OpMediaThumbnail, abi.MediaThumbnailRequest{ID: put.ID, Width: 16, Height: 16, Fit: "contain"}); again != th {
		t.Errorf("the same thumbnail again is another item: %+v", again)
	}
	pdf := minfo(t, env, allowAll, abi.OpMediaPut, abi.MediaPutRequest{Data: []byte("%PDF-1.7\n%%EOF\n")})

	globex := mediaEnv(t, st, "globex")
	nobody := strings.Repeat("ab", 32)
	html := []byte("<!DOCTYPE html><html><body><script>alert(document.domain)</script>")
	tests := []struct {
		name string
		env  *ops.Env
		op   string
		req  any
		code abi.Code
		msg  string
	}{
		{"html claiming png", env, abi.OpMediaPut, abi.MediaPutRequest{Data: html, Type: "image/png"}, abi.CodeInvalidArgument, "media.put: the data was said to be image/png"},
		{"svg type", env, abi.OpMediaPut, abi.MediaPutRequest{Data: jpg, Type: "image/svg+xml"}, abi.CodeInvalidArgument, "media.put: type"},
		{"over the inline limit", env, abi.OpMediaPut, abi.MediaPutRequest{Data: make([]byte, abi.MaxMediaInlineBytes+1)}, abi.CodeTooLarge, "abi.MaxMediaInlineBytes"},
		{"empty", env, abi.OpMediaPut, abi.MediaPutRequest{}, abi.CodeInvalidArgument, "media.put: the data is empty"},
		{"path as id", env, abi.OpMediaGet, abi.MediaGetRequest{ID: "../../moat.db"}, abi.CodeInvalidArgument, "64 lowercase hex"},
		{"upper-case id", env, abi.OpMediaInfo, abi.MediaInfoRequest{ID: strings.ToUpper(put.ID)}, abi.CodeInvalidArgument, "64 lowercase hex"},
		{"thumbnail of a path", env, abi.OpMediaThumbnail, abi.MediaThumbnailRequest{ID: "../x", Width: 1, Height: 1}, abi.CodeInvalidArgument, "64 lowercase hex"},
		{"nobody's id", env, abi.OpMediaGet, abi.MediaGetRequest{ID: nobody}, abi.CodeNotFound, "media.get: this organization has no such media item"},
		{"another org's id, get", globex, abi.OpMediaGet, abi.MediaGetRequest{ID: put.ID}, abi.CodeNotFound, "media.get: this organization has no such media item"},
		{"another org's id, info", globex, abi.OpMediaInfo, abi.MediaInfoRequest{ID: put.ID}, abi.CodeNotFound, "media.info: this organization has no such media item"},
		{"another org's id, thumbnail", globex, abi.OpMediaThumbnail, abi.MediaThumbnailRequest{ID: put.ID, Width: 8, Height: 8}, abi.CodeNotFound, "media.thumbnail: this organization has no such media item"},
		{"thumbnail of a PDF", env, abi.OpMediaThumbnail, abi.MediaThumbnailRequest{ID: pdf.ID, Width: 8, Height: 8}, abi.CodeInvalidArgument, "media.thumbnail: the item is application/pdf, not an image"},
		{"thumbnail too large", env, abi.OpMediaThumbnail, abi.MediaThumbnailRequest{ID: put.ID, Width: 100000, Height: 8}, abi.CodeInvalidArgument, "1 to 2048"},
		{"fetch without a url", env, abi.OpMediaFetch, abi.MediaFetchRequest{}, abi.CodeInvalidArgument, "media.fetch: url is empty"},
		{"fetch on a host that sends nothing", env, abi.OpMediaFetch, abi.MediaFetchRequest{URL: "https://example.com/a.png"}, abi.CodeDenied, "sends no requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mcall(t, tt.env, allowAll, tt.op, tt.req)
			if codeOf(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("%s = %v; want %s containing %q", tt.op, err, tt.code, tt.msg)
			}
			if strings.Contains(err.Error(), "<script") {
				t.Errorf("the refusal echoes the data: %v", err)
			}
		})
	}

	// Granted as a whole: without the grant the gate refuses before
	// the request is even decoded.
	g := &gate{allow: func(op, target string) bool { return false }}
	if _, err := mcall(t, env, g, abi.OpMediaPut, abi.MediaPutRequest{Data: jpg}); codeOf(err) != abi.CodeDenied || len(g.asked) != 1 || g.asked[0] != "media.put " {
		t.Errorf("ungranted put: %v, gate asked %q", err, g.asked)
	}
	o, _ := ops.Lookup([]byte(abi.OpMediaPut))
	if _, err := ops.Dispatch(env, g, o, []byte(`{"data":`)); codeOf(err) != abi.CodeDenied {
		t.Errorf("ungranted put of bad JSON: %v, want denied before decoding", err)
	}
}

// TestMediaOpsQuota: a put past the organization's quota is refused with
// resource_exhausted naming the setting; of two puts racing at the
// quota's edge, one is stored.
func TestMediaOpsQuota(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, b := photo(t, 64, 64), photo(t, 64, 65)
	env := mediaEnv(t, st, "acme")
	first := minfo(t, env, allowAll, abi.OpMediaPut, abi.MediaPutRequest{Data: a})
	quota := first.Size + first.Size/2 // room for one more half-photo, not a photo
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, data := range [][]byte{b, photo(t, 65, 64)} {
		e := mediaEnvQuota(t, st, "acme", quota+first.Size)                                                  // one more photo fits, not two
		wg.Go(func() { _, errs[i] = mcall(t, e, &gate{}, abi.OpMediaPut, abi.MediaPutRequest{Data: data}) }) // a gate each: a gate records what it is asked
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("two racing puts at the edge of the quota: %v, %v; want one stored and one refused", errs[0], errs[1])
	}
	for _, err := range errs {
		if err != nil && (codeOf(err) != abi.CodeResourceExhausted || !strings.Contains(err.Error(), "media.put: the media quota of") || !strings.Contains(err.Error(), "(media.quota_bytes)")) {
			t.Errorf("refusal %v; want resource_exhausted naming media.quota_bytes", err)
		}
	}
	env = mediaEnvQuota(t, st, "acme", quota)
	if _, err := mcall(t, env, allowAll, abi.OpMediaThumbnail, abi.MediaThumbnailRequest{ID: first.ID, Width: 60, Height: 60}); codeOf(err) != abi.CodeResourceExhausted {
		t.Errorf("a thumbnail past the quota: %v", err)
	}
	// What is stored already costs nothing to put again.
	if _, err := mcall(t, env, allowAll, abi.OpMediaPut, abi.MediaPutRequest{Data: a}); err != nil {
		t.Errorf("the same bytes over the quota: %v", err)
	}
}
