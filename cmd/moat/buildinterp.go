package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"gopkg.in/yaml.v3"
)

// An interpreted plugin (language: javascript, python, ruby, ...) has no
// module to write: its sources are what runs. But a script that builds
// every plugin of a repository, and a user who builds before inspecting,
// expect `moat build` to succeed and to have done what can be done ahead
// of a run. So build and inspect load it as `moat run` does, stopping
// short of an invocation: the manifest, the sources through the plugin
// tree reader, the language's checks, and the interpreter compiled into
// the compilation cache. No code of the plugin runs (LoadOptions.CheckOnly):
// its snapshot (a resident plugin's image after its top level) needs the
// top level run under the module's real grants, so it is made when the
// plugin is loaded to serve calls (moat run, moat serve).

// interpretedLoad is an interpreted plugin loaded for build or inspect.
type interpretedLoad struct {
	g      *globalFlags
	h      *host.Host
	mod    *host.Module
	script *host.Script
	work   string
}

func (il *interpretedLoad) close() {
	if il.mod != nil {
		il.mod.Close(context.Background())
	}
	if il.h != nil {
		il.g.closeHost(il.h)
	}
	os.RemoveAll(il.work)
}

// loadInterpreted validates and loads the interpreted plugin in dir
// without invoking it.
func loadInterpreted(ctx context.Context, g *globalFlags, dir string, b *bundle.Bundle) (*interpretedLoad, error) {
	l := b.Language
	if vs := l.Validate(b.Source(), languages.ValidationProfile{}); len(vs) > 0 {
		return nil, usagef("%s: %v", dir, vs[0])
	}
	tmp, err := filepath.Abs(filepath.Join(g.data(), "tmp"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	il := &interpretedLoad{g: g}
	if il.work, err = os.MkdirTemp(tmp, "plugin-"); err != nil {
		return nil, err
	}
	wasm, opts, err := b.LoadOptions(ctx, bundle.LoadEnv{ScriptDir: filepath.Join(il.work, "src")})
	if err != nil {
		il.close()
		return nil, err
	}
	il.script = opts.Script
	if il.h, err = newHost(ctx, g); err != nil {
		il.close()
		return nil, err
	}
	opts.Isolation, opts.FirstTime, opts.CheckOnly = host.IsolationFresh, g.progress().preparer(l.Info().Name), true
	il.mod, err = il.h.Load(ctx, wasm, opts)
	if err != nil {
		il.close()
		return nil, err
	}
	return il, nil
}

// buildInterpreted is `moat build` of an interpreted plugin: it checks and
// prepares it, says so in one line, and writes nothing.
func buildInterpreted(ctx context.Context, g *globalFlags, dir string, mf *policy.Manifest, l languages.Language) error {
	if c, ok := l.(languages.Checker); ok {
		if err := c.Available(); err != nil {
			return err
		}
	}
	b, err := bundle.OpenScript(dir)
	if err != nil {
		return usagef("%v", err)
	}
	il, err := loadInterpreted(ctx, g, dir, b)
	if err != nil {
		return err
	}
	defer il.close()
	snap := "no snapshot (it starts from its entry file each call)"
	if il.script.Resident {
		snap = "its snapshot is made when it is first loaded to serve calls (that runs its top level, under its grants)"
	}
	fmt.Fprintf(os.Stderr, "==> %s (%s) checked: manifest, %d action(s), sources; interpreter compiled into the cache; %s; nothing to write: its sources are the module\n",
		termSafe(mf.Name), l.Info().Name, len(mf.Actions), snap)
	return nil
}

// printInterpretedInfo is the part of `moat inspect` only an interpreted
// plugin has: its language, interpreter and requested grants.
func printInterpretedInfo(w io.Writer, mf *policy.Manifest, l languages.Language, sc *host.Script) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	info := l.Info()
	fmt.Fprintf(tw, "language:\t%s (interpreted; the sources are the module)\n", info.Name)
	fmt.Fprintf(tw, "interpreter:\t%s\n", termSafe(info.Toolchain))
	mode := "runs its entry file per call"
	if sc.Resident {
		mode = "resident (its snapshot is made when it is loaded to serve calls)"
	}
	fmt.Fprintf(tw, "instances:\t%s\n", mode)
	tw.Flush()
	if mf.Capabilities.IsZero() {
		fmt.Fprintln(w, "grants: none requested")
		return
	}
	fmt.Fprintln(w, "grants (requested by moat.yaml; the profile decides):")
	out, err := yaml.Marshal(mf.Capabilities)
	if err != nil {
		return
	}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Fprintf(w, "  %s\n", termSafe(line))
	}
}
