package ruby

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/moat-sandbox/moat/languages"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// A Ruby plugin (moat.yaml with language: ruby, main.rb) is served by the
// host's resident-script machinery (host/resident.go): the module's pool,
// isolation, limits, the op device bound to each call, the caller's
// principal and the audit trail are the host's, as for JavaScript and
// Python. Only the interpreter's start is Ruby's: ruby.wasm is a reactor,
// not a WASI command, so the host asks this package (driver.Interpreter) to
// compile it in the Ruby engine's runtime, which provides its imports, and
// to run main.rb on each instance it makes there: _initialize, ruby-init,
// ruby-init-loadpath, an rb-eval-string-protect of pluginTopLevel, which
// loads main.rb (its handlers registered with Moat.action), then one of
// pluginServe, which serves calls through moat.next until the host stops
// the instance (that eval returns only when the instance ends). Between
// the two evals the first instance's state is copied (package wasmsnap),
// and later instances of the plugin start from that copy: restored, a new
// random seed, pluginServe. The top level runs once per load, not per
// instance.

var (
	_ languages.InterpreterProvider = Language{}
	_ languages.ResidentDetector    = Language{}
	_ driver.Resumer                = (*pluginInterpreter)(nil)
)

// ScriptInterpreter implements languages.InterpreterProvider.
func (Language) ScriptInterpreter() driver.Interpreter { return &pluginInterpreter{} }

// HandlerHint implements languages.InterpreterProvider.
func (Language) HandlerHint() string {
	return `require "moat" and register each action with Moat.action("greet") { |input| ... } (guests/ruby/README.md)`
}

// Resident implements languages.ResidentDetector: the entry file calls
// Moat.action. Comments and strings do not count: the lexer drops them.
func (Language) Resident(src languages.Source) bool {
	toks := lex(string(src.Entry().Content))
	for i := 0; i+2 < len(toks); i++ {
		if toks[i].kind == tokName && toks[i].text == "Moat" && isPunct(toks[i+1], ".") &&
			toks[i+2].kind == tokName && toks[i+2].text == "action" {
			return true
		}
	}
	return false
}

type pluginInterpreter struct {
	globals int // how many globals the compiled interpreter exports

	// The plugin's image: the first instance's state after its top level
	// (Wizer's case: the reactor's eval returned, its wasm stack is
	// empty), which later instances are started from instead of running
	// ruby-init and the top level again. Kept for the plugin's load.
	mu  sync.Mutex
	img *wasmsnap.Image
}

func (p *pluginInterpreter) Compile(ctx context.Context, env driver.InterpreterEnv, wasm []byte) (wazero.Runtime, wazero.CompiledModule, error) {
	e, err := engineFor(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	cm, err := e.compile(ctx, wasm, nil)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	p.globals = e.globals[cm]
	e.mu.Unlock()
	return e.rt, cm, nil
}

// Run starts an instance: from the plugin's image when there is one
// (restored, then a new seed and the serve loop), else from nothing
// (_initialize, ruby-init, the load path, the top level), keeping the
// image of the first instance whose top level succeeded.
func (p *pluginInterpreter) Run(ctx context.Context, mod api.Module, args []string) error {
	if len(args) == 0 {
		return errors.New("ruby: the plugin names no script (Script.Args[0])")
	}
	ctx = context.WithValue(ctx, handlesKey{}, &handles{})
	g := guest{ctx: ctx, mod: mod, realloc: mod.ExportedFunction(exportRealloc)}
	p.mu.Lock()
	img := p.img
	p.mu.Unlock()
	if img != nil {
		if err := img.Restore(mod); err != nil {
			return err
		}
		return g.scriptStatus(g.eval(pluginServe))
	}
	if init := mod.ExportedFunction("_initialize"); init != nil { // wasi-vfs unpacks the stdlib
		if _, err := init.Call(ctx); err != nil {
			return err
		}
	}
	if err := g.start(nil); err != nil {
		return err
	}
	if err := g.scriptStatus(g.eval(pluginTopLevel(args[0]))); err != nil {
		return err
	}
	if snap, err := wasmsnap.Capture(mod, p.globals); err == nil {
		p.mu.Lock()
		if p.img == nil {
			p.img = snap
		}
		p.mu.Unlock()
	}
	return g.scriptStatus(g.eval(pluginServe))
}

// CaptureGlobals implements driver.Resumer: the globals Compile's
// module exports (wasmsnap.Prepare's).
func (p *pluginInterpreter) CaptureGlobals(wazero.CompiledModule) int { return p.globals }

// Resume implements driver.Resumer: a copy of a live instance (a
// session's fork or pause) is entered by the reactor's own eval, nested
// on the copy's frames as a C extension's call into Ruby is, and serves
// again (Moat.resume_copy: a device of its own, a new seed). Those frames
// never run again; each copy nests once more (server/sessions bounds the
// generations).
func (p *pluginInterpreter) Resume(ctx context.Context, mod api.Module, _ []uint64) error {
	ctx = context.WithValue(ctx, handlesKey{}, &handles{})
	g := guest{ctx: ctx, mod: mod, realloc: mod.ExportedFunction(exportRealloc)}
	return g.scriptStatus(g.eval(pluginResume))
}

var pluginResume = pluginRescue(`Moat.resume_copy`)

// scriptStatus reads what a plugin wrapper evaluated to: "0", or why the
// script failed.
func (g guest) scriptStatus(handle uint32, err error) error {
	if err != nil {
		return err
	}
	status, err := g.text(handle)
	if err != nil {
		return err
	}
	if status == "0" {
		return nil
	}
	msg := strings.TrimPrefix(status, "error: ")
	return &driver.ScriptError{Message: msg, OutOfMemory: strings.HasPrefix(msg, "NoMemoryError:")}
}

// pluginTopLevel loads the plugin's script (its top level registers the
// handlers) and readies the instance to be copied; pluginServe serves.
// Both end as a status: "0", or the failure (exit or exception).
func pluginTopLevel(script string) string {
	return noProcesses + `$stdout.sync = true
$stderr.sync = true
$0 = ` + rubyQuote(script) + `
$LOAD_PATH.unshift(File.dirname($0))
` + pluginRescue(`require "moat"
  load($0)
  Moat.before_snapshot`)
}

var pluginServe = pluginRescue(`Random.srand # not the image's sequence
  Moat.serve`)

func pluginRescue(body string) string {
	return `begin
  ` + body + `
  "0"
rescue SystemExit => e
  e.success? ? "0" : "the script exited with status #{e.status}"
rescue Exception => e
  $stderr.print(e.full_message(highlight: false))
  "error: #{e.class}: #{e.message.lines.first.to_s.chomp}"
end`
}
