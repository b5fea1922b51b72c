package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	pysdk "github.com/moat-sandbox/moat/guests/python"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// Bounds on a native plugin's directory as moat run packs it (its digest
// and signature are of the pack): a directory past them is almost surely
// not a plugin's sources (a virtualenv, a build tree).
const (
	maxNativeFiles = 4096
	maxNativeBytes = 64 << 20
)

// nativePlugin reports whether path is the directory of a native plugin
// (its moat.yaml says kind: native), with its manifest.
func nativePlugin(path string) (*policy.Manifest, bool) {
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return nil, false
	}
	mf, err := policy.LoadManifest(filepath.Join(path, host.ManifestFile))
	if err != nil || mf.Kind != policy.KindNative {
		return nil, false
	}
	return mf, true
}

// nativeSource packs a native plugin's files (languages.NativeSource):
// every regular file of its flat directory but its signature, as moat
// serve packs the same directory uploaded as an archive, so the digest
// and signature are the same on both. It refuses what a worker running as
// another uid could not read, and subdirectories (an upload is flattened),
// naming the fix.
func nativeSource(dir, name string) ([]byte, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	unreadable := func(p string, mode fs.FileMode) error {
		return fmt.Errorf("%s is not readable by other users (mode %v), and the plugin's workers run as a uid of their own: chmod -R a+rX %s", p, mode.Perm(), dir)
	}
	if fi.Mode().Perm()&0o005 != 0o005 {
		return nil, unreadable(dir, fi.Mode())
	}
	files := map[string][]byte{}
	err = plugintree.Walk(dir, plugintree.Options{Flat: true, MaxFiles: maxNativeFiles, MaxBytes: maxNativeBytes}, func(e plugintree.Entry) error {
		switch {
		case e.Info.IsDir():
			return fmt.Errorf("%s is a directory: a native plugin is one flat directory (moat serve flattens an uploaded archive), so keep its files beside moat.yaml and install libraries as system packages", e.Path)
		case e.Info.Mode().Perm()&0o004 == 0:
			return unreadable(e.Path, e.Info.Mode())
		}
		b, err := e.Read()
		if err != nil {
			return err
		}
		files[e.Rel] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	return languages.PackSources(languages.NativeSource(name, files)), nil
}

// nativeBundle reads a native plugin's directory as a host.Bundle for
// signing and verifying: its "module" is its files packed
// (nativeSource), its signature NAME.minisig beside moat.yaml.
func nativeBundle(dir string, mf *policy.Manifest) (*host.Bundle, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	source, err := nativeSource(abs, mf.Name)
	if err != nil {
		return nil, err
	}
	manifestPath := filepath.Join(abs, host.ManifestFile)
	manifest, err := plugintree.ReadFile(abs, host.ManifestFile)
	if err != nil {
		return nil, err
	}
	b := &host.Bundle{Path: abs, Wasm: source, Name: mf.Name, Manifest: mf, ManifestPath: manifestPath, ManifestBytes: manifest,
		SignaturePath: filepath.Join(abs, mf.Name+".minisig")}
	if b.Signature, err = plugintree.ReadFile(abs, mf.Name+".minisig"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return b, nil
}

// runNativePlugin runs one action of a native plugin: its workers start
// confined (through a launcher started before moat confines itself), and
// the action goes through the same gate as a WASM plugin's: roles,
// confirmation, limits, the op table over the pipe, audit.
func runNativePlugin(ctx context.Context, g *globalFlags, f *runFlags, dir string, mf *policy.Manifest,
	args []string, principal policy.Principal, cfg map[string]string, limits host.Limits) error {
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
	b, err := nativeBundle(dir, mf)
	if err != nil {
		return usagef("%v", err)
	}
	abs := b.Path
	nat := &host.Native{Dir: abs, Source: b.Wasm}
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
	if err := confineHost(g, f, append([]string{abs}, nat.ReadOnly...), mf, nil); err != nil {
		return err
	}
	h, err := newHost(ctx, g)
	if err != nil {
		return err
	}
	defer h.Close(context.Background())
	mod, err := h.Load(ctx, nil, host.LoadOptions{Manifest: mf, ManifestBytes: b.ManifestBytes, Signature: b.Signature,
		Config: cfg, Limits: limits, CorrelationID: f.correlate, Native: nat})
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
