package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/driver"
)

// echoKind is a kind of module added by this file only: a driver
// registered for it, recognizing a module by its import of echoImport.
// Adding a kind of module is a driver and its Register call; no list of
// the host's names it.
const (
	echoKind   = "echo-test"
	echoImport = "echo-test:env"
)

type echoDriver struct{}

var _ driver.Driver = echoDriver{}

func init() { driver.Register(echoKind, echoDriver{}) }

func (echoDriver) Recognizes(imports []driver.Signature) bool {
	for _, s := range imports {
		if s.Module == echoImport {
			return true
		}
	}
	return false
}

func (echoDriver) Load(_ context.Context, spec driver.Spec) (driver.Runner, error) {
	if spec.Deadline == nil || spec.Yield == nil || spec.Nanosleep == nil || spec.Cache == nil {
		return nil, &driver.Error{Code: abi.CodeBadModule, Reason: "the host gave no deadline, yield, sleep or cache"}
	}
	var fns []string
	for _, e := range spec.Exports {
		fns = append(fns, e.Name)
	}
	return echoRunner{fns}, nil
}

type echoRunner struct{ fns []string }

func (r echoRunner) Functions() []string { return r.fns }

func (echoRunner) Close(context.Context) error { return nil }

// Call runs the op its input names through the host's gate, and answers
// with the op's reply or its refusal's code; input "fail" fails the way a
// guest does.
func (echoRunner) Call(ctx context.Context, c *driver.Call) ([]byte, error) {
	if string(c.Input) == "fail" {
		return nil, &driver.Error{Code: abi.CodeGuestError, Reason: "the guest failed", Err: errors.New("cause")}
	}
	req, _ := json.Marshal(abi.ConfigGetRequest{Key: "greeting"})
	op := string(c.Input)
	reply, err := c.Dispatch(ctx, []byte(op), req)
	if err != nil {
		return []byte(fmt.Sprintf("%s refused: %s", op, abi.CodeOf(err))), nil
	}
	return reply, nil
}

// echoModule is the smallest module of echoKind: it imports
// echo-test:env.op and exports shout, a function of type () -> ().
func echoModule() []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = wasmSection(b, 1, []byte{1, 0x60, 0, 0})
	imp := wasmName([]byte{1}, echoImport)
	b = wasmSection(b, 2, append(wasmName(imp, "op"), 0, 0))
	b = wasmSection(b, 3, []byte{1, 0})
	b = wasmSection(b, 7, append(wasmName([]byte{1}, "shout"), 0, 1))
	return wasmSection(b, 10, []byte{1, 4, 0, 0x10, 0, 0x0b})
}

// TestDriverKindFromTestFiles: a kind a driver registers in test files is
// loaded through Host.Load's shared stages and invoked through the host's
// gate: an op the module's grants allow runs, one they do not is refused,
// and a driver's failure is reported as the host's error, naming the
// module and the action.
func TestDriverKindFromTestFiles(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, nil)
	mod, err := h.Load(ctx, echoModule(), host.LoadOptions{Name: "echo", Config: map[string]string{"greeting": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := mod.Info().Kind; got != echoKind {
		t.Fatalf("kind %q, want %q", got, echoKind)
	}
	for _, tc := range []struct{ input, want string }{
		{abi.OpConfigGet, `"hi"`},
		{abi.OpKVGet, "kv.get refused: denied"},
	} {
		res, err := mod.Invoke(ctx, host.Request{Action: "shout", Input: []byte(tc.input), Principal: ann})
		if err != nil {
			t.Fatalf("%s: %v", tc.input, err)
		}
		if !strings.Contains(string(res.Output), tc.want) {
			t.Errorf("%s: output %q, want it to contain %q", tc.input, res.Output, tc.want)
		}
	}
	_, err = mod.Invoke(ctx, host.Request{Action: "shout", Input: []byte("fail"), Principal: ann})
	var e *host.Error
	if !errors.As(err, &e) || e.Code != abi.CodeGuestError || e.Module != "echo" || e.Action != "shout" || e.Reason != "the guest failed" {
		t.Fatalf("failing call: %#v, want a host.Error guest_error naming module echo, action shout", err)
	}
}

// TestRegisterRefusesTakenKinds: a kind is registered once, whether a
// driver or the host's own loader took it.
func TestRegisterRefusesTakenKinds(t *testing.T) {
	for _, kind := range []string{string(host.KindPlugin), string(host.KindCommand), string(host.KindScript), string(host.KindNative), echoKind} {
		t.Run(kind, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "claimed twice") {
					t.Fatalf("Register(%q): recovered %v, want a panic saying it is claimed twice", kind, r)
				}
			}()
			driver.Register(kind, echoDriver{})
		})
	}
}
