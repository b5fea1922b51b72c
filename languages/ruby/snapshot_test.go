package ruby_test

import (
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
)

// A run from the snapshot matches a cold one (a RUBY... variable in the
// environment makes a run start cold: CRuby reads those as it starts).
func TestSnapshotMatchesCold(t *testing.T) {
	tests := []struct {
		name, script, stdin string
		args                []string
	}{
		{"argv stdin env status", `puts ARGV.inspect, $stdin.gets, ENV.keys.reject { |k| k.start_with?("RUBY") }.sort.inspect, ENV["GREETING"], $0
exit 3`, "line\n", []string{"a", "-b", "ünï", "it's"}},
		{"uncaught exception", "def f = raise(ArgumentError, 'boom')\nf\n", "", nil},
		{"syntax error", "def (\n", "", nil},
		{"exit! and abort", "$stdout.puts 'x'\nabort 'bad input'\n", "", nil},
		{"no processes", "begin; system('ls'); rescue NotImplementedError => e; puts e.message; end\n", "", nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if i >= 2 {
				testenv.Slow(t, "a cold start of CRuby per case (about 1 CPU-s); argv, stdin, env, status and an exception show the path")
			}
			in := languages.RunInput{Stdin: []byte(tt.stdin), Args: tt.args, Env: map[string]string{"GREETING": "hi"}}
			warm, err := run(t, in, "main.rb", tt.script)
			if err != nil {
				t.Fatal(err)
			}
			in.Env = map[string]string{"GREETING": "hi", "RUBY_MOAT_COLD": "1"}
			cold, err := run(t, in, "main.rb", tt.script)
			if err != nil {
				t.Fatal(err)
			}
			if string(warm.Stdout) != string(cold.Stdout) || string(warm.Stderr) != string(cold.Stderr) || warm.ExitCode != cold.ExitCode {
				t.Errorf("snapshot and cold runs differ:\nsnap: %q %q %d\ncold: %q %q %d", warm.Stdout, warm.Stderr, warm.ExitCode, cold.Stdout, cold.Stderr, cold.ExitCode)
			}
		})
	}
}

// Runs from the image share nothing: what one leaves behind the next does
// not see, and they draw different random numbers.
func TestSnapshotRunsAreFresh(t *testing.T) {
	script := "puts [$left_behind.inspect, defined?(LeftBehind).inspect, rand].join(' ')\n$left_behind = 1\nLeftBehind = 2\n"
	first, err := run(t, languages.RunInput{}, "main.rb", script)
	if err != nil {
		t.Fatal(err)
	}
	second, err := run(t, languages.RunInput{}, "main.rb", script)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{string(first.Stdout), string(second.Stdout)} {
		if len(out) < 10 || out[:10] != "nil nil 0." {
			t.Fatalf("a run saw another's state: %q then %q", first.Stdout, second.Stdout)
		}
	}
	if string(first.Stdout) == string(second.Stdout) {
		t.Errorf("two runs drew the same random number: %q", first.Stdout)
	}
}
