package host

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/driver"
)

// Script makes a WASI command, an interpreter, serve a manifest's actions:
// the plugins of the interpreted languages (JavaScript on QuickJS, Python
// on CPython) are a script the interpreter runs, not a module exporting
// moat_invoke. Each invocation runs the command once, on a fresh
// instance, with the input on stdin, the action's name in $MOAT_ACTION,
// the op table on its device file (RunRequest.Ops), and what it writes to
// stdout as the output (less one trailing newline: print adds it). An
// action fails with a code of its own by exiting with abi.ScriptErrorExit
// and an abi.Error as the last line of stdout (abi/script.go); any other
// non-zero exit is a guest_error carrying the last line of stderr. stderr
// goes to the log, tagged like every op of the invocation.
//
// Everything around the call is the host's, as for a compiled plugin: the
// manifest's role requirements, confirm: true, limits per action,
// concurrency and rate limits, sensitive ops and the audit trail.
type Script struct {
	// Args come after argv[0]: the interpreter's arguments naming the
	// script (for example /src/main.js).
	Args []string
	// Env is the interpreter's environment (PYTHONHOME, say);
	// MOAT_ACTION is added per invocation.
	Env map[string]string
	// Mounts are the script's directory and the interpreter's library,
	// read-only as a rule.
	Mounts []Mount
	// Resident says the script registers its actions' handlers
	// (moat.action) and serves many calls from one instance, in the
	// module's pool (resident.go, abi/resident.go); otherwise each call
	// runs the script once on a fresh instance, the action in
	// $MOAT_ACTION.
	Resident bool
	// Snapshot, for a resident script, lets its instances start from an
	// image of one that ran the top level and parked where it would
	// serve (snapshot.go; Snapshot.Resume enters the serve loop). Its
	// Key must cover the plugin's sources and the SDK.
	Snapshot *Snapshot
	// Source is the plugin's sources in canonical form
	// (languages.PackSources): what its signature covers, in place of the
	// module bytes, which are the interpreter's and the same for every
	// plugin. A signed script without it is refused.
	Source []byte
	// Interpreter, when set, makes and starts the interpreter's instances
	// in place of the host's runtime (a driver.Interpreter): for interpreters
	// that are not WASI commands, like ruby.wasm. Such a script must be
	// Resident.
	Interpreter driver.Interpreter
}

// scriptLoader loads an interpreter (a WASI command, or a module its
// Interpreter runs) serving a script's actions: per call, or from
// resident instances in the module's pool.
var scriptLoader = &loader{
	kinds: []Kind{KindScript},
	match: func(_ []byte, opts LoadOptions) bool { return opts.Script != nil },
	check: func(ld *loading) error {
		if err := checkWasm(ld); err != nil {
			return err
		}
		// A script's own bytes are its sources; the interpreter's are
		// the same for every plugin and would let one plugin's
		// signature stand for another's.
		sc := ld.opts.Script
		ld.signed, ld.sources, ld.sigExt = sc.Source, sc.Source, ".minisig"
		if ld.opts.Signature != nil && len(ld.signed) == 0 {
			return ld.fail(abi.CodeInvalidArgument, nil, "a signed script needs Script.Source, the sources its signature covers")
		}
		return nil
	},
	prepare: func(ctx context.Context, ld *loading) error {
		// A resident script's instances may start from its Snapshot; a
		// per-call script's runs only from the load's.
		snap := ld.opts.Snapshot
		if sc := ld.opts.Script; snap == nil && sc.Resident {
			snap = sc.Snapshot
		}
		if snap != nil {
			if err := ld.fromSnapshot(ctx, snap); err != nil {
				return err
			}
		}
		if err := compileWasm(ctx, ld, ld.opts.Script.Interpreter); err != nil {
			return err
		}
		if err := ld.fromInterpreter(); err != nil {
			return err
		}
		if err := ld.refuseImage(); err != nil {
			return err
		}
		return ld.checkScript()
	},
	start: func(_ context.Context, ld *loading) (moduleRuntime, []string, error) {
		m := ld.m
		var actions []string
		seen := map[string]bool{}
		for _, a := range ld.opts.Manifest.Actions {
			export := a.Export
			if export == "" {
				export = a.Name
			}
			if !seen[export] {
				seen[export] = true
				actions = append(actions, export)
			}
		}
		if m.code.script.Resident {
			return residentRuntime{&pooledRuntime{m: m, newInstance: m.newResidentInstance}}, actions, nil
		}
		return &perCallScript{m: m}, actions, nil
	},
}

