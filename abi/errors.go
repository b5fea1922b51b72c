package abi

import (
	"errors"
	"fmt"
)

// Code classifies a failure. Codes cross the wire as strings, so a guest in
// any language can switch on them, and the host maps them to exit statuses
// and HTTP statuses.
type Code string

const (
	// Failures an op reports to the guest.
	CodeInvalidArgument Code = "invalid_argument" // the request is malformed or a field is out of range
	CodeNotFound        Code = "not_found"        // the named thing does not exist
	CodeUnknownOp       Code = "unknown_op"       // no op of that name in this host
	CodeDenied          Code = "denied"           // policy refused the op or the action
	CodeTooLarge        Code = "too_large"        // a key, value or message exceeds its limit
	CodeConflict        Code = "conflict"         // the thing changed since it was read (a stale db version)
	CodeUnavailable     Code = "unavailable"      // a backing service failed; retrying may help
	CodeInternal        Code = "internal"         // a bug or an unexpected host failure
	// The invocation used up a host budget (bytes the host holds for it, log
	// records, audit rows, open descriptors); the message names the limit and
	// its knob. The next invocation starts with a fresh budget.
	CodeResourceExhausted Code = "resource_exhausted"

	// Failures of a whole invocation, reported by the host to its caller.
	CodeBadModule      Code = "bad_module"       // the bytes are not a valid or usable module
	CodeABIVersion     Code = "abi_version"      // the guest speaks another ABI version
	CodeNoSuchAction   Code = "no_such_action"   // the module does not export the action
	CodeInputTooLarge  Code = "input_too_large"  // the input exceeds the invoke's cap
	CodeOutputTooLarge Code = "output_too_large" // the output exceeds the invoke's cap
	CodeTimeout        Code = "timeout"          // the wall-clock deadline passed
	CodeCanceled       Code = "canceled"         // the caller canceled the invocation
	CodeMemoryLimit    Code = "memory_limit"     // the guest tried to grow memory past its limit
	CodeTrap           Code = "trap"             // the guest trapped or exited during an action
	CodeGuestFault     Code = "guest_fault"      // the guest broke the ABI (bad pointer, bad reply)
	CodeGuestError     Code = "guest_error"      // the action returned an error of its own

	// Policy outcomes of an invocation.
	CodeConfirmationRequired Code = "confirmation_required" // the action (or a sensitive op) must be confirmed first
	CodeRateLimited          Code = "rate_limited"          // the module's calls-per-minute limit is used up
)

// Error is the wire form of a failure: an op's error reply, or an action's
// error output.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode is the error's Code, so that CodeOf finds it.
func (e *Error) ErrorCode() Code { return e.Code }

// CodeOf returns the Code err carries: that of the first error in its
// chain (errors.As order, outermost first) with an ErrorCode() Code
// method, such as an *Error, a host.Error or a policy.DeniedError; "" when
// none has one. It is the one derivation of a code from an error: each
// boundary (an op's reply, an HTTP status, moat's exit status, the audit
// trail, the metrics) maps the code, never the error's type, so an error
// that carries a code keeps it however it is wrapped.
func CodeOf(err error) Code {
	var c interface{ ErrorCode() Code }
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return ""
}

// AsError is err as the wire's *Error: the *Error itself when that is
// what gives err its code (CodeOf), else an *Error with err's code and
// message; an error without a code is CodeInternal.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var c interface{ ErrorCode() Code }
	if !errors.As(err, &c) {
		return &Error{Code: CodeInternal, Message: err.Error()}
	}
	if e, ok := c.(*Error); ok {
		if e.Code == "" {
			return &Error{Code: CodeInternal, Message: e.Message}
		}
		return e
	}
	code := c.ErrorCode()
	if code == "" {
		code = CodeInternal
	}
	return &Error{Code: code, Message: err.Error()}
}
