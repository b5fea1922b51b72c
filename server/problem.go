package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/store"
)

// Problem is an error response, an RFC 9457 problem details object
// (Content-Type application/problem+json). Type is a URN naming the kind of
// problem, stable for clients to switch on; Code is the same as a moat
// error code; the extension members carry what a client needs to act: the
// correlation id to find the audit trail, the confirmation request of a
// 428, the wait of a 429.
type Problem struct {
	Type          string                    `json:"type"`
	Title         string                    `json:"title"`
	Status        int                       `json:"status"`
	Detail        string                    `json:"detail,omitempty"`
	Instance      string                    `json:"instance,omitempty"`
	Code          string                    `json:"code,omitempty"`
	CorrelationID string                    `json:"correlation_id,omitempty"`
	Module        string                    `json:"module,omitempty"`
	Action        string                    `json:"action,omitempty"`
	Confirmation  *host.ConfirmationRequest `json:"confirmation,omitempty"`
	RetryAfter    int                       `json:"retry_after,omitempty"` // seconds
	// Logs are the guest's records of a failed invocation asked with
	// ?logs=true (see InvocationJSON), and LogsDropped those past its bounds.
	Logs        []GuestLogRecord `json:"logs,omitempty"`
	LogsDropped int              `json:"logs_dropped,omitempty"`

	header http.Header
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail) }

// ProblemType is the URN of a problem code.
func ProblemType(code string) string { return "urn:moat:problem:" + code }

