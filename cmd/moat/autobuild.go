package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// autoBuildTimeout bounds the build moat run and moat dev start by
// themselves (the first Go build on a machine compiles the standard
// library).
const autoBuildTimeout = 5 * time.Minute

// buildIfStale builds the plugin in dir when its manifest names a
// compiled language, dir holds its sources, and its module is missing or
// stale, before moat run reads the module. Stale means: a source file (one
// with the language's extensions, a build file: go.mod, Cargo.toml, ...,
// or one of its pages' files, which the build embeds) was modified after the module was written. A directory with a
// module and no sources (a plugin as shipped) is never built, and
// moat.yaml is not a source: the host reads it at each run. Modification
// times rather than a recorded digest: nothing to store beside the
// plugin, and an edit is what makes a module stale; a module that a build
// of another moat wrote is not rebuilt until a source changes. It reports
// whether it built.
func buildIfStale(ctx context.Context, g *globalFlags, dir string) (bool, error) {
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return false, nil
	}
	mfPath := filepath.Join(dir, "moat.yaml")
	mf, err := policy.LoadManifest(mfPath)
	if err != nil || mf.Language == "" {
		return false, nil // not a plugin from source: moat run says what is missing
	}
	lang, err := languages.Lookup(mf.Language)
	if err != nil {
		return false, nil
	}
	if _, ok := lang.(languages.PluginBuilder); !ok {
		return false, nil
	}
	name := mf.Module
	if name == "" {
		name = mf.Name + ".wasm"
	}
	module := filepath.Join(dir, name)
	why, err := staleReason(dir, module, lang.Info().Extensions, mf.PageFiles())
	if err != nil {
		return false, fmt.Errorf("run %s: checking whether %s is up to date: %w", dir, module, err)
	}
	if why == "" {
		return false, nil
	}
	fmt.Fprintf(os.Stderr, "==> %s: building it first (moat build %s)\n", why, dir)
	return true, buildPlugin(ctx, g, dir, "", autoBuildTimeout)
}

// buildFiles are the files besides sources whose change changes a build.
var buildFiles = []string{"go.mod", "go.sum", "Cargo.toml", "Cargo.lock", "asconfig.json"}

// staleReason returns why module needs building from the sources in dir
// (files with one of exts, buildFiles, and the pages' files, which the
// build puts in the module), or "" when it is newer than every one of
// them or dir holds none.
func staleReason(dir, module string, exts, pageFiles []string) (string, error) {
	var sources int
	var newest string
	var newestTime time.Time
	err := walkSources(dir, func(p string, fi fs.FileInfo) error {
		if !slices.Contains(exts, filepath.Ext(p)) && !slices.Contains(buildFiles, filepath.Base(p)) && !slices.Contains(pageFiles, filepath.Base(p)) {
			return nil
		}
		sources++
		if fi.ModTime().After(newestTime) {
			newest, newestTime = p, fi.ModTime()
		}
		return nil
	})
	if err != nil || sources == 0 {
		return "", err
	}
	mst, err := plugintree.Stat(module) // a link or FIFO at the module's name is refused, not followed
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("%s does not exist", module), nil
	}
	if err != nil {
		return "", err
	}
	if newestTime.After(mst.ModTime()) {
		return fmt.Sprintf("%s is newer than %s", newest, module), nil
	}
	return "", nil
}

// maxSourceFiles bounds the files walkSources looks at.
const maxSourceFiles = 10000

// walkSources calls fn with each file of dir that moat build copies (a
// plugin's sources, moat.yaml included): regular files, not in dot
// directories, node_modules or target, and not modules or signatures. The
// tree is read by the one rule (package plugintree): a link or a special
// file is refused, naming it.
func walkSources(dir string, fn func(path string, fi fs.FileInfo) error) error {
	return plugintree.Walk(dir, plugintree.Options{SkipOutputs: true, MaxFiles: maxSourceFiles}, func(e plugintree.Entry) error {
		if e.Info.IsDir() || strings.HasSuffix(e.Rel, ".wasm") || strings.HasSuffix(e.Rel, ".minisig") {
			return nil
		}
		return fn(e.Path, e.Info)
	})
}
