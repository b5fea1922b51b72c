package mcpserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// InProcess is the API served by h in this process (moat serve's own
// router, for /mcp): a tool call costs no connection, and passes the
// same middleware — authentication, admission, limits, audit — as a
// request from the network.
func InProcess(h http.Handler) API {
	return func(r *http.Request) (*http.Response, error) {
		w := &recorder{header: http.Header{}, status: http.StatusOK}
		h.ServeHTTP(w, r)
		return &http.Response{StatusCode: w.status, Header: w.header, Body: io.NopCloser(&w.body), Request: r}, nil
	}
}

// recorder is the response of an in-process request.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
}

// Write keeps at most maxAnswer+1 bytes: do refuses a longer answer.
func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if room := maxAnswer + 1 - w.body.Len(); room > 0 {
		w.body.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (w *recorder) Flush() {}

// Remote is the API of the moat server at base (`moat mcp --server`),
// reached with client. A redirect is not followed: it would carry the
// key to wherever it points.
func Remote(base string, client *http.Client) (API, error) {
	u, err := url.Parse(strings.TrimSuffix(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("mcp: the server URL %q is not http(s)://host[:port]", base)
	}
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return func(r *http.Request) (*http.Response, error) {
		r.URL.Scheme, r.URL.Host = u.Scheme, u.Host
		r.URL.Path = u.Path + r.URL.Path
		if r.URL.RawPath != "" {
			r.URL.RawPath = u.EscapedPath() + r.URL.RawPath
		}
		r.Host = u.Host
		r.RequestURI = ""
		res, err := c.Do(r)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, fmt.Errorf("%w (is moat serve running at %s?)", err, base)
		}
		return res, nil
	}, nil
}
