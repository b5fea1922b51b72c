package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

// TestExitStatus: moat's exit status comes from the error's code
// (abi.CodeOf), whatever type carries it and however it is wrapped; a
// refusal by policy is 3 as the exit statuses promise, not 1 because it
// reached main outside a host.Error.
func TestExitStatus(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want int
	}{
		{"host timeout", &host.Error{Code: abi.CodeTimeout}, exitTimeout},
		{"wrapped host memory limit", fmt.Errorf("run: %w", &host.Error{Code: abi.CodeMemoryLimit}), exitMemory},
		{"host confirmation", &host.Error{Code: abi.CodeConfirmationRequired}, exitConfirm},
		{"wrapped policy refusal", fmt.Errorf("load: %w", &policy.DeniedError{Reason: "no"}), exitDenied},
		{"signature refusal", fmt.Errorf("verify: %w", &policy.SignatureError{Module: "m", Reason: "bad"}), exitDenied},
		{"wire invalid argument", fmt.Errorf("kv set: %w", abi.Errorf(abi.CodeInvalidArgument, "bad key")), exitUsage},
		{"wire unavailable", abi.Errorf(abi.CodeUnavailable, "db"), exitFailure},
		{"usage", usagef("give a module"), exitUsage},
		{"no code", errors.New("boom"), exitFailure},
	} {
		if got := exitStatus(tt.err); got != tt.want {
			t.Errorf("%s: exit %d, want %d", tt.name, got, tt.want)
		}
	}
}
