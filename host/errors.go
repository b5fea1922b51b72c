package host

import (
	"errors"
	"fmt"

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

// CodeOf returns the abi.Code of err, or "" when err is not a moat error.
func CodeOf(err error) abi.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
