// Package driver is the host's service provider interface: how another
// package runs a kind of module the host does not run itself (a Driver:
// Extism plug-ins, host/extism), or starts an interpreter that is not a
// WASI command (an Interpreter: Ruby's reactor, languages/ruby), while the
// host keeps everything around the call: the manifest and profile, the
// principal's authorization, confirmations, concurrency and rate limits,
// the op table with its checks, and the audit trail.
//
// The host imports this package and no implementation of it; drivers
// register themselves (Register), as database/sql drivers do, so adding a
// kind edits no list of the host's.
//
// Experimental: as wazero's experimental packages, this interface serves
// the implementations in this module (host/extism, the host's native
// plugins, languages/ruby) and changes with them, without notice. Another
// module may implement it at its own risk.
//
// The embedding API (load a module, invoke its actions) is package host's;
// the types both speak live here because the host imports this package:
// Limits and Signature, which host re-exports under the same names.
package driver

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/internal/kinds"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"
)

// Driver loads modules of one foreign kind.
type Driver interface {
	// Recognizes reports whether a module that imports imports is of the
	// driver's kind (Extism's: it imports extism:host/env). A module whose
	// manifest names the kind (kind: NAME) is the driver's whatever it
	// imports.
	Recognizes(imports []Signature) bool
	// Load prepares a module to be called: compile it, check its imports,
	// list its functions. It runs once per host.Load, after the signature
	// and, for declared modules, the policy were checked.
	Load(ctx context.Context, spec Spec) (Runner, error)
}

// Spec is what a driver gets for one module.
type Spec struct {
	Name    string
	Digest  string
	Wasm    []byte
	Imports []Signature // as the host read them
	Exports []Signature
	// MemoryMin is the module's declared initial memory, in pages.
	MemoryMin uint32
	Config    map[string]string // the manifest's config, then the load's
	Limits    Limits            // the module's limits (a call may lower them)
	// Fresh: each call gets an instance of its own, discarded after it
	// (the load's isolation is fresh); else instances are pooled, at
	// most MaxIdle idle.
	Fresh   bool
	MaxIdle int
	// Cache is the host's compilation cache, so a driver's runtime shares
	// machine code on disk with the host's.
	Cache  wazero.CompilationCache
	Logger *slog.Logger
	// Deadline rewrites a module (Wasm, or Wasm as the driver changed it)
	// as the host rewrites the modules it runs itself: every loop header,
	// every entry of a function that calls and every bulk operation
	// counts toward a call of InterruptModule.InterruptYield, which the
	// module then imports and the driver must provide with Yield. A
	// runtime's CloseOnContextDone checks only at loop headers: a tree of
	// calls with no loop (2^60 calls at a depth of 61) ran past every
	// deadline. The start section stays where it is: a driver
	// instantiates under the call's context, and a start function's
	// checks read it.
	Deadline func(wasm []byte) ([]byte, error)
	// Yield implements InterruptModule.InterruptYield: it ends the guest
	// (a panic wazero turns into the call's error) once ctx is done or
	// past its deadline, and otherwise puts the next fuel in stack[0].
	Yield func(ctx context.Context, stack []uint64)
	// Nanosleep makes the sleep of the host's WASI for
	// wazero.ModuleConfig.WithNanosleep: it sleeps at most until the
	// context current returns is done, and then ends the guest with
	// sys.ExitCodeDeadlineExceeded (or ExitCodeContextCanceled). current
	// is asked on every sleep, because a pooled instance serves one call
	// after another; a nil context sleeps unbounded.
	Nanosleep func(current func() context.Context) sys.Nanosleep
}

// Runner is a loaded foreign module. It must be safe for concurrent use.
type Runner interface {
	// Functions lists what the module offers as actions, in a stable order.
	Functions() []string
	// Call runs call.Function. It returns the output, or an *Error
	// whose Code says what went wrong (timeout, memory_limit,
	// guest_error, ...); the host names the module and the action, and
	// reports any other error as internal. Ops the guest calls go through call.Dispatch; its network
	// requests through call.Fetch.
	Call(ctx context.Context, call *Call) ([]byte, error)
	// Close releases the module's instances and compiled code.
	Close(ctx context.Context) error
}

// Call is one invocation of a foreign module, as its driver sees it.
type Call struct {
	Action        string // the action as the caller named it
	Function      string // the module's function that runs it
	Input         []byte
	Principal     policy.Principal
	CorrelationID string
	Limits        Limits // the limits of this call, already resolved
	// Gate is the host's side of the call: every op and request of the
	// guest goes through it (Dispatch, Fetch), and its records through
	// Log. The host sets it; a driver only calls it.
	Gate
}

