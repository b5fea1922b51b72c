package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	_ "github.com/moat-sandbox/moat/host/extism"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// An op family added by this file alone, as a new family is added: no
// edit to policy, the host or a transport. e2enotes.add writes to a
// collection (capability db, granted per collection: the request's model
// is its target); e2enotes.count needs tasks, granted as a whole.
type e2eNote struct {
	Model string `json:"model"`
	Text  string `json:"text"`
}

func (n *e2eNote) OpTarget() string { return n.Model }

var e2eNotes struct {
	sync.Mutex
	byOrg map[string][]string
}

func init() {
	ops.Register(ops.Op{Name: "e2enotes.add", Capability: "db", Mutates: true,
		Func: ops.Typed(func(env *ops.Env, req *e2eNote) (*abi.Empty, error) {
			e2eNotes.Lock()
			defer e2eNotes.Unlock()
			if e2eNotes.byOrg == nil {
				e2eNotes.byOrg = map[string][]string{}
			}
			org := env.Principal.Org
			e2eNotes.byOrg[org] = append(e2eNotes.byOrg[org], req.Model+":"+req.Text)
			return &abi.Empty{}, nil
		})})
	ops.Register(ops.Op{Name: "e2enotes.count", Capability: "tasks",
		Func: ops.Typed(func(env *ops.Env, _ *abi.Empty) (*struct {
			N int `json:"n"`
		}, error) {
			e2eNotes.Lock()
			defer e2eNotes.Unlock()
			return &struct {
				N int `json:"n"`
			}{len(e2eNotes.byOrg[env.Principal.Org])}, nil
		})})
}

