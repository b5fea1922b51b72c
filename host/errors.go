package host

import (
	"fmt"
	"slices"

	"github.com/moat-sandbox/moat/abi"
)

// Error is every failure of Load, Invoke and Run: which module and action,
// what kind of failure (an abi.Code), and why. Callers switch on Code, or
// use errors.Is with the sentinels below.
type Error struct {
	Module string
	Action string
	Code   abi.Code
	Reason string
	Err    error // the underlying cause, if any
	// Confirmation is set when Code is confirmation_required.
	Confirmation *ConfirmationRequest

	// decided: the error is the host's own refusal, already in the audit
	// trail as the decision that made it, so the invocation's outcome is
	// not recorded a second time. A guest's error never is, whatever its
	// code.
	decided bool
}

// hostOnlyCodes carry decisions only the host makes: a guest failing with
// one (confirmation_required with no token, rate_limited that tells the
// client to retry later) would make a caller act on a decision nobody
// made. A guest's error with such a code is reported as guest_error.
var hostOnlyCodes = []abi.Code{abi.CodeConfirmationRequired, abi.CodeRateLimited, abi.CodeResourceExhausted}

// guestFailure is the *Error of an action that failed with the guest's
// own code and message.
func guestFailure(module, action string, code abi.Code, message string, cause error) *Error {
	if slices.Contains(hostOnlyCodes, code) {
		return &Error{Module: module, Action: action, Code: abi.CodeGuestError, Err: cause,
			Reason: fmt.Sprintf("the action failed with code %s, which only the host gives: %s", code, message)}
	}
	return &Error{Module: module, Action: action, Code: code, Reason: message, Err: cause}
}

func (e *Error) Error() string {
	var where string
	if e.Module != "" {
		where = "module " + e.Module + ": "
	}
	if e.Action != "" {
		where += "action " + e.Action + ": "
	}
	return fmt.Sprintf("%s%s: %s", where, e.Code, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches a sentinel (an *Error with only a Code) by code, so
// errors.Is(err, host.ErrTimeout) works whatever the module and action.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Module == "" && t.Action == "" && t.Reason == "" && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrBadModule      = &Error{Code: abi.CodeBadModule}
	ErrABIVersion     = &Error{Code: abi.CodeABIVersion}
	ErrNoSuchAction   = &Error{Code: abi.CodeNoSuchAction}
	ErrInputTooLarge  = &Error{Code: abi.CodeInputTooLarge}
	ErrOutputTooLarge = &Error{Code: abi.CodeOutputTooLarge}
	ErrTimeout        = &Error{Code: abi.CodeTimeout}
	ErrCanceled       = &Error{Code: abi.CodeCanceled}
	ErrMemoryLimit    = &Error{Code: abi.CodeMemoryLimit}
	ErrTrap           = &Error{Code: abi.CodeTrap}
	ErrGuestFault     = &Error{Code: abi.CodeGuestFault}
	ErrGuestError     = &Error{Code: abi.CodeGuestError}
	ErrInvalidRequest = &Error{Code: abi.CodeInvalidArgument}
	ErrDenied         = &Error{Code: abi.CodeDenied}
	ErrNeedsConfirm   = &Error{Code: abi.CodeConfirmationRequired}
	ErrRateLimited    = &Error{Code: abi.CodeRateLimited}
)

// ErrorCode is e's Code, for abi.CodeOf.
func (e *Error) ErrorCode() abi.Code { return e.Code }
