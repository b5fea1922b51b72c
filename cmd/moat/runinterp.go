package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

// runInterpretedPlugin runs one action of an interpreted plugin: the
// language builds the script into its interpreter's artifact, and the
// host runs the interpreter as a host.Script serving the manifest's
// actions (input on stdin, the action's name in $MOAT_ACTION, the op
// table on the device file, what it prints as the output), with the same
// authorization, confirmation, limits and audit as a compiled plugin.
func runInterpretedPlugin(ctx context.Context, g *globalFlags, f *runFlags, dir string, b *bundle.Bundle,
	args []string, principal policy.Principal, cfg map[string]string, limits host.Limits) error {
	mf, l := b.Manifest, b.Language
	names := make([]string, 0, len(mf.Actions))
	for _, a := range mf.Actions {
		names = append(names, a.Name)
	}
	if len(args) != 2 {
		return usagef("%s is a %s plugin: name an action (%s)", dir, mf.Language, strings.Join(names, ", "))
	}
	action, ok := mf.Action(args[1])
	if !ok {
		return usagef("%s has no action %q: its moat.yaml declares %s", mf.Name, args[1], strings.Join(names, ", "))
	}
	var input []byte
	if f.confirm != "" {
		if f.inputSet || f.inputFile != "" {
			return usagef("--confirm runs the action and input the token was issued for: give MODULE ACTION and no input")
		}
	} else {
		var err error
		if input, err = f.readInput(); err != nil {
			return err
		}
		if action.MaxInput > 0 && int64(len(input)) > int64(action.MaxInput) {
			return usagef("input of %d bytes is over the action's max_input of %d", len(input), action.MaxInput)
		}
	}
	// The build's work dir is in the data dir, which the confined moat may
	// still write: in /tmp it could not remove it, and every run would
	// leave one behind.
	tmp, err := filepath.Abs(filepath.Join(g.data(), "tmp"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	work, err := os.MkdirTemp(tmp, "plugin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	wasm, opts, err := b.LoadOptions(ctx, bundle.LoadEnv{ScriptDir: filepath.Join(work, "src")})
	if err != nil {
		return err
	}
	sc := opts.Script
	// Everything is read and written outside the data directory: confine.
	if _, err := g.loadProfile(); err != nil {
		return err
	}
	readOnly := []string{dir, work}
	for _, m := range sc.Mounts {
		readOnly = append(readOnly, m.HostDir)
	}
	if sc.Interpreter != nil {
		// Its interpreter compiles in this process the first time
		// (ruby.wasm: 30 MB through wazero's optimizing compiler, about
		// 600 MiB at its peak), past the default margin: the backstop
		// cgroup would kill the run.
		f.compileRoom = 512 << 20
	}
	if err := confineHost(g, f, readOnly, b, nil); err != nil {
		return err
	}
	h, err := newHost(ctx, g)
	if err != nil {
		return err
	}
	defer h.Close(context.Background())
	// The interpreter is a WASI command serving the manifest's actions
	// (host.Script): roles, confirm: true, limits and audit apply as to a
	// compiled plugin.
	// The first load compiles the interpreter to machine code (seconds;
	// cached in the compile cache afterwards): the host says when it does
	// (FirstTime), and it shows when it is slow.
	opts.Config, opts.Limits, opts.Isolation, opts.CorrelationID = cfg, limits, host.IsolationFresh, f.correlate
	opts.FirstTime = g.progress().preparer(l.Info().Name)
	mod, err := h.Load(ctx, wasm, opts)
	if err != nil {
		return err
	}
	var res host.Result
	if f.confirm != "" {
		res, err = mod.Confirm(ctx, host.ConfirmRequest{Token: f.confirm, Principal: principal, CorrelationID: f.correlate})
	} else {
		res, err = mod.Invoke(ctx, host.Request{Action: action.Name, Input: input, Principal: principal, CorrelationID: f.correlate})
	}
	if err != nil {
		return err
	}
	if err := writeOutput(os.Stdout, res.Output); err != nil {
		return err
	}
	return afterRun(ctx, g, f, h, mod)
}