// checkScript checks that the module can serve a script's actions, which
// come from the manifest.
func (ld *loading) checkScript() error {
	opts, m := ld.opts, ld.m
	fail := func(format string, args ...any) error {
		return &Error{Module: m.name, Code: abi.CodeBadModule, Reason: fmt.Sprintf(format, args...)}
	}
	if opts.Script.Interpreter != nil && !opts.Script.Resident {
		return fail("this interpreter serves only resident scripts: register each action's handler with moat.action (in Ruby, Moat.action(\"greet\") { |input| ... })")
	}
	if ld.kind != KindCommand {
		return fail("a script runs on a WASI command (an interpreter exporting _start); this module is of kind %s", ld.kind)
	}
	if opts.Manifest == nil || len(opts.Manifest.Actions) == 0 {
		return fail("a script's actions come from its manifest: give a moat.yaml with at least one action")
	}
	// Checked here as Run checks them per run, so that a bad Script
	// fails its load, not every call.
	invalid := func(err error) error {
		return &Error{Module: m.name, Code: abi.CodeInvalidArgument, Reason: "script: " + err.Error(), Err: err}
	}
	if err := checkEnv(opts.Script.Env); err != nil {
		return invalid(err)
	}
	for _, mt := range opts.Script.Mounts {
		if err := checkMount(mt); err != nil {
			return invalid(err)
		}
	}
	sc := *opts.Script
	sc.Env = maps.Clone(sc.Env)
	m.code.script, ld.kind = &sc, KindScript
	ld.mounts, ld.origin = &sc.Mounts, "the manifest declares"
	return nil
}

// runScript runs one invocation of a script's action.
func (m *Module) runScript(ctx context.Context, req *Request, lim Limits, confirmed bool) ([]byte, string, error) {
	env := maps.Clone(m.code.script.Env)
	if env == nil {
		env = map[string]string{}
	}
	export := req.Action
	if a, ok := m.policy.manifest.Action(req.Action); ok && a.Export != "" {
		export = a.Export
	}
	env[ScriptActionEnv] = export
	var stdout, stderr bytes.Buffer
	res, needsConfirm, err := m.run(ctx, RunRequest{
		Stdin: bytes.NewReader(req.Input), Stdout: &stdout, Stderr: &stderr,
		Args: m.code.script.Args, Env: env, Mounts: m.code.script.Mounts, Ops: true,
		Principal: req.Principal, CorrelationID: req.CorrelationID, Action: req.Action,
	}, lim, confirmed)
	if stderr.Len() > 0 {
		m.host.log.LogAttrs(ctx, slog.LevelWarn, "script stderr",
			slog.String("module", m.name), slog.String("action", req.Action),
			slog.String("user", req.Principal.User), slog.String("org", req.Principal.Org),
			slog.String("correlation_id", req.CorrelationID), slog.String("stderr", tailOf(stderr.Bytes(), tailBytes)))
	}
	if err != nil {
		return nil, needsConfirm, err
	}
	if needsConfirm != "" {
		// The invocation asks for a confirmation however the script
		// handled the refusal, as a compiled plugin's does.
		return nil, needsConfirm, nil
	}
	if res.ExitCode != 0 {
		if e := scriptError(res.ExitCode, stdout.Bytes()); e != nil {
			return nil, "", guestFailure(m.name, req.Action, e.Code, e.Message, e)
		}
		reason := fmt.Sprintf("the script exited with status %d", res.ExitCode)
		if last := lastLine(stderr.Bytes()); last != "" {
			reason += ": " + last
		}
		return nil, "", &Error{Module: m.name, Action: req.Action, Code: abi.CodeGuestError, Reason: reason}
	}
	return bytes.TrimSuffix(stdout.Bytes(), []byte("\n")), "", nil
}

// scriptError is the error a script failed its action with: exit status
// abi.ScriptErrorExit and an abi.Error with a code as the last line of its
// stdout (abi/script.go). Anything else is nil: the caller reports a
// guest_error. stdout is already capped at the action's output limit.
func scriptError(status uint32, stdout []byte) *abi.Error {
	if status != abi.ScriptErrorExit {
		return nil
	}
	line := bytes.TrimRight(stdout, "\r\n")
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	var e abi.Error
	if err := abi.Unmarshal(line, &e); err != nil || e.Code == "" {
		return nil
	}
	return &e
}

// tailOf returns at most n bytes from the end of b.
func tailOf(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// lastLine returns the last non-empty line of b, at most 512 bytes of it.
func lastLine(b []byte) string {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return tailOf(bytes.TrimSpace(b), 512)
}
