package ruby_test

import (
	"testing"

	"github.com/moat-sandbox/moat/languages/internal/interptest"
)

// TestResident: the shared resident-plugin suite (interptest), in Ruby.
// Ruby has no per-call scripts: one without Moat.action is refused.
func TestResident(t *testing.T) {
	interpreter(t)
	suite.TestResident(t, interptest.ResidentScripts{
		File: "main.rb",
		Main: `require "moat"

$calls = 0

Moat.action("echo") { |input| input }

Moat.action("count") do |_input|
  $calls += 1
  $calls.to_s
end

Moat.action("fail") { |_input| raise Moat::Error.new("invalid_argument", "no thanks") }

Moat.action("put") do |input|
  Moat.kv.put("k", input)
  Moat.kv.get("k")
end

Moat.action("spin") { |_input| loop {} }

Moat.action("nap") { |_input| sleep 60 }

Moat.action("balloon") do |_input|
  a = []
  loop { a << ("x" * (1 << 20)) }
end
`,
		TopLevelOp: `require "moat"

Moat.kv.get("k")
Moat.action("echo") { |input| input }
`,
		Wrong: `require "moat"

Moat.action("other") { |input| input }
`,
		Classic:        `print $stdin.read` + "\n",
		ClassicRefused: `Moat.action("greet")`,
	})
}
