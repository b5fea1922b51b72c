package server

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

// TestProblemFromWrappedErrors: the HTTP status comes from the error's
// code (abi.CodeOf), whatever type carries it and however it is wrapped.
// A policy refusal that reached a handler outside a host.Error was a 500.
func TestProblemFromWrappedErrors(t *testing.T) {
	for _, tt := range []struct {
		name   string
		err    error
		status int
		code   string
		detail string
	}{
		{"host error", &host.Error{Module: "m", Code: abi.CodeTimeout, Reason: "slow"}, http.StatusGatewayTimeout, "timeout", "slow"},
		{"wrapped host error", fmt.Errorf("invoke: %w", &host.Error{Code: abi.CodeRateLimited, Reason: "later"}), http.StatusTooManyRequests, "rate_limited", "later"},
		{"wire error, wrapped", fmt.Errorf("get: %w", abi.Errorf(abi.CodeNotFound, "no module x")), http.StatusNotFound, "not_found", "no module x"},
		{"policy refusal, wrapped", fmt.Errorf("upload: %w", &policy.DeniedError{Module: "m", Reason: "not granted"}), http.StatusForbidden, "denied", "upload: denied: module m: not granted"},
		{"signature refusal, joined", errors.Join(errors.New("verify"), &policy.SignatureError{Module: "m", Reason: "bad"}), http.StatusForbidden, "denied", "verify\nsignature: module m: bad"},
		{"host error around a wire error", &host.Error{Code: abi.CodeGuestError, Reason: "r", Err: abi.Errorf(abi.CodeDenied, "inner")}, http.StatusUnprocessableEntity, "guest_error", "r"},
		{"no code", errors.New("disk on fire"), http.StatusInternalServerError, "internal", "disk on fire"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := fromHostError(tt.err)
			if p.Status != tt.status || p.Code != tt.code || p.Detail != tt.detail {
				t.Errorf("got %d %s %q, want %d %s %q", p.Status, p.Code, p.Detail, tt.status, tt.code, tt.detail)
			}
		})
	}
	if p := fromHostError(&host.Error{Code: abi.CodeRateLimited}); p.RetryAfter != 1 {
		t.Errorf("rate_limited: retry_after %d, want 1", p.RetryAfter)
	}
}
