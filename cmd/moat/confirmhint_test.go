package main

import "testing"

func TestConfirmCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"input dropped", []string{"run", "--data", "d", "p", "greet", "--input", "Bob"}, "moat run --data d p greet --confirm T"},
		{"input= and input-file dropped", []string{"run", "--input=Bob", "p", "greet", "--input-file", "in.txt"}, "moat run p greet --confirm T"},
		{"an old token replaced", []string{"run", "p", "greet", "--confirm", "OLD"}, "moat run p greet --confirm T"},
		{"principal kept", []string{"run", "p", "greet", "--org", "acme", "--user=ann"}, "moat run p greet --org acme --user=ann --confirm T"},
		{"quoted for the shell", []string{"run", "my plugin", "it's", "$(rm -rf /)"}, `moat run 'my plugin' 'it'\''s' '$(rm -rf /)' --confirm T`},
		{"after --, nothing is a flag of moat's", []string{"run", "p", "--", "--input", "x"}, "moat run p --confirm T -- --input x"},
	} {
		if got := confirmCommand("moat", tc.args, "T"); got != tc.want {
			t.Errorf("%s: confirmCommand = %s, want %s", tc.name, got, tc.want)
		}
	}
}
