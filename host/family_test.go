package host_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/driver"
	"github.com/moat-sandbox/moat/policy"
)

// An op family with a lifecycle, added by this file alone, as a family
// with a service is added: its configuration type, its Validate, its
// Provision (which asks the secrets family for its service by name, as
// a family that serves another is asked), its Cleanup, its view of each
// module (Attach: the desk its manifest's config names, refused when too
// long; Detach), its storage (an interface of its own the backend
// implements, registered with driver.RegisterFamily and reached with
// store.FamilyStorage) and its op. No edit to host, policy or the
// server: the host learns of it from ops.RegisterFamily, and its
// configuration reaches it through host.Config.Families["stamp"].
//
// Its capability, stamp, is its own, declared with it: a list of books
// (policy.Named), each stamp.make naming the book it stamps in, which the
// gate checks against the module's grants.

// stampConfig is the stamp family's configuration: what its section of a
// configuration file would hold.
type stampConfig struct {
	Prefix string `yaml:"prefix"` // what every stamp starts with; default "stamp-"
	Start  int    `yaml:"start"`  // the first stamp's number; not negative
}

// stampService is what Provision makes of a stampConfig: one per host.
type stampService struct {
	prefix     string
	next       atomic.Int64
	hasSecrets bool // the secrets family's service was there when asked for
	cleaned    atomic.Bool
}

// stampRequest is stamp.make's request: the book it stamps in, its
// target.
type stampRequest struct {
	Book string `json:"book"`
}

func (r *stampRequest) OpTarget() string { return r.Book }

// stampReply is stamp.make's reply.
type stampReply struct {
	Stamp   string `json:"stamp"`
	Secrets bool   `json:"secrets"`
	Module  string `json:"module"` // from the family's view of the module
	Desk    string `json:"desk"`
}

// stampStorage is the stamp family's storage: an interface of its own,
// beside driver.Backend, which a backend implements or not (SQLite's and
// PostgreSQL's do: it is two of their kv methods). The family keeps each
// organization's last stamp per module in it.
type stampStorage interface {
	KVGet(ctx context.Context, org, module, key string) ([]byte, bool, error)
	KVPut(ctx context.Context, org, module, key string, value []byte, at int64) error
}

// stampView is the stamp family's view of one module (its Attach).
type stampView struct {
	module, desk string
	storage      stampStorage
}

// stampViews counts the views attached and detached, for the test.
var stampViews struct{ attached, detached atomic.Int64 }

// stampServices are the services the family provisioned, for the test to
// look at after a host closed.
var stampServices struct {
	sync.Mutex
	all []*stampService
}

func init() {
	ops.RegisterFamily(ops.Family{
		Name: "stamp", Capability: policy.CapabilitySpec{Name: "stamp", Shape: policy.Named, Target: "book"},
		Config: func() any { return &stampConfig{} },
		Validate: func(cfg any) error {
			if c := cfg.(*stampConfig); c.Start < 0 {
				return fmt.Errorf("stamp.start: %d is negative; give 0 or more", c.Start)
			}
			return nil
		},
		Provision: func(ctx *ops.ProvisionContext, cfg any) (any, error) {
			c := cfg.(*stampConfig)
			s := &stampService{prefix: c.Prefix}
			if s.prefix == "" {
				s.prefix = "stamp-"
			}
			s.next.Store(int64(c.Start))
			sec, err := ctx.Service("secrets")
			if err != nil {
				return nil, err
			}
			s.hasSecrets = sec != nil
			stampServices.Lock()
			stampServices.all = append(stampServices.all, s)
			stampServices.Unlock()
			return s, nil
		},
		Cleanup: func(svc any) error {
			svc.(*stampService).cleaned.Store(true)
			return nil
		},
		Attach: func(ctx *ops.AttachContext, svc any) (any, error) {
			if _, ok := svc.(*stampService); !ok {
				return nil, fmt.Errorf("no stamp service")
			}
			desk := ctx.Module.Manifest.Config["stamp_desk"]
			if len(desk) > 8 {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "config.stamp_desk: %q is longer than 8 characters; name a shorter desk", desk)
			}
			if desk == "" {
				desk = "none"
			}
			storage, err := store.FamilyStorage[stampStorage](ctx.Store, "stamp")
			if err != nil {
				return nil, err
			}
			stampViews.attached.Add(1)
			return &stampView{module: ctx.Module.Name, desk: desk, storage: storage}, nil
		},
		Detach: func(any) { stampViews.detached.Add(1) },
		Ops: []ops.Op{{Name: "stamp.make", Mutates: true,
			Func: ops.Typed(func(env *ops.Env, _ *stampRequest) (*stampReply, error) {
				s, ok := ops.ServiceOf[*stampService](env, "stamp")
				v, ok2 := ops.ViewOf[*stampView](env, "stamp")
				if !ok || !ok2 {
					return nil, abi.Errorf(abi.CodeUnavailable, "stamp.make: this host has no stamp service")
				}
				stamp := fmt.Sprintf("%s%d", s.prefix, s.next.Add(1)-1)
				if err := v.storage.KVPut(env.Context, env.Principal.Org, "stamp:"+v.module, "last", []byte(stamp), time.Now().UnixNano()); err != nil {
					return nil, abi.Errorf(abi.CodeUnavailable, "stamp.make: the stamp was not kept")
				}
				return &stampReply{Stamp: stamp, Secrets: s.hasSecrets, Module: v.module, Desk: v.desk}, nil
			})}},
	})
	if err := driver.RegisterFamily(driver.FamilyOf[stampStorage]("stamp", "host_test.stampStorage")); err != nil {
		panic(err)
	}
}

