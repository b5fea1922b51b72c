package ops_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/media"
	"github.com/moat-sandbox/moat/host/ops"
)

// Families with no ops (so the SDK coverage test has nothing to ask of
// them), to hold Provision's order to what a family asks for: famtest.b
// needs famtest.a's service, famtest.loop1 and famtest.loop2 need each
// other (provisioned only when a test configures them to).

var famLog []string

type famConfig struct {
	Value string
	Loop  bool // famtestloop1 asks famtestloop2, which asks it back
	Fail  bool // Cleanup fails
}

func famFamily(name, needs string) ops.Family {
	return ops.Family{
		Name:   name,
		Config: func() any { return &famConfig{} },
		Provision: func(ctx *ops.ProvisionContext, cfg any) (any, error) {
			c := cfg.(*famConfig)
			v := c.Value
			if needs != "" && (c.Loop || !strings.HasPrefix(name, "famtestloop")) {
				dep, err := ctx.Service(needs)
				if err != nil {
					return nil, err
				}
				if d, ok := dep.(string); ok {
					v += "<" + d
				}
			}
			famLog = append(famLog, "provision "+name)
			if c.Fail {
				return "fail", nil
			}
			return name + ":" + v, nil
		},
		Cleanup: func(svc any) error {
			famLog = append(famLog, "cleanup "+name)
			if svc == "fail" {
				return errors.New("it failed")
			}
			return nil
		},
	}
}

func init() {
	// Registered b first: the order of Provision is what each needs, not
	// the order of registration (which is by file name in production).
	ops.RegisterFamily(famFamily("famtestb", "famtesta"))
	ops.RegisterFamily(famFamily("famtesta", ""))
	ops.RegisterFamily(famFamily("famtestloop1", "famtestloop2"))
	ops.RegisterFamily(famFamily("famtestloop2", "famtestloop1"))
}

// TestProvision: a family's service is provisioned once, after the
// services it asks for; Cleanup goes backwards and joins the errors; a
// cycle of families is refused naming the family.
func TestProvision(t *testing.T) {
	ctx := context.Background()
	famLog = nil
	s, err := ops.Provision(ctx, ops.Core{}, map[string]any{"famtesta": &famConfig{Value: "x"}, "famtestb": &famConfig{Value: "y", Fail: true}})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Service("famtesta"); got != "famtesta:x" {
		t.Errorf("famtesta's service %v", got)
	}
	var order []string
	for _, l := range famLog {
		if strings.HasPrefix(l, "provision famtesta") || strings.HasPrefix(l, "provision famtestb") {
			order = append(order, l)
		}
	}
	if !slices.Equal(order, []string{"provision famtesta", "provision famtestb"}) {
		t.Errorf("provisioned %v; want famtesta, then famtestb, once each", order)
	}
	famLog = nil
	err = s.Cleanup()
	if err == nil || !strings.Contains(err.Error(), "famtestb: it failed") {
		t.Errorf("cleanup: %v", err)
	}
	ia, ib := slices.Index(famLog, "cleanup famtesta"), slices.Index(famLog, "cleanup famtestb")
	if ia < 0 || ib < 0 || ib > ia {
		t.Errorf("cleaned up %v; want famtestb before famtesta", famLog)
	}
	if err := s.Cleanup(); err != nil {
		t.Errorf("a second cleanup: %v", err)
	}

	_, err = ops.Provision(ctx, ops.Core{}, map[string]any{"famtestloop1": &famConfig{Loop: true}, "famtestloop2": &famConfig{Loop: true}})
	if err == nil || !strings.Contains(err.Error(), "a cycle of families") {
		t.Errorf("a cycle: %v", err)
	}
}

// TestFamiliesRegistered: every production op is in a family, and the families of
// the op table are there.
func TestFamiliesRegistered(t *testing.T) {
	fams := ops.Families()
	for _, want := range []string{"ai", "config", "db", "http", "knowledge", "kv", "log", "media", "moat", "secrets", "tasks"} {
		if !slices.Contains(fams, want) {
			t.Errorf("no family %s in %v", want, fams)
		}
	}
	for _, name := range productionOps { // the test files' own ops are registered alone
		if o, _ := ops.Lookup([]byte(name)); o.Family() == "" {
			t.Errorf("op %s is in no family", name)
		}
	}
	if cfg, ok := ops.FamilyConfig("media"); !ok {
		t.Error("media has no configuration")
	} else if _, ok := cfg.(*media.FamilyConfig); !ok {
		t.Errorf("media's configuration is a %T", cfg)
	}
}

// TestDisabled: a family given ops.Disabled is not provisioned (a family
// asking for its service gets none), is attached to no module, and each
// of its ops is refused with a *DisabledError naming it, denied.
func TestDisabled(t *testing.T) {
	famLog = nil
	s, err := ops.Provision(context.Background(), ops.Core{}, map[string]any{"famtesta": ops.Disabled, "famtestb": &famConfig{Value: "y"}, "kv": ops.Disabled})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Cleanup()
	if slices.Contains(famLog, "provision famtesta") || s.Service("famtestb") != "famtestb:y" {
		t.Errorf("provisioned %v, famtestb's service %v; want famtesta left out and famtestb without it", famLog, s.Service("famtestb"))
	}
	if got := s.DisabledFamilies(); !slices.Equal(got, []string{"famtesta", "kv"}) {
		t.Errorf("disabled: %v", got)
	}
	kvGet, _ := ops.Lookup([]byte(abi.OpKVGet))
	var de *ops.DisabledError
	if err := s.Refuse(kvGet); !errors.As(err, &de) || de.Family != "kv" || abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "the kv family is disabled on this host") {
		t.Errorf("kv.get on a host without kv: %v", err)
	}
	dbGet, _ := ops.Lookup([]byte(abi.OpDBGet))
	if err := s.Refuse(dbGet); err != nil {
		t.Errorf("db.get: %v", err)
	}
	var v ops.Views
	if err := v.Attach(context.Background(), ops.Core{}, s, ops.ModuleInfo{Name: "m"}); err != nil {
		t.Fatal(err)
	}
	if v.View("kv") != nil || v.View("db") == nil {
		t.Errorf("views: kv %v, db %v; want none for the disabled kv", v.View("kv"), v.View("db"))
	}
	if _, err := ops.Provision(context.Background(), ops.Core{}, map[string]any{"kvv": ops.Disabled}); err == nil || !strings.Contains(err.Error(), `no op family "kvv"`) {
		t.Errorf("disabling a family that does not exist: %v", err)
	}
}
