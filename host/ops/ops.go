// Package ops is moat's op table: every op a guest can call, each a small
// function over an Env that the host fills for the current invocation. Op
// families register themselves from their own file (log.go, config.go,
// kv.go, ...), so adding a family is one new file and no edits elsewhere.
//
// An op sees only what Env gives it: the caller's principal, the module's
// name and configuration, the store scoped by the principal's organization,
// and a logger already tagged with the invocation. It cannot reach another
// organization's data because it is never handed a way to name one.
package ops

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// Env is what an op may use. The host reuses one Env per live instance and
// refills it for each invocation; an op must not keep it after returning.
type Env struct {
	Context       context.Context
	Module        string // the module's name, which scopes its storage
	Digest        string // sha256 of the module bytes, hex
	Action        string
	Principal     policy.Principal
	CorrelationID string
	Config        map[string]string
	Store         *store.Store
	Logger        *slog.Logger // the host's logger, untagged; use Log()
	DiskQuota     int64        // bytes of stored keys and values allowed per org and module; 0: none

	tagged *slog.Logger
}

// Begin refills the per-invocation fields of a reused Env.
func (e *Env) Begin(ctx context.Context, action string, p policy.Principal, correlationID string) {
	e.Context, e.Action, e.Principal, e.CorrelationID, e.tagged = ctx, action, p, correlationID, nil
}

// Log returns the host's logger tagged with the module, action, principal
// and correlation id. It is built on first use because most invocations
// never log, and tagging costs allocations.
func (e *Env) Log() *slog.Logger {
	if e.tagged == nil {
		e.tagged = e.Logger.With(
			slog.String("module", e.Module),
			slog.String("action", e.Action),
			slog.String("user", e.Principal.User),
			slog.String("org", e.Principal.Org),
			slog.String("correlation_id", e.CorrelationID),
		)
	}
	return e.tagged
}

// Scope is the storage scope of the invocation: the caller's organization
// and the module.
func (e *Env) Scope() store.Scope {
	return store.Scope{Org: e.Principal.Org, Module: e.Module}
}

// Func runs an op on the wire bytes of its request and returns the wire
// bytes of its reply. An *abi.Error return reaches the guest with its code.
type Func func(env *Env, req []byte) ([]byte, error)

// Op describes one entry of the table.
type Op struct {
	Name string
	Func Func
	// Mutates is true for ops that change stored state; LeavesSandbox for
	// ops that reach outside the host (network, AI). Policy and audit use
	// them to decide which calls to record.
	Mutates       bool
	LeavesSandbox bool
}

var (
	mu    sync.RWMutex
	table = map[string]*Op{}
)

// Register adds op to the table. It panics on a duplicate or empty name:
// both are programming errors caught when the binary starts.
func Register(op Op) {
	if op.Name == "" || op.Func == nil {
		panic("ops: Register needs a name and a func")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := table[op.Name]; dup {
		panic(fmt.Sprintf("ops: op %q registered twice", op.Name))
	}
	table[op.Name] = &op
}

// Lookup finds an op by its wire name without allocating.
func Lookup(name []byte) (*Op, bool) {
	mu.RLock()
	op, ok := table[string(name)]
	mu.RUnlock()
	return op, ok
}

// Names lists the registered ops, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Typed adapts a function over decoded request and reply types to a Func,
// so each op is written against abi's types and never touches the wire.
func Typed[Req, Resp any](f func(env *Env, req *Req) (*Resp, error)) Func {
	return func(env *Env, b []byte) ([]byte, error) {
		var req Req
		if err := abi.Unmarshal(b, &req); err != nil {
			return nil, err
		}
		resp, err := f(env, &req)
		if err != nil {
			return nil, err
		}
		return abi.Marshal(resp)
	}
}

// storeError keeps an *abi.Error from the store (validation) and turns any
// other store failure into abi.CodeUnavailable without leaking paths or SQL
// to the guest; the full error goes to the host log.
func storeError(env *Env, op string, err error) error {
	if e, ok := err.(*abi.Error); ok {
		return e
	}
	env.Log().Error("store failure", "op", op, "err", err)
	return &abi.Error{Code: abi.CodeUnavailable, Message: op + ": storage is unavailable"}
}
