package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

// sseStream writes server-sent events (text/event-stream). The front door
// gives a response http.write_timeout to be read (beforeWrite); a stream
// lives longer, so each event moves the write deadline on by that much
// (http.ResponseController): a client that stops reading is dropped a
// write timeout later, and one that goes away ends the stream through
// the request's context.
type sseStream struct {
	c       echo.Context
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *Server) newSSE(c echo.Context) *sseStream {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set(echo.HeaderCacheControl, "no-cache")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold the events back
	c.Response().WriteHeader(http.StatusOK)
	st := &sseStream{c: c, rc: http.NewResponseController(c.Response().Writer), timeout: time.Duration(s.cfg.HTTP.WriteTimeout)}
	_ = st.rc.Flush()
	return st
}

// event writes one event whose data is v as JSON (one line), with id when
// id > 0.
func (st *sseStream) event(name string, id int64, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if st.timeout > 0 {
		_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	}
	msg := "event: " + name + "\n"
	if id > 0 {
		msg += "id: " + strconv.FormatInt(id, 10) + "\n"
	}
	msg += "data: " + string(b) + "\n\n"
	if _, err := st.c.Response().Write([]byte(msg)); err != nil {
		return fmt.Errorf("the client is gone: %w", err)
	}
	return st.rc.Flush()
}

// comment writes a comment line, which keeps a quiet stream's connection
// (and any proxy's) alive.
func (st *sseStream) comment() error {
	if st.timeout > 0 {
		_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	}
	if _, err := st.c.Response().Write([]byte(": keepalive\n\n")); err != nil {
		return err
	}
	return st.rc.Flush()
}

// wantsSSE reports whether the request asks for server-sent events.
func wantsSSE(c echo.Context) bool {
	for _, a := range c.Request().Header.Values(echo.HeaderAccept) {
		if len(a) >= 17 && a[:17] == "text/event-stream" {
			return true
		}
	}
	return false
}
