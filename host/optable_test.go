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
	h := policyHost(t, `
name: test
on_ungranted: deny_at_call
sensitive_ops: [e2enotes.count]
default:
  capabilities: {db: [notes], tasks: true}
`)
	ctx := context.Background()
	const caps = `capabilities: {db: [notes, secrets], tasks: true}`
	plugin, err := loadWithManifest(t, h, "name: notes-plugin\nversion: 1.0.0\nactions: [{name: call}]\n"+caps)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: notes-cmd\nversion: 1.0.0\nkind: wasi-command\n"+caps))
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := h.Load(ctx, testwasm.BuildGo(t, "./testdata/devcmd", false), host.LoadOptions{Manifest: mf})
	if err != nil {
		t.Fatal(err)
	}
	// moatops runs the op its config names: one module per op.
	extismPlugins := map[string]*host.Module{}
	for _, op := range []string{"e2enotes.add", "e2enotes.count"} {
		extismPlugins[op], err = h.Load(ctx, testwasm.BuildExtism(t, "moatops"), host.LoadOptions{Config: map[string]string{"op": op},
			Manifest: mustManifest(t, "name: notes-extism-"+strings.TrimPrefix(op, "e2enotes.")+"\nkind: extism\nversion: 1.0.0\nactions: [{name: op}]\n"+caps)})
		if err != nil {
			t.Fatal(err)
		}
	}
	var nativePlugin *host.Module
	if nativeReady() == "" {
		nat := pyPlugin(t)
		nativePlugin, err = h.Load(ctx, nil, host.LoadOptions{Native: nat, Manifest: mustManifest(t,
			"name: notes-native\nversion: 1.0.0\nkind: native\ncommand: [python3, main.py]\nactions: [{name: call}]\n"+caps)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nativePlugin.Close(ctx) })
	}
	type outcome struct {
		reply string   // the op's reply, on success
		code  abi.Code // the op's error code, on failure
	}
	transports := map[string]func(t *testing.T, cid, op, req string) outcome{
		"import": func(t *testing.T, cid, op, req string) outcome {
			res, err := plugin.Invoke(ctx, host.Request{Action: "call", Input: []byte(op + " " + req), Principal: ann, CorrelationID: cid})
			if err != nil {
				return outcome{code: abi.CodeOf(err)}
			}
			return outcome{reply: string(res.Output)}
		},
		"device file": func(t *testing.T, cid, op, req string) outcome {
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
				return outcome{code: reply.Error.Code}
			}
			return outcome{reply: string(reply.Resp)}
		},
	}
	transports["extism moat_call"] = func(t *testing.T, cid, op, req string) outcome {
		res, err := extismPlugins[op].Invoke(ctx, host.Request{Action: "op", Input: []byte(req), Principal: ann, CorrelationID: cid})
		if err == nil {
			return outcome{reply: string(res.Output)}
		}
		if c := abi.CodeOf(err); c != abi.CodeGuestError {
			return outcome{code: c}
		}
		// The plug-in reports the op's error as its own: "OP: CODE: message".
		_, rest, _ := strings.Cut(err.Error(), op+": ")
		code, _, _ := strings.Cut(rest, ":")
		return outcome{code: abi.Code(code)}
	}
	transports["pipe"] = func(t *testing.T, cid, op, req string) outcome {
		if nativePlugin == nil {
			t.Skip(nativeReady())
		}
		res, err := nativePlugin.Invoke(ctx, host.Request{Action: "call", Input: []byte(`["` + op + `", ` + req + `]`), Principal: ann, CorrelationID: cid})
		if err != nil {
			return outcome{code: abi.CodeOf(err)}
		}
		return outcome{reply: string(res.Output)}
	}
	for name, call := range transports {
		t.Run(name, func(t *testing.T) {
			cid := "e2e-" + strings.ReplaceAll(name, " ", "-")
			for _, tt := range []struct {
				op, req  string
				want     outcome
				decision string // the audit decision of the op; "" for none
				rule     string
				target   string
			}{
				{"e2enotes.add", `{"model":"notes","text":"hi"}`, outcome{reply: "{}"}, audit.Allow, "grant", "notes"},
				{"e2enotes.add", `{"model":"secrets","text":"x"}`, outcome{code: abi.CodeDenied}, audit.Deny, "profile test: default grant", "secrets"},
				{"e2enotes.add", `{"model":"","text":"x"}`, outcome{code: abi.CodeDenied}, audit.Deny, "op e2enotes.add", ""},
				{"e2enotes.count", `{}`, outcome{code: abi.CodeConfirmationRequired}, audit.Deny, "profile test: sensitive_ops", ""},
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
	if nativePlugin != nil {
		want += ",notes:hi"
	}
	if got := strings.Join(e2eNotes.byOrg[ann.Org], ","); got != want {
		t.Errorf("notes written: %q (want one per transport, none to secrets)", got)
	}
}
