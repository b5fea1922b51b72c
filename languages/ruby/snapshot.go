package ruby

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/tetratelabs/wazero"
)

// Runs from a snapshot. Most of a cold run is CRuby starting: wasi-vfs
// unpacking the standard library's index, ruby-init, the load path, the
// prelude. All of it lands in linear memory and three globals, and the
// reactor's exports return between those steps with an empty wasm stack,
// so this is Wizer's case exactly: the engine runs them once, captures the
// instance's state (package wasmsnap), and each run restores it into a
// fresh instance of the same compiled module and evaluates the wrapper,
// which first gives the run what the image cannot know: ARGV, ENV and a
// new random seed.
//
// A run starts cold instead when it has no /src (the capture's libc
// listed /src as a preopen), when its environment sets a RUBY... variable
// (read only as CRuby starts), or when an argument or variable holds a NUL
// (the wrapper is a C string). What the image fixes for every run is
// CRuby's hash seed: see SECURITY.md ("Snapshots").

// imageState is one compiled interpreter's image, made once.
type imageState struct {
	mu     sync.Mutex
	img    *wasmsnap.Image
	failed error
}

// capturePrelude is what the capture evaluates after ruby-init; its
// digest is part of the image's name, so a change to it is a new image.
var capturePrelude = noProcesses + "$stdout.sync = true\n$stderr.sync = true\nnil"

// imageSteps names the capture's steps beside the prelude: change it with
// them.
const imageSteps = "initialize(/src,scratch /),ruby-init(--disable-gems -EUTF-8 -e_=0 --),loadpath"

// image returns the image of cm, capturing it on first use; nil when the
// capture failed, so that runs start cold.
// preparing, when set, is told of the capture: first-time work, once per
// cache directory (the machine's, with a host that has one).
func (e *engine) image(ctx context.Context, cm wazero.CompiledModule, preparing func(string) func()) *wasmsnap.Image {
	e.mu.Lock()
	key := e.keys[cm]
	st, ok := e.images[cm]
	if !ok {
		st = &imageState{}
		e.images[cm] = st
	}
	globals := e.globals[cm]
	e.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.img != nil || st.failed != nil {
		return st.img
	}
	steps := sha256.Sum256([]byte(imageSteps + "\x00" + capturePrelude))
	path := filepath.Join(e.cacheDir, "snapshots", "ruby-"+hex.EncodeToString(key[:16])+"-"+hex.EncodeToString(steps[:8])+".img")
	if img := wasmsnap.Load(path, globals); img != nil {
		st.img = img
		return img
	}
	if preparing != nil {
		defer preparing("load")()
	}
	img, err := e.capture(ctx, cm, globals)
	if err != nil {
		st.failed = err
		return nil
	}
	st.img = img
	_ = wasmsnap.Save(path, img) // a failed write costs the next process a capture
	return img
}

// capture starts the interpreter as every run does, up to the script,
// and copies its state.
func (e *engine) capture(ctx context.Context, cm wazero.CompiledModule, globals int) (*wasmsnap.Image, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The preopens every run from the image has: /src, then a scratch
	// directory at "/" (an empty one here), in that order.
	dir, err := os.MkdirTemp("", "moat-scratch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	scratch, err := host.OpenScratchFS(host.Scratch{Dir: dir, MaxBytes: 1, MaxFiles: 1})
	if err != nil {
		return nil, err
	}
	defer scratch.Close()
	fsc := scratch.Mount(wazero.NewFSConfig().WithReadOnlyDirMount(e.cacheDir, "/src"))
	mc := wazero.NewModuleConfig().WithName("").WithArgs("ruby").
		WithStdout(io.Discard).WithStderr(io.Discard).
		WithSysWalltime().WithSysNanotime().
		WithStartFunctions("_initialize").
		WithFSConfig(fsc)
	rctx := context.WithValue(cctx, handlesKey{}, &handles{})
	mod, err := e.rt.InstantiateModule(rctx, cm, mc)
	if err != nil {
		return nil, err
	}
	defer mod.Close(context.Background())
	g := guest{ctx: rctx, mod: mod, realloc: mod.ExportedFunction(exportRealloc)}
	if err := g.start(nil); err != nil {
		return nil, err
	}
	if _, err := g.eval(capturePrelude); err != nil {
		return nil, err
	}
	return wasmsnap.Capture(mod, globals)
}

// fromImage is what a run from the image evaluates before scriptWrapper:
// the run's ARGV, ENV and a new seed; false when the run must start cold.
func fromImage(argv []string, env map[string]string) (string, bool) {
	var b strings.Builder
	b.WriteString("ARGV.replace([")
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			return "", false
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(rubyQuote(a))
	}
	b.WriteString("])\nENV.replace({")
	for i, k := range slices.Sorted(maps.Keys(env)) {
		if strings.HasPrefix(k, "RUBY") || strings.ContainsRune(env[k], 0) {
			return "", false
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(rubyQuote(k) + " => " + rubyQuote(env[k]))
	}
	b.WriteString("})\nRandom.srand\nnil")
	return b.String(), true
}

// driveImage restores img into a fresh instance and runs script, as drive
// does cold.
func driveImage(ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule, mc wazero.ModuleConfig, img *wasmsnap.Image, setup, script string) (int, error) {
	mod, err := rt.InstantiateModule(ctx, cm, mc.WithStartFunctions())
	if err != nil {
		return 0, err
	}
	defer mod.Close(context.Background())
	if err := img.Restore(mod); err != nil {
		return 0, err
	}
	g := guest{ctx: ctx, mod: mod, realloc: mod.ExportedFunction(exportRealloc)}
	if _, err := g.eval(setup); err != nil {
		return 0, err
	}
	return g.status(g.eval(scriptWrapper(script)))
}
