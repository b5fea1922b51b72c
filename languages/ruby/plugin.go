package ruby

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// A Ruby plugin (moat.yaml with language: ruby, main.rb) is served by the
// host's resident-script machinery (host/resident.go): the module's pool,
// isolation, limits, the op device bound to each call, the caller's
// principal and the audit trail are the host's, as for JavaScript and
// Python. Only the interpreter's start is Ruby's: ruby.wasm is a reactor,
// not a WASI command, so the host asks this package (host.Interpreter) to
// compile it in the Ruby engine's runtime, which provides its imports, and
// to run main.rb on each instance it makes there: _initialize, ruby-init,
// ruby-init-loadpath, then one rb-eval-string-protect of pluginWrapper,
// which loads main.rb (its handlers registered with Moat.action) and then
// serves calls through moat.next until the host stops the instance. That
// eval returns only when the instance ends.

var (
	_ languages.InterpreterProvider = Language{}
	_ languages.ResidentDetector    = Language{}
)

// ScriptInterpreter implements languages.InterpreterProvider.
func (Language) ScriptInterpreter() host.Interpreter { return pluginInterpreter{} }

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

type pluginInterpreter struct{}

// Compile implements host.Interpreter: the engine of h's cache directory,
// the one `moat exec` uses, compiles the interpreter once per process.
func (pluginInterpreter) Compile(ctx context.Context, h *host.Host, wasm []byte) (wazero.Runtime, wazero.CompiledModule, error) {
	e, err := engineFor(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	cm, err := e.compile(ctx, wasm, nil)
	if err != nil {
		return nil, nil, err
	}
	return e.rt, cm, nil
}

// Run implements host.Interpreter. args[0] is the script (/src/main.rb).
// It returns nil when the script served until the host stopped it, and an
// error naming the exception when its top-level code raised or the serve
// loop ended with one.
func (pluginInterpreter) Run(ctx context.Context, mod api.Module, args []string) error {
	if len(args) == 0 {
		return errors.New("ruby: the plugin names no script (Script.Args[0])")
	}
	ctx = context.WithValue(ctx, handlesKey{}, &handles{})
	if init := mod.ExportedFunction("_initialize"); init != nil { // wasi-vfs unpacks the stdlib
		if _, err := init.Call(ctx); err != nil {
			return err
		}
	}
	g := guest{ctx: ctx, mod: mod, realloc: mod.ExportedFunction(exportRealloc)}
	argv := []string{"ruby", "--disable-gems", "-EUTF-8", "-e_=0"}
	list, err := g.stringList(argv)
	if err != nil {
		return err
	}
	if _, err := mod.ExportedFunction(exportInit).Call(ctx, uint64(list), uint64(len(argv))); err != nil {
		return err
	}
	if _, err := mod.ExportedFunction(exportInitLoadpath).Call(ctx); err != nil {
		return err
	}
	src, n, err := g.cstring(pluginWrapper(args[0]))
	if err != nil {
		return err
	}
	r, err := mod.ExportedFunction(exportEval).Call(ctx, uint64(src), uint64(n))
	if err != nil {
		return err
	}
	handle, state, err := g.pair(uint32(r[0]))
	if err != nil {
		return err
	}
	if state != 0 {
		return fmt.Errorf("ruby: the script ended with an uncaught non-exception (protect state %d)", state)
	}
	r, err = mod.ExportedFunction(exportRStringPtr).Call(ctx, uint64(handle))
	if err != nil {
		return err
	}
	ptr, size, err := g.pair(uint32(r[0]))
	if err != nil {
		return err
	}
	b, ok := mod.Memory().Read(ptr, uint32(size))
	if !ok {
		return fmt.Errorf("ruby: rstring-ptr returned [%d, +%d), outside memory", ptr, size)
	}
	// Anything but "0" is the script's own doing: an exception it raised
	// or an exit it called.
	status := string(b)
	if status == "0" {
		return nil
	}
	msg := strings.TrimPrefix(status, "error: ")
	return &host.ScriptError{Message: msg, OutOfMemory: strings.HasPrefix(msg, "NoMemoryError:")}
}

// pluginWrapper is the Ruby an instance evaluates: main.rb loaded as the
// main program with the SDK on $LOAD_PATH, then Moat.serve, which returns
// when the host stops the instance. It evaluates to "0" then, to the exit
// status of an exit, or to "error: " and the first line of the exception
// that ended the script (printed whole on stderr, the host's log).
func pluginWrapper(script string) string {
	return noProcesses + `$stdout.sync = true
$stderr.sync = true
$0 = ` + rubyQuote(script) + `
$LOAD_PATH.unshift(File.dirname($0))
begin
  require "moat"
  load($0)
  Moat.serve
  "0"
rescue SystemExit => e
  e.success? ? "0" : "the script exited with status #{e.status}"
rescue Exception => e
  $stderr.print(e.full_message(highlight: false))
  "error: #{e.class}: #{e.message.lines.first.to_s.chomp}"
end`
}