// Gate is the host's side of one call: the op table with its checks, the
// module's one HTTP client, and the logger, each bound to the call's
// principal, grants, budget and audit trail.
type Gate interface {
	// Dispatch runs one op of the op table for the guest, exactly as the
	// moat import does: the module's effective grants, the profile's
	// sensitive ops, the caller's principal and organization, and the
	// audit trail. An *abi.Error return is for the guest; the invocation
	// goes on. As on every transport, a request over abi.MaxRequestBytes
	// is refused with too_large, and once the invocation's audit budget is
	// used up every op is refused with resource_exhausted before it runs.
	Dispatch(ctx context.Context, op, req []byte) ([]byte, error)
	// Fetch sends the guest's request exactly as the http.fetch op does:
	// each hop checked against the module's effective http targets and
	// the profile's sensitive ops, each connection's address checked when
	// dialled, the headers the grants inject added and scrubbed from the
	// reply, every hop and refusal in the audit trail (op http.fetch),
	// and the body charged to the invocation's held bytes while it is
	// read. A refusal is an *abi.Error for the guest; once the
	// invocation's deadline passed, ctx.Err() is set too.
	Fetch(ctx context.Context, req *abi.HTTPFetchRequest, o HTTPOptions) (*abi.HTTPFetchResponse, error)
	// Log is the host's logger tagged with the invocation: module,
	// action, principal and correlation id.
	Log() *slog.Logger
}

// HTTPOptions say how a driver's own request (Extism's http_request) is
// named in messages and what bounds its reply; see Gate.Fetch.
type HTTPOptions struct {
	// Label names the request in messages ("http_request").
	Label string
	// MaxBytes bounds the response body.
	MaxBytes int64
	// TooLarge is the refusal of a body of n bytes or more past MaxBytes
	// (nil: one naming MaxBytes).
	TooLarge func(n int64) error
}

// Error is a driver's failure: what kind (an abi.Code) and why. The host
// reports it as its own error, naming the module and the action.
type Error struct {
	Code   abi.Code
	Reason string
	Err    error // the underlying cause, if any
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Reason) }

func (e *Error) Unwrap() error { return e.Err }

// ErrorCode is e's Code, for abi.CodeOf.
func (e *Error) ErrorCode() abi.Code { return e.Code }

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes d run modules of kind, the name a manifest gives it
// (kind: NAME) and the module's Info.Kind. It panics if d is nil or kind
// is already taken, by a driver or by a kind the host runs itself: both
// are programming errors.
func Register(kind string, d Driver) {
	if d == nil {
		panic(fmt.Sprintf("driver: Register(%q): the driver is nil", kind))
	}
	kinds.Claim(kind, fmt.Sprintf("the driver %T", d))
	driversMu.Lock()
	defer driversMu.Unlock()
	drivers[kind] = d
}

// Lookup returns the driver of kind, if one is registered.
func Lookup(kind string) (Driver, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	d, ok := drivers[kind]
	return d, ok
}

// Recognize returns the kind of the registered driver that recognizes a
// module importing imports, or "" when none does.
func Recognize(imports []Signature) string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	for kind, d := range drivers {
		if d.Recognizes(imports) {
			return kind
		}
	}
	return ""
}

// Limits bound one invocation. Zero fields take the defaults: the
// module's, then the host's, then host.DefaultLimits.
type Limits struct {
	Timeout          time.Duration // wall clock, including instance creation
	MemoryLimitPages uint32        // linear memory, 64 KiB pages
	MaxInputBytes    int
	MaxOutputBytes   int
	// MaxTableElements bounds the references all of a module's tables
	// may hold together (8 bytes of host memory each, which no memory
	// limit counts): a table declaring more at its minimum is refused at
	// load, and table.grow past it returns -1. It is applied when the
	// module is compiled, so it is taken from the host's Config.Limits
	// and LoadOptions.Limits; a Request's or RunRequest's is ignored.
	MaxTableElements uint32
	// Budget bounds what the host holds and writes for one invocation:
	// transport buffers, open descriptors of the device file, log
	// records, audit rows, HTTP bodies. Zero fields keep the module's,
	// then budget.DefaultLimits. (Added by the budget work, issue 12.)
	Budget budget.Limits
}

// Or returns l with each zero field taken from d.
func (l Limits) Or(d Limits) Limits {
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.MemoryLimitPages == 0 {
		l.MemoryLimitPages = d.MemoryLimitPages
	}
	if l.MaxInputBytes <= 0 {
		l.MaxInputBytes = d.MaxInputBytes
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = d.MaxOutputBytes
	}
	if l.MaxTableElements == 0 {
		l.MaxTableElements = d.MaxTableElements
	}
	l.Budget = l.Budget.Or(d.Budget)
	return l
}

// Signature is one imported or exported function.
type Signature struct {
	Module string   `json:"module,omitempty"` // imports only
	Name   string   `json:"name"`
	Params []string `json:"params"`
	Result []string `json:"results"`
}

func (s Signature) String() string {
	name := s.Name
	if s.Module != "" {
		name = s.Module + "." + s.Name
	}
	return fmt.Sprintf("%s(%s) -> (%s)", name, strings.Join(s.Params, ", "), strings.Join(s.Result, ", "))
}
