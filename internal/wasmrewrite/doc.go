// Package wasmrewrite reads and rewrites the WebAssembly binary a host
// compiles, before wazero sees it: the mechanisms behind two limits that
// wazero v1.12 gives an embedder no option for.
//
//   - ReadLayout reads a module's sections and checks every count and
//     length it declares against the bytes that follow (wazero allocates
//     by a declared count before reading the entries), in the order wazero
//     reads them, so the module read here is the module wazero compiles.
//     Layout holds what a host needs of it: the imports that are not
//     functions, the memory, and CheckCounts, the caps on entries per
//     section.
//   - LimitTables gives every table a maximum so that a module's tables
//     hold at most a cap of references together (a table is a Go slice
//     no memory limit sees), or refuses the module with a *TableLimitError.
//   - InstrumentDeadline adds a fuel counter checked at every loop header
//     and at the entry of every function that calls, charges every bulk
//     operation by its length, and turns the start section into the export
//     InterruptStartExport, so that a deadline stops a guest that never
//     calls out, at a fraction of what wazero's CloseOnContextDone costs.
//     The contract with the runtime: the module imports
//     InterruptModule.InterruptYield, () -> i32, called once every
//     FuelPerYield units; it returns the next fuel or ends the guest, and
//     InstantiateYield, Yield and YieldContext are that function.
//
// Only the compiled copy is rewritten: a module's digest and signature stay
// those of its author's bytes. The host keeps what it rewrote on disk,
// keyed by DeadlineVersion.
//
// Why a package of its own, and internal: it is ~2k lines of binary format
// reading with its own fuzz targets (FuzzLimitTables, FuzzInstrumentDeadline,
// both differential against wazero), reading bytes anyone can upload before
// anything else does; it needs nothing of the host but a wazero runtime for
// the yield function, and nothing of it is an embedder's concern. As in
// wazero, where such code lives under internal/, it can change with the
// host without a compatibility promise.
package wasmrewrite
