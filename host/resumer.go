package host

import (
	"context"
	"errors"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/tetratelabs/wazero/api"
)

// Copies of an Interpreter's instances (driver.Resumer: Ruby's).
//
// A script whose Interpreter is a Resumer gets the same capture as one
// with a Snapshot (CaptureResident: the park line on stdout, the clock
// read after it, the instance's memory and exported globals copied
// there), but none of a Snapshot's own images: its instances start as
// the Interpreter starts them (Ruby's from an image of its own), and a
// module loaded with LoadOptions.ResidentImage starts its one instance
// from that copy, entered by the Interpreter (Resumer.Resume) instead of
// a C entry the host calls (enterImage). The entry is the reactor's own
// export, so nothing is found by a marker run, and the compiled module
// is the Interpreter's, named by the bytes' digest: a copy fits every
// module of the same interpreter, in this process or another.

// resumerSuffix names the compiled code of an Interpreter's module in an
// image's key: the Interpreter's runtime compiles the bytes as given.
const resumerSuffix = "-interp"

// fromInterpreter makes a resident script's instances capturable when its
// Interpreter can enter a copy; a load given a ResidentImage starts from
// it. It runs after compileWasm (the globals are the compiled module's).
func (ld *loading) fromInterpreter() error {
	sc := ld.opts.Script
	r, ok := sc.Interpreter.(driver.Resumer)
	if !ok || !sc.Resident || ld.m.code.snap != nil {
		return nil
	}
	s := &snapshotState{spec: Snapshot{Resume: resumerSuffix}, globals: r.CaptureGlobals(ld.m.code.cm), code: ld.digest + resumerSuffix, interp: r, recorded: -1}
	s.scope.org, s.scope.manifest = ld.opts.Org, manifestBytes(ld.opts)
	if ri := ld.opts.ResidentImage; ri != nil {
		if err := ri.fits(s); err != nil {
			return ld.fail(abi.CodeInvalidArgument, err, "resident image: %v", err)
		}
		s.img, s.given = ri.img, true
	}
	ld.m.code.snap = s
	return nil
}

// refuseImage refuses a ResidentImage given to a load whose instances
// cannot start from one (no Snapshot, an Interpreter that is no
// Resumer): started as usual, the copy would silently lack its state.
func (ld *loading) refuseImage() error {
	if ld.opts.ResidentImage == nil || ld.m.code.snap != nil {
		return nil
	}
	err := errors.New("the module's instances cannot start from a resident image: its interpreter has no Snapshot and cannot enter a copy")
	return ld.fail(abi.CodeInvalidArgument, err, "resident image: %v", err)
}

// enterCopy restores img into mod and has the Interpreter enter it.
func (s *snapshotState) enterCopy(ctx context.Context, mod api.Module, img *wasmsnap.Image) error {
	if err := img.Restore(mod); err != nil {
		return err
	}
	return s.interp.Resume(ctx, mod, img.Values)
}

// Capturable reports whether CaptureResident can copy the module's
// resident instances and a module loaded with the copy can start from it:
// a resident script with a resumable Snapshot, or whose Interpreter is a
// driver.Resumer.
func (m *Module) Capturable() bool {
	s := m.code.snap
	return s != nil && s.spec.Resume != "" && m.code.script != nil && m.code.script.Resident
}

// prepareNamed is prepareSnapshot for a Snapshot whose entry the module's
// name section names (EntryName), with RecordName's argument recorded:
// nothing is run to find them.
func prepareNamed(wasm []byte, spec *Snapshot) ([]byte, int, uint32, error) {
	if spec.Key == "" || spec.EntryCall == nil || spec.EntryParams < 1 || (spec.Probe == nil && !spec.CaptureOnly) {
		return nil, 0, 0, errors.New("a Snapshot with an EntryName needs a Key, EntryParams, an EntryCall, and a Probe unless it is CaptureOnly")
	}
	entry, err := wasmsnap.FunctionIndex(wasm, spec.EntryName)
	if err != nil {
		return nil, 0, 0, err
	}
	if spec.RecordName != "" {
		fn, err := wasmsnap.FunctionIndex(wasm, spec.RecordName)
		if err != nil {
			return nil, 0, 0, err
		}
		if wasm, err = wasmsnap.RecordParam(wasm, fn); err != nil {
			return nil, 0, 0, err
		}
	}
	out, globals, err := wasmsnap.Prepare(wasm, map[string]uint32{"run": entry})
	return out, globals, entry, err
}
