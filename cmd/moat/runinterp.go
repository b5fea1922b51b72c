package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// interpretedPlugin reports whether path is the directory of a plugin
// written in an interpreted language (its moat.yaml names one, and there
// is no .wasm to run instead), with its manifest and language.
func interpretedPlugin(path string) (*policy.Manifest, languages.Language, bool) {
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return nil, nil, false
	}
	mf, err := policy.LoadManifest(filepath.Join(path, host.ManifestFile))
	if err != nil || mf.Kind == policy.KindNative {
		return nil, nil, false
	}
	l, ok := languages.ScriptLanguage(mf)
	if !ok {
		return nil, nil, false
	}
	if wasm, _ := filepath.Glob(filepath.Join(path, "*.wasm")); len(wasm) > 0 {
		return nil, nil, false
	}
	return mf, l, true
}

// scriptBundle reads an interpreted plugin's directory as a host.Bundle
// for signing and verifying: its "module" is the canonical form of its
// sources (languages.PackSources), its signature NAME.minisig beside
// moat.yaml.
func scriptBundle(dir string, mf *policy.Manifest, l languages.Language) (*host.Bundle, languages.Source, error) {
	src, err := pluginSource(dir, l)
	if plugintree.IsError(err) {
		return nil, src, err // it names the file
	}
	if err != nil {
		return nil, src, fmt.Errorf("%s: %w", dir, err)
	}
	manifestPath := filepath.Join(dir, host.ManifestFile)
	manifest, err := plugintree.ReadFile(dir, host.ManifestFile)
	if err != nil {
		return nil, src, err
	}
	b := &host.Bundle{Path: dir, Wasm: languages.PackSources(src), Name: mf.Name, Manifest: mf,
		ManifestPath: manifestPath, ManifestBytes: manifest, SignaturePath: filepath.Join(dir, mf.Name+".minisig")}
	if sig, err := plugintree.ReadFile(dir, mf.Name+".minisig"); err == nil {
		b.Signature = sig
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, src, err
	}
	return b, src, nil
}

// runInterpretedPlugin runs one action of an interpreted plugin: the
// language builds the script into its interpreter's artifact, and the
// host runs the interpreter as a host.Script serving the manifest's
// actions (input on stdin, the action's name in $MOAT_ACTION, the op
// table on the device file, what it prints as the output), with the same
// authorization, confirmation, limits and audit as a compiled plugin.
func runInterpretedPlugin(ctx context.Context, g *globalFlags, f *runFlags, dir string, mf *policy.Manifest, l languages.Language,
	args []string, principal policy.Principal, cfg map[string]string, limits host.Limits) error {
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
	b, src, err := scriptBundle(dir, mf, l)
	if err != nil {
		return usagef("%v", err)
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
	sp, err := languages.BuildScriptPlugin(ctx, l, src, filepath.Join(work, "src"), toolchains.Dir())
	if err != nil {
		return err
	}
	// Everything is read and written outside the data directory: confine.
	if _, err := g.loadProfile(); err != nil {
		return err
	}
	readOnly := []string{dir, work}
	for _, m := range sp.Script.Mounts {
		readOnly = append(readOnly, m.HostDir)
	}
	if sp.Script.Interpreter != nil {
		// Its interpreter compiles in this process the first time
		// (ruby.wasm: 30 MB through wazero's optimizing compiler, about
		// 600 MiB at its peak), past the default margin: the backstop
		// cgroup would kill the run.
		f.compileRoom = 512 << 20
	}
	if err := confineHost(g, f, readOnly, mf, nil); err != nil {
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
	mod, err := h.Load(ctx, sp.WASM, host.LoadOptions{Name: mf.Name, Manifest: mf, ManifestBytes: b.ManifestBytes, Signature: b.Signature,
		Config: cfg, Limits: limits, Isolation: host.IsolationFresh, CorrelationID: f.correlate, Script: sp.Script,
		FirstTime: g.progress().preparer(l.Info().Name)})
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

// pluginSource reads the plugin's source files (those with the language's
// extensions, at the top of dir); the entry point is main<ext>. The
// directory is read by the one rule (package plugintree): a link or a
// special file among its entries is refused, naming it.
func pluginSource(dir string, l languages.Language) (languages.Source, error) {
	exts := l.Info().Extensions
	files := map[string][]byte{}
	err := plugintree.Walk(dir, plugintree.Options{Flat: true, MaxBytes: languages.MaxPluginSourceBytes}, func(e plugintree.Entry) error {
		if e.Info.IsDir() || !slices.Contains(exts, filepath.Ext(e.Rel)) {
			return nil
		}
		b, err := e.Read()
		if err != nil {
			return err
		}
		files[e.Rel] = b
		return nil
	})
	if err != nil {
		return languages.Source{}, err
	}
	return languages.PluginSource(l, files)
}