// TestNewOpFamily: the family above is granted (its target in the grant),
// denied (a target the profile does not grant, or none), held for
// confirmation when the profile names it sensitive, and
// audited with its target, through every transport: the moat import, the
// device file, Extism's moat_call and a native worker's pipe.
func mustManifest(t *testing.T, yaml string) *policy.Manifest {
	t.Helper()
	mf, err := policy.ParseManifest("moat.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

func TestNewOpFamily(t *testing.T) {
	t.Parallel()
	h := policyHost(t, `
name: test
on_ungranted: deny_at_call
sensitive_ops: [e2enotes.count]
default:
  capabilities: {db: [notes], tasks: true}
`)
	const caps = `capabilities: {db: [notes, secrets], tasks: true}`
	transports := opTransports(t, h, "notes", caps, []string{"e2enotes.add", "e2enotes.count"})
	for name, call := range transports {
		t.Run(name, func(t *testing.T) {
			cid := "e2e-" + strings.ReplaceAll(name, " ", "-")
			for _, tt := range []struct {
				op, req  string
				want     opOutcome
				decision string // the audit decision of the op; "" for none
				rule     string
				target   string
			}{
				{"e2enotes.add", `{"model":"notes","text":"hi"}`, opOutcome{reply: "{}"}, audit.Allow, "grant", "notes"},
				{"e2enotes.add", `{"model":"secrets","text":"x"}`, opOutcome{code: abi.CodeDenied}, audit.Deny, "profile test: default grant", "secrets"},
				{"e2enotes.add", `{"model":"","text":"x"}`, opOutcome{code: abi.CodeDenied}, audit.Deny, "op e2enotes.add", ""},
				{"e2enotes.count", `{}`, opOutcome{code: abi.CodeConfirmationRequired}, audit.Deny, "profile test: sensitive_ops", ""},
			} {
				got := call(t, cid, tt.op, tt.req)
				if got != tt.want {
					t.Errorf("%s %s = %+v, want %+v", tt.op, tt.req, got, tt.want)
				}
				evs := auditEvents(t, h, audit.Filter{CorrelationID: cid, Kind: audit.KindOp})
				if len(evs) == 0 {
					t.Fatalf("%s %s: no op event under %s", tt.op, tt.req, cid)
				}
				ev := evs[len(evs)-1]
				if ev.Op != tt.op || ev.Decision != tt.decision || ev.Rule != tt.rule || ev.Attrs["target"] != tt.target ||
					ev.User != ann.User || ev.Org != ann.Org || tt.decision == audit.Allow && ev.MutationID == "" {
					t.Errorf("%s %s: audit event %+v, want decision %s rule %q target %q", tt.op, tt.req, ev, tt.decision, tt.rule, tt.target)
				}
			}
		})
	}
	e2eNotes.Lock()
	defer e2eNotes.Unlock()
	want := "notes:hi,notes:hi,notes:hi"
	if nativeReady() == "" { // the pipe ran too
		want += ",notes:hi"
	}
	if got := strings.Join(e2eNotes.byOrg[ann.Org], ","); got != want {
		t.Errorf("notes written: %q (want one per transport, none to secrets)", got)
	}
}

// opOutcome is what a call of an op through a transport came to.
type opOutcome struct {
	reply string   // the op's reply, on success
	code  abi.Code // the op's error code, on failure
}

// opTransports loads on h, for each transport, a module whose manifest
// asks for caps (names prefixed with prefix; Extism's, one per op in
// names), and returns how to call an op through each: the moat import,
// the device file, Extism's moat_call and a native worker's pipe (which
// skips where native plugins cannot run).
func opTransports(t *testing.T, h *host.Host, prefix, caps string, names []string) map[string]func(t *testing.T, cid, op, req string) opOutcome {
	t.Helper()
	ctx := context.Background()
	plugin, err := loadWithManifest(t, h, "name: "+prefix+"-plugin\nversion: 1.0.0\nactions: [{name: call}]\n"+caps)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: "+prefix+"-cmd\nversion: 1.0.0\nkind: wasi-command\n"+caps))
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := h.Load(ctx, testwasm.BuildGo(t, "./testdata/devcmd", false), host.LoadOptions{Manifest: mf})
	if err != nil {
		t.Fatal(err)
	}
	// moatops runs the op its config names: one module per op.
	extismPlugins := map[string]*host.Module{}
	for _, op := range names {
		extismPlugins[op], err = h.Load(ctx, testwasm.BuildExtism(t, "moatops"), host.LoadOptions{Config: map[string]string{"op": op},
			Manifest: mustManifest(t, "name: "+prefix+"-extism-"+strings.ReplaceAll(op, ".", "-")+"\nkind: extism\nversion: 1.0.0\nactions: [{name: op}]\n"+caps)})
		if err != nil {
			t.Fatal(err)
		}
	}
	var nativePlugin *host.Module
	if nativeReady() == "" {
		nat := pyPlugin(t)
		nativePlugin, err = h.Load(ctx, nil, host.LoadOptions{Native: nat, Manifest: mustManifest(t,
			"name: "+prefix+"-native\nversion: 1.0.0\nkind: native\ncommand: [python3, main.py]\nactions: [{name: call}]\n"+caps)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nativePlugin.Close(ctx) })
	}
	transports := map[string]func(t *testing.T, cid, op, req string) opOutcome{
		"import": func(t *testing.T, cid, op, req string) opOutcome {
			res, err := plugin.Invoke(ctx, host.Request{Action: "call", Input: []byte(op + " " + req), Principal: ann, CorrelationID: cid})
			if err != nil {
				return opOutcome{code: abi.CodeOf(err)}
			}
			return opOutcome{reply: string(res.Output)}
		},
		"device file": func(t *testing.T, cid, op, req string) opOutcome {
			var out bytes.Buffer
			_, err := cmd.Run(ctx, host.RunRequest{Args: []string{"call", op, req}, Ops: true, Stdout: &out, Principal: ann, CorrelationID: cid})
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			var reply struct {
				Resp  json.RawMessage `json:"resp"`
				Error *abi.Error      `json:"error"`
			}
			if err := json.Unmarshal(out.Bytes(), &reply); err != nil {
				t.Fatalf("reply %q: %v", out.Bytes(), err)
			}
			if reply.Error != nil {
				return opOutcome{code: reply.Error.Code}
			}
			return opOutcome{reply: string(reply.Resp)}
		},
	}
	transports["extism moat_call"] = func(t *testing.T, cid, op, req string) opOutcome {
		res, err := extismPlugins[op].Invoke(ctx, host.Request{Action: "op", Input: []byte(req), Principal: ann, CorrelationID: cid})
		if err == nil {
			return opOutcome{reply: string(res.Output)}
		}
		if c := abi.CodeOf(err); c != abi.CodeGuestError {
			return opOutcome{code: c}
		}
		// The plug-in reports the op's error as its own: "OP: CODE: message".
		_, rest, _ := strings.Cut(err.Error(), op+": ")
		code, _, _ := strings.Cut(rest, ":")
		return opOutcome{code: abi.Code(code)}
	}
	transports["pipe"] = func(t *testing.T, cid, op, req string) opOutcome {
		if nativePlugin == nil {
			t.Skip(nativeReady())
		}
		res, err := nativePlugin.Invoke(ctx, host.Request{Action: "call", Input: []byte(`["` + op + `", ` + req + `]`), Principal: ann, CorrelationID: cid})
		if err != nil {
			return opOutcome{code: abi.CodeOf(err)}
		}
		return opOutcome{reply: string(res.Output)}
	}
	return transports
}