func problem(status int, code, format string, args ...any) *Problem {
	return &Problem{Type: ProblemType(code), Title: http.StatusText(status), Status: status, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// httpStatus maps a moat error code to the HTTP status of its response.
// The guest's own failures (traps, faults, limits) are 502: the server
// worked, the module behind it did not. resource_exhausted is one of them,
// like memory_limit: the module used up its own invocation's host budget
// (transport buffers, log records, audit rows, HTTP bodies). It is not 429,
// which tells a client to slow down and retry, nor 413 or 422, which
// blame its request: the same call fails the same way until the module
// or the operator's limits.budget change.
var httpStatus = map[abi.Code]int{
	abi.CodeInvalidArgument:      http.StatusBadRequest,
	abi.CodeNotFound:             http.StatusNotFound,
	abi.CodeNoSuchAction:         http.StatusNotFound,
	abi.CodeDenied:               http.StatusForbidden,
	abi.CodeConfirmationRequired: http.StatusPreconditionRequired,
	abi.CodeRateLimited:          http.StatusTooManyRequests,
	abi.CodeInputTooLarge:        http.StatusRequestEntityTooLarge,
	abi.CodeTooLarge:             http.StatusRequestEntityTooLarge,
	abi.CodeConflict:             http.StatusConflict, // a stale db version an action passed on: read again and retry
	abi.CodeBadModule:            http.StatusUnprocessableEntity,
	abi.CodeABIVersion:           http.StatusUnprocessableEntity,
	abi.CodeGuestError:           http.StatusUnprocessableEntity,
	abi.CodeTimeout:              http.StatusGatewayTimeout,
	abi.CodeCanceled:             http.StatusServiceUnavailable,
	abi.CodeUnavailable:          http.StatusServiceUnavailable,
	abi.CodeOutputTooLarge:       http.StatusBadGateway,
	abi.CodeMemoryLimit:          http.StatusBadGateway,
	abi.CodeResourceExhausted:    http.StatusBadGateway,
	abi.CodeTrap:                 http.StatusBadGateway,
	abi.CodeGuestFault:           http.StatusBadGateway,
	abi.CodeUnknownOp:            http.StatusBadGateway,
	abi.CodeInternal:             http.StatusInternalServerError,
}

// fromHostError turns an error of the host into a problem.
func fromHostError(err error) *Problem {
	if errors.Is(err, store.ErrConfirmationStale) {
		// The module under this name is not the one the confirmation was
		// requested on: a 409, so that the client asks again (and a person
		// approves again) rather than retrying.
		p := problem(http.StatusConflict, "confirmation_stale", "%s", hostReason(err))
		var he *host.Error
		if errors.As(err, &he) {
			p.Module, p.Action = he.Module, he.Action
		}
		return p
	}
	// The code is the error's (abi.CodeOf, whatever the type that
	// carries it); the message the host's reason or the wire error's.
	code := abi.CodeOf(err)
	if code == "" {
		return problem(http.StatusInternalServerError, string(abi.CodeInternal), "%v", err)
	}
	status, ok := httpStatus[code]
	if !ok {
		status = http.StatusInternalServerError
	}
	var he *host.Error
	if errors.As(err, &he) && he.Code == code {
		p := problem(status, string(code), "%s", he.Reason)
		p.Module, p.Action, p.Confirmation = he.Module, he.Action, he.Confirmation
		if code == abi.CodeRateLimited {
			p.RetryAfter = 1
		}
		return p
	}
	return problem(status, string(code), "%s", abi.AsError(err).Message)
}

// hostReason is the reason of a *host.Error in err, else err's text.
func hostReason(err error) string {
	var he *host.Error
	if errors.As(err, &he) {
		return he.Reason
	}
	return err.Error()
}

func rateLimited(scope string, wait time.Duration) *Problem {
	secs := max(1, int((wait+time.Second-1)/time.Second))
	p := problem(http.StatusTooManyRequests, string(abi.CodeRateLimited), "the request rate of this %s is used up; retry after %d s", scope, secs)
	p.RetryAfter = secs
	return p
}

// rateUnavailable is a request refused because the shared rate bucket
// could not be read: the limit is not waived while the database is away.
func rateUnavailable(err error) error {
	return &unavailable{err: err}
}

// unavailable is a 503 whose cause goes to the log, not the client.
type unavailable struct{ err error }

func (u *unavailable) Error() string { return "rate limit: " + u.err.Error() }
func (u *unavailable) Unwrap() error { return u.err }

// errorHandler writes every error as problem+json: the handlers' problems,
// echo's own HTTP errors (404 for an unknown route, 405, 413) and anything
// else as a 500 whose detail goes to the log, not the client.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var p *Problem
	var he *echo.HTTPError
	switch {
	case errors.As(err, &p):
	case errors.As(err, &he):
		code := map[int]string{http.StatusNotFound: "not_found", http.StatusMethodNotAllowed: "method_not_allowed",
			http.StatusRequestEntityTooLarge: "too_large", http.StatusUnauthorized: "unauthenticated"}[he.Code]
		if code == "" {
			code = "http_" + strconv.Itoa(he.Code)
		}
		p = problem(he.Code, code, "%v", he.Message)
		if he.Code == http.StatusNotFound {
			p.Detail = "no route " + c.Request().Method + " " + c.Request().URL.Path + "; the routes are listed in /v1/openapi.json"
		}
	case errors.As(err, new(*unavailable)):
		s.log.Error("request refused: the shared rate limit is unavailable", "method", c.Request().Method, "path", c.Request().URL.Path,
			"correlation_id", correlationID(c), "err", err)
		p = problem(http.StatusServiceUnavailable, string(abi.CodeUnavailable), "the request rate cannot be checked (the database is unavailable); retry later")
		p.RetryAfter = 1
	default:
		s.log.Error("request failed", "method", c.Request().Method, "path", c.Request().URL.Path, "correlation_id", correlationID(c), "err", err)
		p = problem(http.StatusInternalServerError, string(abi.CodeInternal), "internal error; the server log has the details under correlation id %s", correlationID(c))
	}
	if p.CorrelationID == "" {
		p.CorrelationID = correlationID(c)
	}
	if p.Instance == "" {
		p.Instance = c.Request().URL.Path
	}
	h := c.Response().Header()
	for k, v := range p.header {
		h[k] = v
	}
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	if p.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="moat"`)
	}
	if p.Code == string(abi.CodeDenied) || p.Code == string(abi.CodeRateLimited) || p.Status == http.StatusUnauthorized {
		s.metrics.denials.WithLabelValues(p.Code).Inc()
	}
	h.Set(echo.HeaderContentType, "application/problem+json")
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(p.Status)
		return
	}
	_ = c.JSON(p.Status, p)
}
