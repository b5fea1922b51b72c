package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/bundle"
	pysdk "github.com/moat-sandbox/moat/guests/python"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/policy"
)

// runNativePlugin runs one action of a native plugin: its workers start
// confined (through a launcher started before moat confines itself), and
// the action goes through the same gate as a WASM plugin's: roles,
// confirmation, limits, the op table over the pipe, audit.
func runNativePlugin(ctx context.Context, g *globalFlags, f *runFlags, dir string, b *bundle.Bundle,
	args []string, principal policy.Principal, cfg map[string]string, limits host.Limits) error {
	mf := b.Manifest
	names := make([]string, 0, len(mf.Actions))
	for _, a := range mf.Actions {
		names = append(names, a.Name)
	}
	if len(args) != 2 {
		return usagef("%s is a native plugin: name an action (%s)", dir, strings.Join(names, ", "))
	}
	if _, ok := mf.Action(args[1]); !ok {
		return usagef("%s has no action %q: its moat.yaml declares %s", mf.Name, args[1], strings.Join(names, ", "))
	}
	var input []byte
	if f.confirm == "" {
		var err error
		if input, err = f.readInput(); err != nil {
			return err
		}
	} else if f.inputSet || f.inputFile != "" {
		return usagef("--confirm runs the action and input the token was issued for: give MODULE ACTION and no input")
	}
	_, opts, err := b.LoadOptions(ctx, bundle.LoadEnv{})
	if err != nil {
		return err
	}
	abs, nat := b.Dir, opts.Native
	if pysdk.Wanted(mf.Language, mf.Command) {
		// moat.py, where every worker uid can read it.
		// Absolute: the workers' root bind-mounts it (a relative --data,
		// the old ./moat-data default, was refused by moat-confine).
		data, err := filepath.Abs(g.data())
		if err != nil {
			return err
		}
		sdk := filepath.Join(data, "lang-state", "python-native-sdk")
		env, err := pysdk.WriteSDK(sdk)
		if err != nil {
			return err
		}
		if err := readableByAll(data, sdk); err != nil {
			return err
		}
		nat.Env, nat.ReadOnly = env, []string{sdk}
	}
	if _, err := g.loadProfile(); err != nil {
		return err
	}
	// Workers start after moat confines itself (and restart later): a
	// launcher started now, while exec is allowed, starts them.
	l, err := native.StartLauncherWith(native.LauncherOptions{})
	if err != nil {
		return err
	}
	native.UseLauncher(l)
	defer func() {
		native.UseLauncher(nil)
		l.Close()
	}()
	if err := confineHost(g, f, append([]string{abs}, nat.ReadOnly...), b, nil); err != nil {
		return err
	}
	h, err := newHost(ctx, g)
	if err != nil {
		return err
	}
	defer h.Close(context.Background())
	opts.Config, opts.Limits, opts.CorrelationID = cfg, limits, f.correlate
	mod, err := h.Load(ctx, nil, opts)
	if err != nil {
		return err
	}
	defer mod.Close(context.Background())
	var res host.Result
	if f.confirm != "" {
		res, err = mod.Confirm(ctx, host.ConfirmRequest{Token: f.confirm, Principal: principal, CorrelationID: f.correlate})
	} else {
		res, err = mod.Invoke(ctx, host.Request{Action: args[1], Input: input, Principal: principal, CorrelationID: f.correlate})
	}
	if err != nil {
		return err
	}
	if err := writeOutput(os.Stdout, res.Output); err != nil {
		return err
	}
	return afterRun(ctx, g, f, h, mod)
}

// readableByAll makes the directories from base down to dir traversable
// by every uid: the data directory is private (0700) by default, and a
// worker running as a uid of its own must reach the SDK inside it.
func readableByAll(base, dir string) error {
	rel, err := filepath.Rel(base, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%s is not under %s", dir, base)
	}
	p := base
	for _, part := range append([]string{""}, strings.Split(rel, string(filepath.Separator))...) {
		p = filepath.Join(p, part)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("%s: let the plugin's workers reach the SDK: %w", p, err)
			}
		}
	}
	return nil
}
