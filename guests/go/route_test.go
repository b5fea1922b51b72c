package moat

import (
	"encoding/json"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// TestRoute: Request reads a route's input (text and base64 bodies,
// headers by any case, params, query) and refuses any other input;
// Response and JSON write the document the server reads.
func TestRoute(t *testing.T) {
	in := `{"moat":"http.request","route":"GET /items/{id}","auth":"public","method":"GET","path":"/items/7","params":{"id":"7"},` +
		`"query":{"q":["a","b"]},"headers":{"accept":"text/html"},"body_base64":"AP8="}`
	req, err := Request([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	body, err := req.Bytes()
	if req.Param("id") != "7" || req.QueryValue("q") != "a" || req.QueryValue("none") != "" || req.Header("Accept") != "text/html" ||
		req.Auth != "public" || err != nil || string(body) != "\x00\xff" {
		t.Errorf("Request = %+v, body %q %v", req, body, err)
	}
	for _, bad := range []string{"hello", `{"moat":"http.response"}`, `{"method":"GET"}`} {
		if _, err := Request([]byte(bad)); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("Request(%q) = %v; want invalid_argument", bad, err)
		}
	}

	for _, tt := range []struct {
		name string
		out  func() ([]byte, error)
		want abi.RouteResponse
	}{
		{"text", Response{Status: 201, Headers: map[string]string{"Location": "/x"}, Body: []byte("made")}.Encode,
			abi.RouteResponse{Moat: "http.response", Status: 201, Headers: map[string]string{"Location": "/x"}, Body: "made"}},
		{"bytes", Response{ContentType: "image/png", Body: []byte{0x89, 0xff}}.Encode,
			abi.RouteResponse{Moat: "http.response", ContentType: "image/png", BodyBase64: "if8="}},
		{"media", Response{Media: "abc"}.Encode, abi.RouteResponse{Moat: "http.response", Media: "abc"}},
		{"json", func() ([]byte, error) { return JSON(404, map[string]string{"error": "gone"}) },
			abi.RouteResponse{Moat: "http.response", Status: 404, ContentType: "application/json", Body: `{"error":"gone"}`}},
	} {
		b, err := tt.out()
		var got abi.RouteResponse
		if err == nil {
			err = json.Unmarshal(b, &got)
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(tt.want)
		if err != nil || string(gb) != string(wb) {
			t.Errorf("%s: %s %v; want %s", tt.name, b, err, wb)
		}
	}
}
