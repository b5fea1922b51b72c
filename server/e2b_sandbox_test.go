package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/moat-sandbox/moat/server"
)

type echoMsg struct {
	Text    string `json:"text"`
	Session string `json:"session,omitempty"`
}

// jsonCodec is Connect's json codec over encoding/json, as E2B's SDKs use
// it (useBinaryFormat: false).
type jsonCodec struct{}

func (jsonCodec) Name() string                  { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error {
	return json.Unmarshal(b, v)
}

// TestE2BDataPlane: a request to /e2b/sandbox reaches the session its
// E2b-Sandbox-Id names only with that session's access token and a port
// moat serves; a token of another session, a forged one, or none is a
// 404 that says nothing of which sessions exist; Connect's unary and
// server-stream protocols (JSON) carry messages and errors both ways.
func TestE2BDataPlane(t *testing.T) {
	t.Parallel()
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	bob := ts.key(t, "acme", "bob")
	id, other := newSession(t, ts, ann), newSession(t, ts, bob)
	token := server.E2BAccessToken(ts.Server, id, "acme", "ann")

	call := func(id, port, token, text string) (*echoMsg, error) {
		c := connect.NewClient[echoMsg, echoMsg](http.DefaultClient, ts.URL+"/e2b/sandbox/moattest.Echo/Say", connect.WithCodec(jsonCodec{}))
		req := connect.NewRequest(&echoMsg{Text: text})
		req.Header().Set("E2b-Sandbox-Id", id)
		req.Header().Set("E2b-Sandbox-Port", port)
		if token != "" {
			req.Header().Set("X-Access-Token", token)
		}
		res, err := c.CallUnary(context.Background(), req)
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	got, err := call(id, "49983", token, "hello")
	if err != nil || got.Text != "hello" || got.Session != id {
		t.Fatalf("the owner's call: %+v %v", got, err)
	}
	if _, err := call(id, "49983", token, ""); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("an error crosses as its Connect code: %v", err)
	}
	for name, c := range map[string][3]string{
		"another session's id with this token": {other, "49983", token},
		"a forged token":                       {id, "49983", strings.Repeat("A", 43)},
		"no token":                             {id, "49983", ""},
		"a malformed id":                       {"../" + id, "49983", token},
		"a port moat does not serve":           {id, "22", token},
	} {
		if _, err := call(c[0], c[1], c[2], "x"); err == nil {
			t.Errorf("%s: answered", name)
		} else if code := connect.CodeOf(err); code != connect.CodeNotFound && code != connect.CodeUnimplemented {
			t.Errorf("%s: %v, want not found", name, err)
		}
	}

	// A server stream: three messages, then the error in the end message.
	c := connect.NewClient[echoMsg, echoMsg](http.DefaultClient, ts.URL+"/e2b/sandbox/moattest.Echo/Repeat", connect.WithCodec(jsonCodec{}))
	req := connect.NewRequest(&echoMsg{Text: "n"})
	req.Header().Set("E2b-Sandbox-Id", id)
	req.Header().Set("E2b-Sandbox-Port", "49983")
	req.Header().Set("X-Access-Token", token)
	st, err := c.CallServerStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for st.Receive() {
		texts = append(texts, st.Msg().Text)
	}
	if strings.Join(texts, ",") != "n0,n1,n2" || connect.CodeOf(st.Err()) != connect.CodeNotFound {
		t.Errorf("the stream: %v, end %v", texts, st.Err())
	}
	var ce *connect.Error
	if !errors.As(st.Err(), &ce) || ce.Message() != "the end" {
		t.Errorf("the end message's error: %v", st.Err())
	}
}
