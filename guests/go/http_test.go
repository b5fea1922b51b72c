package moat

import (
	"bytes"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// TestHTTP: Fetch sends the contract's request (bytes as base64, the
// timeout in whole milliseconds rounded up) and reads its reply: binary
// bodies intact, a body larger than the first reply buffer, headers by
// any case; a status of 500 is a response; the host's refusals keep their
// code; a negative timeout is refused before anything is sent.
func TestHTTP(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	big := make([]byte, 100<<10) // past the 16 KiB first buffer: StatusTooSmall, then a fetch
	rand.New(rand.NewSource(1)).Read(big)
	var got abi.HTTPFetchRequest
	var sent []byte
	h.ops[abi.OpHTTPFetch] = func(b []byte) ([]byte, error) {
		sent = b
		if err := abi.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		switch got.URL {
		case "https://api.example.com/private":
			return nil, abi.Errorf(abi.CodeDenied, "op http.fetch https://api.example.com/private: no http grant covers it")
		case "https://api.example.com/big":
			return abi.Marshal(abi.HTTPFetchResponse{Status: 200, Body: big, URL: got.URL})
		case "https://api.example.com/empty":
			return []byte(`{"status":500,"url":"https://api.example.com/empty"}`), nil
		}
		// A header named body must not be taken for the body.
		return abi.Marshal(abi.HTTPFetchResponse{Status: 201, Headers: map[string]string{"content-type": "application/octet-stream", "body": "Zm9v"},
			Body: append([]byte("got:"), got.Body...), URL: got.URL + "?final"})
	}

	resp, err := HTTP.Fetch(HTTPRequest{Method: "POST", URL: "https://api.example.com/echo", Headers: map[string]string{"X-Test": "sdk"},
		Body: []byte{0, 0xff, 'h', 'i'}, Timeout: 1500 * time.Microsecond, MaxBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	const wantReq = `{"method":"POST","url":"https://api.example.com/echo","headers":{"X-Test":"sdk"},"body":"AP9oaQ==","timeout_ms":2,"max_bytes":4096}`
	if string(sent) != wantReq {
		t.Errorf("request %s\nwant    %s", sent, wantReq)
	}
	if resp.Status != 201 || !bytes.Equal(resp.Body, []byte("got:\x00\xffhi")) || resp.URL != "https://api.example.com/echo?final" ||
		resp.Header("Content-Type") != "application/octet-stream" || resp.Header("content-type") != "application/octet-stream" || resp.Header("X-None") != "" {
		t.Errorf("response %+v", resp)
	}

	resp, err = HTTP.Get("https://api.example.com/big")
	if err != nil || !bytes.Equal(resp.Body, big) || resp.Status != 200 {
		t.Fatalf("big body: %d bytes, %v", len(resp.Body), err)
	}
	if string(sent) != `{"url":"https://api.example.com/big"}` {
		t.Errorf("Get sent %s; want the URL alone (the host's defaults)", sent)
	}
	if resp, err = HTTP.Get("https://api.example.com/empty"); err != nil || resp.Status != 500 || resp.Body == nil || len(resp.Body) != 0 {
		t.Errorf("a 500 without a body = %+v, %v; want a response with an empty, non-nil body", resp, err)
	}
	var e *abi.Error
	if _, err := HTTP.Get("https://api.example.com/private"); !errors.As(err, &e) || e.Code != abi.CodeDenied {
		t.Errorf("ungranted URL = %v; want denied", err)
	}
	calls := len(h.calls)
	if _, err := HTTP.Fetch(HTTPRequest{URL: "https://api.example.com/echo", Timeout: -time.Second}); !errors.As(err, &e) || e.Code != abi.CodeInvalidArgument || len(h.calls) != calls {
		t.Errorf("negative timeout = %v after %d crossings; want invalid_argument before any", err, len(h.calls)-calls)
	}
	// A timeout past the host's maximum reaches the host, which refuses it
	// by name, rather than being clamped in the guest.
	if _, err := HTTP.Fetch(HTTPRequest{URL: "https://api.example.com/echo", Timeout: 1000 * time.Hour}); err != nil || got.TimeoutMS != abi.MaxHTTPTimeoutMS+1 {
		t.Errorf("a timeout of 1000h was sent as %d ms (%v); want %d, which the host refuses", got.TimeoutMS, err, abi.MaxHTTPTimeoutMS+1)
	}
}
