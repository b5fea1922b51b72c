package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/moat-sandbox/moat/internal/atomicfile"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
)

// Stopping a guest that never returns: the host compiles every module
// rewritten by wasmrewrite.InstrumentDeadline (a counter checked at loop
// headers, function entries and bulk operations, which calls the host's
// yield once every wasmrewrite.FuelPerYield units; the package's doc says
// why a call and not wazero's CloseOnContextDone). This file is the host's
// side of it: the rewrite kept on disk, the yield module in every runtime
// (New: wasmrewrite.InstantiateYield), the start functions called under
// the invocation's context, and what a driver is handed (driver.Spec).

// hostCloseOnContextDone is the host runtime's CloseOnContextDone: off,
// since the checks at loop headers do its work. It is part of the key of
// shared compiled code (codeshare.Fingerprint): wazero's code differs
// with it.
const hostCloseOnContextDone = false

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// rewrittenDir is where, under the cache directory, the host keeps the
// modules it rewrote.
const rewrittenDir = "rewritten"

// rewrite returns the bytes the host compiles for the module whose digest
// is digest, bounded to tableCap (the table pass's output, bounded, and
// what it read, lay), and the compilation's key. Rewriting CPython's 26
// MB takes ~40 ms, and hashing the result for a key ~60 ms more, on every
// load, where a cold `moat exec --lang python` spends ~100 ms in all; so
// the key is the digest the load has already computed with what decides
// the rewrite, and the rewritten bytes are kept under the cache directory
// (a file per module, as wazero keeps its compiled code beside it, and
// trusted as much: both are the host's own, mode 0600 in a 0700
// directory). A file that cannot be read or written costs the rewrite,
// never the load.
func (h *Host) rewrite(digest string, tableCap uint32, bounded []byte, lay *wasmrewrite.Layout, toolchain bool) (code []byte, key string, err error) {
	key = fmt.Sprintf("%s-tables%d-%s", digest, tableCap, wasmrewrite.DeadlineVersion)
	path := filepath.Join(h.codeDir(toolchain), rewrittenDir, key+".wasm")
	if b, err := os.ReadFile(path); err == nil && len(b) >= len(bounded)+4 {
		// A CRC-32C of the module ends the file: a torn or damaged file
		// (not an attacker, who could edit wazero's files beside it as
		// well) is rewritten, not compiled. ~3 ms for 26 MB.
		code, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
		if crc32.Checksum(code, castagnoli) == sum {
			return code, key, nil
		}
	}
	if code, err = wasmrewrite.InstrumentDeadline(bounded, lay, false); err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
		_ = atomicfile.Write(path, binary.LittleEndian.AppendUint32(code[:len(code):len(code)], crc32.Checksum(code, castagnoli)))
	}
	return code, key, nil
}

// rewriteForDriver is driver.Spec.Deadline: the rewrite of a module a
// driver runs, its start section kept (the driver instantiates it under
// the call's context).
func rewriteForDriver(wasm []byte) ([]byte, error) {
	lay, err := wasmrewrite.ReadLayout(wasm)
	if err != nil {
		return nil, err
	}
	return wasmrewrite.InstrumentDeadline(wasm, lay, true)
}

// yieldContext is what a driver's runtime provides (driver.Spec.Yield):
// wasmrewrite.YieldContext.
func yieldContext(ctx context.Context, stack []uint64) { wasmrewrite.YieldContext(ctx, stack) }

// startModule runs, under ctx, what instantiation used to run: the function of
// the module's start section (exported as InterruptStartExport by
// wasmrewrite.InstrumentDeadline), then each of the named start functions the module
// exports (_initialize for a reactor, _start for a command). A start
// function that exits with code 0 has succeeded, as wazero's own start
// functions do.
func startModule(ctx context.Context, mod api.Module, names ...string) error {
	for _, name := range append([]string{wasmrewrite.InterruptStartExport}, names...) {
		fn := mod.ExportedFunction(name)
		if fn == nil {
			continue
		}
		if _, err := fn.Call(ctx); err != nil {
			if ee, ok := err.(*sys.ExitError); ok {
				if ee.ExitCode() == 0 {
					return nil
				}
				return err
			}
			if name == wasmrewrite.InterruptStartExport {
				name = "the start function"
			}
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