// secretSource is a SecretSource with none, to be given to the host.
type secretSource struct{}

func (secretSource) Secret(context.Context, string, string) ([]byte, error) {
	return nil, ops.ErrSecretNotFound
}

// TestFamilyLifecycle: the stamp family above, configured through
// host.Config.Families, is validated and provisioned when the host
// starts (with the secrets family's service it asked for), its op is
// granted to a module that requests its capability with a target the
// profile grants and denied otherwise, each decision audited, through
// every transport (the moat import, the device file, Extism's moat_call,
// a native worker's pipe), and its service is cleaned up when the host
// closes. A configuration of the wrong type, for a family
// that does not exist, or that its Validate refuses stops the host from
// starting, saying why.
func TestFamilyLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := policy.ParseProfile("stamp.yaml", []byte("name: stamp\non_ungranted: deny_at_call\ndefault:\n  capabilities: {stamp: [ledger, diary]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Families: map[string]any{"stamp": &stampConfig{Prefix: "S-", Start: 7}, "secrets": &ops.SecretsConfig{Source: secretSource{}}}}
	h, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	stampServices.Lock()
	svc := stampServices.all[len(stampServices.all)-1]
	stampServices.Unlock()

	granted := opTransports(t, h, "stamper", "config: {stamp_desk: front}\ncapabilities: {stamp: [ledger, secret]}", []string{"stamp.make"})
	denied := opTransports(t, h, "nostamp", "", []string{"stamp.make"})
	made := 0
	for name := range granted {
		t.Run(name, func(t *testing.T) {
			for i, tt := range []struct {
				call     func(t *testing.T, cid, op, req string) opOutcome
				book     string
				code     abi.Code
				decision string
			}{
				{granted[name], "ledger", "", audit.Allow},
				{granted[name], "diary", abi.CodeDenied, audit.Deny},  // granted by the profile, not asked for
				{granted[name], "secret", abi.CodeDenied, audit.Deny}, // asked for, not granted
				{denied[name], "ledger", abi.CodeDenied, audit.Deny},  // the module asks for no stamp
			} {
				cid := fmt.Sprintf("stamp-%s-%d", strings.ReplaceAll(name, " ", "-"), i)
				got := tt.call(t, cid, "stamp.make", `{"book":"`+tt.book+`"}`)
				switch {
				case got.code != tt.code:
					t.Errorf("%s: %+v; want code %q", cid, got, tt.code)
				case tt.code == "" && !strings.HasPrefix(got.reply, `{"stamp":"S-`) || tt.code == "" && !strings.Contains(got.reply, `,"secrets":true,"module":"stamper-`) ||
					tt.code == "" && !strings.HasSuffix(got.reply, `,"desk":"front"}`):
					t.Errorf("%s: reply %s; want a stamp S-n made with the secrets family's service, by the module's view (its name, its desk)", cid, got.reply)
				case tt.code == "":
					made++
				}
				evs := auditEvents(t, h, audit.Filter{CorrelationID: cid, Kind: audit.KindOp})
				if len(evs) == 0 {
					t.Fatalf("%s: no op event", cid)
				}
				ev := evs[len(evs)-1]
				if ev.Op != "stamp.make" || ev.Decision != tt.decision || ev.Attrs["target"] != tt.book || ev.User != ann.User || ev.Org != ann.Org ||
					tt.decision == audit.Allow && ev.MutationID == "" {
					t.Errorf("%s: audit event %+v; want stamp.make, %s, target %s", cid, ev, tt.decision, tt.book)
				}
			}
		})
	}
	if n := svc.next.Load(); made == 0 || n != int64(7+made) {
		t.Errorf("%d stamps made through the transports, the service counted to %d from 7", made, n)
	}

	// The family's view is each module's, attached at load and detached
	// when the module closes; a module its Attach refuses does not load,
	// and the refusal is audited with the family's rule.
	attached, detached := stampViews.attached.Load(), stampViews.detached.Load()
	m, err := loadWithManifest(t, h, "name: desk\nversion: 1.0.0\nactions: [{name: call}]\ncapabilities: {stamp: [ledger]}\n")
	if err != nil {
		t.Fatal(err)
	}
	m.Close(ctx)
	if a, d := stampViews.attached.Load()-attached, stampViews.detached.Load()-detached; a != 1 || d != 1 {
		t.Errorf("one module loaded and closed: %d views attached, %d detached; want 1 and 1", a, d)
	}
	_, err = loadWithManifest(t, h, "name: longdesk\nversion: 1.0.0\nactions: [{name: call}]\nconfig: {stamp_desk: much-too-long}\ncapabilities: {stamp: [ledger]}\n",
		func(o *host.LoadOptions) { o.CorrelationID = "load-longdesk" })
	if abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "config.stamp_desk: \"much-too-long\" is longer than 8 characters") {
		t.Errorf("a desk the family refuses: %v", err)
	}
	if evs := auditEvents(t, h, audit.Filter{CorrelationID: "load-longdesk", Kind: audit.KindLoad, Decision: audit.Deny}); len(evs) != 1 || evs[0].Rule != "family stamp" {
		t.Errorf("the refused load's audit: %+v", evs)
	}
	if svc.cleaned.Load() {
		t.Error("the service was cleaned up while the host ran")
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !svc.cleaned.Load() {
		t.Error("the host closed without cleaning up the family's service")
	}

	// Its storage: the stamps it kept, in its own interface of the
	// backend, which the store reports (moat doctor --store) beside
	// moat's own families.
	st, err := store.Open(ctx, cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := store.FamilyStorage[stampStorage](st, "stamp")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := kept.KVGet(ctx, ann.Org, "stamp:stamper-plugin", "last"); err != nil || !ok || !strings.HasPrefix(string(v), "S-") {
		t.Errorf("the last stamp kept for stamper-plugin: %q, %v, %v", v, ok, err)
	}
	if !slices.Contains(st.Families(), store.FamilySupport{Name: "stamp", Interface: "host_test.stampStorage", Supported: true}) {
		t.Errorf("the store's report of families' storage has no stamp: %+v", st.Families())
	}
	st.Close()

	// Disabled by the embedder (ops.Disabled): not provisioned, attached
	// to no module, and its op refused to a module granted it, through
	// every transport, naming the family, audited.
	stampServices.Lock()
	provisioned := len(stampServices.all)
	stampServices.Unlock()
	attached = stampViews.attached.Load()
	cfg.DataDir, cfg.Families = t.TempDir(), map[string]any{"stamp": ops.Disabled}
	h3, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Close(ctx)
	for name, call := range opTransports(t, h3, "stamper", "capabilities: {stamp: [ledger]}", []string{"stamp.make"}) {
		cid := "disabled-" + strings.ReplaceAll(name, " ", "-")
		if got := call(t, cid, "stamp.make", `{"book":"ledger"}`); got.code != abi.CodeDenied {
			t.Errorf("%s: %+v; want denied", name, got)
		}
		evs := auditEvents(t, h3, audit.Filter{CorrelationID: cid, Kind: audit.KindOp, Decision: audit.Deny})
		if len(evs) != 1 || evs[0].Op != "stamp.make" || evs[0].Rule != "host: family disabled" || !strings.Contains(evs[0].Reason, "the stamp family is disabled on this host") {
			t.Errorf("%s: audit %+v; want one refusal of stamp.make naming the disabled family", name, evs)
		}
	}
	stampServices.Lock()
	if len(stampServices.all) != provisioned {
		t.Error("a disabled family was provisioned")
	}
	stampServices.Unlock()
	if stampViews.attached.Load() != attached {
		t.Error("a disabled family was attached to a module")
	}

	// A host without the secrets family configured provisions the stamp
	// family with none: what it asked for is absent, not an error.
	cfg.DataDir, cfg.Families = t.TempDir(), map[string]any{"stamp": &stampConfig{}}
	h2, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stampServices.Lock()
	if s := stampServices.all[len(stampServices.all)-1]; s.hasSecrets || s.prefix != "stamp-" {
		t.Errorf("defaults: %+v", s)
	}
	stampServices.Unlock()
	h2.Close(ctx)

	for name, tt := range map[string]struct {
		families map[string]any
		want     string
	}{
		"wrong type":     {map[string]any{"stamp": stampConfig{}}, "family stamp is configured with a *host_test.stampConfig, not a host_test.stampConfig"},
		"unknown family": {map[string]any{"stamps": &stampConfig{}}, `no op family "stamps"; the families are`},
		"refused":        {map[string]any{"stamp": &stampConfig{Start: -1}}, "stamp.start: -1 is negative"},
	} {
		cfg.DataDir, cfg.Families = t.TempDir(), tt.families
		h, err := host.New(ctx, cfg)
		if err == nil {
			h.Close(ctx)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error containing %q", name, err, tt.want)
		}
	}
}
