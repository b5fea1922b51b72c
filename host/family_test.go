package host_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/policy"
)

// An op family with a lifecycle, added by this file alone, as a family
// with a service is added: its configuration type, its Validate, its
// Provision (which asks the secrets family for its service by name, as
// a family that serves another is asked), its Cleanup and its op. No
// edit to host, policy or the server: the host learns of it from
// ops.RegisterFamily, and its configuration reaches it through
// host.Config.Families["stamp"].
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
}

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
		Ops: []ops.Op{{Name: "stamp.make", Mutates: true,
			Func: ops.Typed(func(env *ops.Env, _ *stampRequest) (*stampReply, error) {
				s, ok := ops.ServiceOf[*stampService](env, "stamp")
				if !ok {
					return nil, abi.Errorf(abi.CodeUnavailable, "stamp.make: this host has no stamp service")
				}
				n := s.next.Add(1) - 1
				return &stampReply{Stamp: fmt.Sprintf("%s%d", s.prefix, n), Secrets: s.hasSecrets}, nil
			})}},
	})
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
	ctx := context.Background()
	p, err := policy.ParseProfile("stamp.yaml", []byte("name: stamp\non_ungranted: deny_at_call\ndefault:\n  capabilities: {stamp: [ledger, diary]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := host.Config{DataDir: t.TempDir(), Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Families: map[string]any{"stamp": &stampConfig{Prefix: "S-", Start: 7}, "secrets": &ops.SecretsConfig{Source: secretSource{}}}}
	h, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	stampServices.Lock()
	svc := stampServices.all[len(stampServices.all)-1]
	stampServices.Unlock()

	granted := opTransports(t, h, "stamper", "capabilities: {stamp: [ledger, secret]}", []string{"stamp.make"})
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
				case tt.code == "" && !strings.HasPrefix(got.reply, `{"stamp":"S-`) || tt.code == "" && !strings.HasSuffix(got.reply, `,"secrets":true}`):
					t.Errorf("%s: reply %s; want a stamp S-n made with the secrets family's service", cid, got.reply)
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
	if svc.cleaned.Load() {
		t.Error("the service was cleaned up while the host ran")
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !svc.cleaned.Load() {
		t.Error("the host closed without cleaning up the family's service")
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
