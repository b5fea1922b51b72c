package host_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/media"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// TestMediaFetchHoldsMemory: a download holds its room in the host-wide
// bound of media work (media.decode_bytes) from before the request is sent
// until the item is kept, so concurrent media.fetch calls of large bodies
// wait for each other rather than adding up past the bound; a bound too
// small for one download refuses it before anything is sent.
func TestMediaFetchHoldsMemory(t *testing.T) {
	var img bytes.Buffer
	png.Encode(&img, image.NewGray(image.Rect(0, 0, 8, 8)))
	unblock := make(chan struct{})
	srv := serveOn(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow.png" {
			<-unblock
		}
		w.Write(img.Bytes())
	})
	ctx := context.Background()
	newHost := func(bound int64) *host.Module {
		p, err := policy.ParseProfile("media.yaml", []byte("name: p\ndefault:\n  capabilities:\n    media: true\n    http: [\""+srv.url+"\"]\n"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(ctx, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Store: st, Profile: p, Families: map[string]any{"media": &media.FamilyConfig{Decodes: media.NewDecodeSlots(bound)}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(ctx); st.Close() })
		m, err := loadWithManifest(t, h, "name: dl\nversion: 1.0.0\nactions: [{name: call}]\ncapabilities:\n  media: true\n  http: [\""+srv.url+"\"]\n")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	fetch := func(m *host.Module, path string, timeout time.Duration) error {
		c, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := m.Invoke(c, host.Request{Action: "call", Input: []byte(abi.OpMediaFetch + ` {"url": "` + srv.url + path + `"}`), Principal: ann})
		return err
	}

	// Room for one download at a time: the second waits while the first
	// is in flight, and its deadline passes waiting, with nothing sent.
	m := newHost(media.FetchHoldBytes)
	first := make(chan error, 1)
	go func() { first <- fetch(m, "/slow.png", 30*time.Second) }()
	for srv.hits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	err := fetch(m, "/fast.png", 300*time.Millisecond)
	if abi.CodeOf(err) != abi.CodeTimeout || !strings.Contains(err.Error(), "waiting for memory for media.fetch") {
		t.Errorf("a second download while the first holds the bound: %v", err)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("the server saw %d requests while the bound was held; want 1", n)
	}
	close(unblock)
	if err := <-first; err != nil {
		t.Fatalf("the first download: %v", err)
	}
	if err := fetch(m, "/fast.png", 30*time.Second); err != nil {
		t.Errorf("a download once the bound is free: %v", err)
	}

	// A bound smaller than one download: refused at once, naming it.
	tiny := media.NewDecodeSlots(1 << 20)
	var ae *abi.Error
	if _, err := tiny.Hold(ctx, media.FetchHoldBytes, abi.OpMediaFetch); !errors.As(err, &ae) || ae.Code != abi.CodeResourceExhausted || !strings.Contains(err.Error(), "media.decode_bytes") {
		t.Errorf("a bound smaller than one download: %v", err)
	}
}
