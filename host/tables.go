package host

import "github.com/moat-sandbox/moat/internal/wasmrewrite"

// A table is the one part of a WebAssembly instance wazero does not let an
// embedder bound (a Go slice of 8-byte references, sized by the module's
// declaration): before compiling, Load bounds every table of a module so
// that together they hold at most Limits.MaxTableElements references
// (wasmrewrite.LimitTables, whose doc says how), and refuses a module whose
// tables need more at their minimum. Only the compiled copy is rewritten;
// the module's digest and signature stay those of its author's bytes.

// DefaultMaxTableElements is the default of Limits.MaxTableElements:
// 2^20 references, 8 MiB of host memory. Real modules stay far below it
// (CPython 3.12: 5 903, ruby.wasm: 8 776, QuickJS: 546).
const DefaultMaxTableElements = wasmrewrite.DefaultMaxTableElements

// MaxTableElementsCeiling is the most Limits.MaxTableElements may be set
// to: wazero's own bound on a table's size (2^27 references, 1 GiB).
const MaxTableElementsCeiling = wasmrewrite.MaxTableElementsCeiling

// TableLimitError is a module whose tables need more references at their
// minimum than Limits.MaxTableElements allows: what Load's error wraps
// (errors.As) when it refuses one for that.
type TableLimitError = wasmrewrite.TableLimitError
