package wasmrewrite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// The runtime's half of the deadline contract: the function a module
// rewritten by InstrumentDeadline imports. It lives beside the rewrite,
// not in the host, because the two are one contract (the import's name
// and type, what its result means, when it may end the guest) and the
// rewrite's tests run rewritten modules against it.

// InstantiateYield adds to r the host module InterruptModule, whose
// function InterruptYield every module rewritten by InstrumentDeadline
// imports. A runtime compiling rewritten modules instantiates it once.
func InstantiateYield(ctx context.Context, r wazero.Runtime) error {
	_, err := r.NewHostModuleBuilder(InterruptModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(Yield), nil, []api.ValueType{api.ValueTypeI32}).
		WithResultNames("fuel").
		Export(InterruptYield).
		Instantiate(ctx)
	if err != nil {
		return fmt.Errorf("instantiate host module %q: %w", InterruptModule, err)
	}
	return nil
}

// Yield is InterruptModule.InterruptYield: it ends the guest when its
// context is done, its deadline has passed (read here, so that it holds
// even when the timer that would end the context has no processor to run
// on), or its module was closed; otherwise it returns the next fuel,
// FuelPerYield.
func Yield(ctx context.Context, mod api.Module, stack []uint64) {
	if mod.IsClosed() {
		panic(sys.NewExitError(sys.ExitCodeContextCanceled))
	}
	YieldContext(ctx, stack)
}

// YieldContext is Yield without the module: what a runtime that is not
// wazero's host module builder provides (a host's driver, Extism's go-sdk).
// It ends the guest as WASI's proc_exit does, with wazero's exit code for
// a deadline or a cancellation.
func YieldContext(ctx context.Context, stack []uint64) {
	if ctx != nil && ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			panic(sys.NewExitError(sys.ExitCodeDeadlineExceeded))
		}
		panic(sys.NewExitError(sys.ExitCodeContextCanceled))
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		panic(sys.NewExitError(sys.ExitCodeDeadlineExceeded))
	}
	stack[0] = FuelPerYield
}
