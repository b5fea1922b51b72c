package host

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/policy"
)

// kindUpper is a kind of module only this test knows: no WebAssembly, an
// action that upper-cases its input and one that reads its config
// through the op table.
const kindUpper Kind = "test-upper"

// upperRuntime serves kindUpper's calls.
type upperRuntime struct {
	m      *Module
	closed bool
}

func (r *upperRuntime) call(_, deadline context.Context, req *Request, idx uint32, lim Limits, confirmed bool) ([]byte, string, error) {
	switch r.m.acts.names[idx] {
	case "upper":
		return bytes.ToUpper(req.Input), "", nil
	default: // "config": the op gate, as a guest's op would reach it
		inv := &invocation{m: r.m, env: r.m.newEnv(), confirmed: confirmed}
		inv.env.Begin(deadline, req.Action, req.Principal, req.CorrelationID)
		reply, err := inv.Dispatch(deadline, []byte(abi.OpConfigGet), []byte(`{"key":"greeting"}`))
		return reply, inv.needsConfirm, err
	}
}

func (r *upperRuntime) close(context.Context) error { r.closed = true; return nil }

var _ moduleRuntime = (*upperRuntime)(nil)

// TestLoaderTableExtension proves the extension point of runtimes: a kind
// of module added in this file only, by a loader in the table and a
// runtime, is loaded through Host.Load's shared stages (its name, the
// signature rule, the policy, the limits, the audit) and invoked through
// Module.Invoke's gate, granted and denied, with nothing of host changed.
func TestLoaderTableExtension(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rt *upperRuntime
	upper := &loader{
		kinds: []Kind{kindUpper},
		match: func(wasm []byte, opts LoadOptions) bool {
			return opts.Manifest != nil && opts.Manifest.Kind == policy.Kind(kindUpper)
		},
		check: func(ld *loading) error {
			if err := ld.nameFromManifest(); err != nil {
				return err
			}
			ld.digest, ld.signed = Digest([]byte(ld.name)), []byte(ld.name)
			return nil
		},
		prepare: func(_ context.Context, ld *loading) error {
			ld.kind, ld.m.info = kindUpper, Info{Name: ld.name, Digest: ld.digest}
			return nil
		},
		start: func(_ context.Context, ld *loading) (moduleRuntime, []string, error) {
			rt = &upperRuntime{m: ld.m}
			return rt, []string{"upper", "config"}, nil
		},
	}
	saved := loaders
	loaders = append([]*loader{upper}, loaders...)
	t.Cleanup(func() { loaders = saved })

	h, err := New(ctx, Config{DataDir: t.TempDir(), CacheDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	mf := &policy.Manifest{Name: "shout", Version: "1.0.0", Kind: policy.Kind(kindUpper),
		Config:  map[string]string{"greeting": "hello"},
		Actions: []policy.Action{{Name: "upper"}, {Name: "config"}, {Name: "admin-upper", Export: "upper", Roles: []string{"admin"}}}}
	m, err := h.Load(ctx, nil, LoadOptions{Manifest: mf, CorrelationID: "load-1"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind() != kindUpper || !slices.Equal(m.Actions(), []string{"upper", "config", "admin-upper"}) {
		t.Fatalf("Kind %q, Actions %q", m.Kind(), m.Actions())
	}
	alice := policy.Principal{User: "alice", Org: "acme", Roles: []string{"user"}}
	res, err := m.Invoke(ctx, Request{Action: "upper", Input: []byte("hi"), Principal: alice, CorrelationID: "c-upper"})
	if err != nil || string(res.Output) != "HI" {
		t.Fatalf("upper: %q, %v", res.Output, err)
	}
	res, err = m.Invoke(ctx, Request{Action: "config", Principal: alice, CorrelationID: "c-config"})
	if err != nil || !bytes.Contains(res.Output, []byte("hello")) {
		t.Fatalf("config through the op gate: %q, %v", res.Output, err)
	}
	// The gate is Module's, whatever the runtime: a role the caller lacks
	// is refused before the runtime runs; an action it does not register
	// is no action; Run is for commands only.
	if _, err := m.Invoke(ctx, Request{Action: "admin-upper", Input: []byte("x"), Principal: alice, CorrelationID: "c-denied"}); abi.CodeOf(err) != abi.CodeDenied {
		t.Errorf("admin-upper as a user: %v, want denied", err)
	}
	if _, err := m.Invoke(ctx, Request{Action: "nope", Principal: alice}); abi.CodeOf(err) != abi.CodeNoSuchAction {
		t.Errorf("an unknown action: %v, want no_such_action", err)
	}
	if _, err := m.Run(ctx, RunRequest{Principal: alice}); abi.CodeOf(err) != abi.CodeNoSuchAction {
		t.Errorf("Run of a module with actions: %v, want no_such_action", err)
	}
	if err := h.audit.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := h.audit.Query(ctx, audit.Filter{Module: "shout", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, e := range evs {
		seen[string(e.Kind)+" "+e.CorrelationID] = string(e.Decision)
	}
	for _, want := range []string{"load load-1", "invocation c-upper", "invocation c-config", "decision c-denied"} {
		if _, ok := seen[want]; !ok {
			t.Errorf("no %s event in the audit trail; it has %v", want, seen)
		}
	}
	if err := m.Close(ctx); err != nil || !rt.closed {
		t.Errorf("Close: %v, runtime closed %v", err, rt.closed)
	}
}

// TestFileGrantsOwnerReleasedOnce: the module's reference to its granted
// directories goes once however often it is dropped (a failed load's
// cleanup, then Close), so an instance still running keeps them open.
func TestFileGrantsOwnerReleasedOnce(t *testing.T) {
	t.Parallel()
	fg := &fileGrants{refs: 1, owned: true}
	if !fg.acquire() { // an instance's
		t.Fatal("acquire refused while the module holds its reference")
	}
	fg.releaseOwner()
	fg.releaseOwner()
	if fg.refs != 1 {
		t.Fatalf("refs = %d after the owner let go twice; want the instance's 1", fg.refs)
	}
	fg.release()
	if fg.refs != 0 {
		t.Fatalf("refs = %d; want 0", fg.refs)
	}
	var none *fileGrants
	none.releaseOwner() // a module with no grants
}
