package host

import (
	"context"
	"fmt"
	"syscall"

	"github.com/moat-sandbox/moat/host/transport"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// A full disk under a granted directory must read to the guest as what it
// is. wazero's filesystem interface names twenty errnos, and WASI's
// functions turn every other into EIO: a guest whose write failed for
// want of space saw an I/O error, which a program retries, reports as
// corruption, or cannot tell apart from a failing disk. The granted
// directory (grantfs) tells the invocation of an errno it lost that way
// (grantfs.UnnamedErrnoReporter: ENOSPC, EDQUOT, EFBIG); the WASI
// functions that write wrap wazero's own and, when theirs returned EIO
// for such an errno, return WASI's own number for it instead.

// WASI preview 1's numbers (wasi_snapshot_preview1 errno).
const (
	wasiEIO    = 29
	wasiEFAULT = 21
	wasiEDQUOT = 19
	wasiEFBIG  = 22
	wasiENOSPC = 51
)

// wasiWriting are the WASI functions whose failure can be for want of
// space: writes, allocations, truncation, syncs and closes (write-back),
// and whatever makes a name or an inode.
var wasiWriting = []string{
	"fd_write", "fd_pwrite", "fd_allocate", "fd_filestat_set_size", "fd_sync", "fd_datasync", "fd_close",
	"fd_filestat_set_times", "path_open", "path_create_directory", "path_rename", "path_link", "path_symlink",
	"path_filestat_set_times",
}

// instantiateWASI adds wazero's WASI preview 1 to r as the host serves
// it: poll_oneoff takes absolute clock subscriptions and bounds every
// timeout (wasipoll.go), and the functions of wasiWriting give an errno
// wazero cannot name its number (above). An interpreter with a runtime of
// its own (Ruby's) is handed it (driver.InterpreterEnv.InstantiateWASI),
// so that a sleep behaves the same in every language.
func instantiateWASI(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	cm, err := b.Compile(ctx)
	if err != nil {
		return err
	}
	defer cm.Close(ctx)
	defs := cm.ExportedFunctions()
	goFunc := func(name string) (api.FunctionDefinition, api.GoModuleFunction, error) {
		def, ok := defs[name]
		if !ok {
			return nil, nil, fmt.Errorf("WASI has no function %s to wrap", name)
		}
		orig, ok := def.GoFunction().(api.GoModuleFunction)
		if !ok {
			return nil, nil, fmt.Errorf("WASI's %s is not a Go function the host can wrap", name)
		}
		return def, orig, nil
	}
	export := func(name string, def api.FunctionDefinition, fn api.GoModuleFunction) {
		b.NewFunctionBuilder().WithGoModuleFunction(fn, def.ParamTypes(), def.ResultTypes()).
			WithParameterNames(def.ParamNames()...).WithResultNames(def.ResultNames()...).Export(name)
	}
	for _, name := range wasiWriting {
		def, orig, err := goFunc(name)
		if err != nil {
			return err
		}
		export(name, def, unnamedErrno(orig))
	}
	pollDef, poll, err := goFunc("poll_oneoff")
	if err != nil {
		return err
	}
	_, clock, err := goFunc("clock_time_get")
	if err != nil {
		return err
	}
	export("poll_oneoff", pollDef, absoluteClock(poll, clock))
	_, err = b.Instantiate(ctx)
	return err
}

// unnamedErrno wraps a WASI function: an EIO it returns for an errno the
// invocation's granted directory reported becomes that errno.
func unnamedErrno(orig api.GoModuleFunction) api.GoModuleFunction {
	return api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		slot := errnoSlotOf(ctx)
		if slot != nil {
			*slot = 0
		}
		orig.Call(ctx, mod, stack)
		if slot == nil || *slot == 0 || uint32(stack[0]) != wasiEIO {
			return
		}
		switch *slot {
		case syscall.ENOSPC:
			stack[0] = wasiENOSPC
		case syscall.EDQUOT:
			stack[0] = wasiEDQUOT
		case syscall.EFBIG:
			stack[0] = wasiEFBIG
		}
		*slot = 0
	})
}

// errnoSlotOf is where the filesystems of a guest call's context report
// an errno WASI's functions would turn into EIO: the invocation's, or,
// for a runtime of a driver's own, the slot a ScratchFS attached.
func errnoSlotOf(ctx context.Context) *syscall.Errno {
	if inv := invocationOf(ctx); inv != nil {
		return &inv.fsErrno
	}
	if s, ok := ctx.Value(errnoSlotKey{}).(*syscall.Errno); ok {
		return s
	}
	return nil
}

type errnoSlotKey struct{}

// invocationOf is the invocation a guest call's context serves, or nil.
func invocationOf(ctx context.Context) *invocation {
	s := transport.SessionOf(ctx)
	if s == nil {
		return nil
	}
	if inst, ok := s.Dispatcher.(*instance); ok {
		return &inst.invocation
	}
	return nil
}
