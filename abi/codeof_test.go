package abi_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// coded is an error type of some other package that carries a code.
type coded struct {
	code abi.Code
	err  error
}

func (c *coded) Error() string       { return "coded: " + string(c.code) }
func (c *coded) Unwrap() error       { return c.err }
func (c *coded) ErrorCode() abi.Code { return c.code }

// TestCodeOf: the code of an error is found however it is wrapped, and
// the outermost error that carries one decides; AsError keeps the wire
// error itself when it is what gives the code.
func TestCodeOf(t *testing.T) {
	denied := abi.Errorf(abi.CodeDenied, "no")
	for _, tt := range []struct {
		name string
		err  error
		code abi.Code
		wire *abi.Error // nil: a new error with code and err's message
	}{
		{"nil", nil, "", nil},
		{"plain", errors.New("disk on fire"), "", &abi.Error{Code: abi.CodeInternal, Message: "disk on fire"}},
		{"wire error", denied, abi.CodeDenied, denied},
		{"wrapped", fmt.Errorf("kv.get: %w", denied), abi.CodeDenied, denied},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", denied)), abi.CodeDenied, denied},
		{"joined", errors.Join(errors.New("first"), denied), abi.CodeDenied, denied},
		{"wrapped in two at once", fmt.Errorf("%w and %w", errors.New("x"), denied), abi.CodeDenied, denied},
		{"another type's code", fmt.Errorf("load: %w", &coded{code: abi.CodeBadModule}), abi.CodeBadModule, &abi.Error{Code: abi.CodeBadModule, Message: "load: coded: bad_module"}},
		{"the outermost decides", &coded{code: abi.CodeTimeout, err: denied}, abi.CodeTimeout, &abi.Error{Code: abi.CodeTimeout, Message: "coded: timeout"}},
		{"inside another type's", fmt.Errorf("x: %w", &coded{code: abi.CodeGuestError, err: denied}), abi.CodeGuestError, &abi.Error{Code: abi.CodeGuestError, Message: "x: coded: guest_error"}},
		{"an empty code", &coded{}, "", &abi.Error{Code: abi.CodeInternal, Message: "coded: "}},
		{"a wire error without a code", &abi.Error{Message: "m"}, "", &abi.Error{Code: abi.CodeInternal, Message: "m"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := abi.CodeOf(tt.err); got != tt.code {
				t.Errorf("CodeOf = %q, want %q", got, tt.code)
			}
			got := abi.AsError(tt.err)
			switch {
			case tt.wire == nil:
				if got != nil {
					t.Errorf("AsError = %v, want nil", got)
				}
			case tt.wire == denied:
				if got != denied {
					t.Errorf("AsError = %v, want the wire error itself", got)
				}
			case got == nil || *got != *tt.wire:
				t.Errorf("AsError = %+v, want %+v", got, tt.wire)
			}
		})
	}
}
