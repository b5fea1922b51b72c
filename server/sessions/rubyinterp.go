package sessions

import (
	"sync"

	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/languages"
)

// Ruby's contexts. CRuby runs through a driver.Interpreter
// (languages/ruby), which starts every instance after its first from an
// image of that first one's top level (ruby-init, the load path, the
// REPL's top level: ms, not the seconds of a cold start). The image is
// the Interpreter's, and the Interpreter is the Script's: shared by every
// module loaded with that Script. A session's contexts are each a module
// of its own, so each organization gets an Interpreter of its own (as it
// gets a Python base image of its own: contexts.go, baseImages), and the
// session's variables are not in the instance's environment, which the
// image would carry to the next session's context, but given with the
// runs (repl.rb sets them on the first).

// interpreters are the per-organization Interpreters of one language.
type interpreters struct {
	mu sync.Mutex
	by map[[2]string]driver.Interpreter
}

// rubyInterpreter returns org's Interpreter for lang's contexts, made
// from the language (languages.InterpreterProvider) on first use;
// fallback when the language makes none.
func (m *Manager) rubyInterpreter(org, lang string, fallback driver.Interpreter) driver.Interpreter {
	l, err := languages.Lookup(lang)
	ip, ok := l.(languages.InterpreterProvider)
	if err != nil || !ok {
		return fallback
	}
	m.interps.mu.Lock()
	defer m.interps.mu.Unlock()
	if m.interps.by == nil {
		m.interps.by = map[[2]string]driver.Interpreter{}
	}
	k := [2]string{org, lang}
	in := m.interps.by[k]
	if in == nil {
		in = ip.ScriptInterpreter()
		m.interps.by[k] = in
	}
	return in
}
