package sessions

import (
	"strings"
	"testing"
)

// TestRel holds the files API's path rule: a path beneath /home/user,
// absolute or relative, cleaned; anything that leaves it, names another
// absolute place, holds NUL or is too long is refused before the kernel
// sees it (os.Root then refuses what a symbolic link would add).
func TestRel(t *testing.T) {
	for _, tc := range []struct {
		in        string
		allowRoot bool
		want      string // "" refused
	}{
		{"a.txt", false, "a.txt"},
		{"/home/user/a.txt", false, "a.txt"},
		{"/home/user/d/../a.txt", false, "a.txt"},
		{"./d//e/", false, "d/e"},
		{"/home/user", true, "."},
		{"", true, "."},
		{"", false, ""},
		{"/home/user", false, ""},
		{".", false, ""},
		{"..", false, ""},
		{"../x", false, ""},
		{"d/../../x", false, ""},
		{"/home/user/../x", false, ""},
		{"/home/userx/a", false, ""},
		{"/etc/passwd", false, ""},
		{"a\x00b", false, ""},
		{strings.Repeat("a", MaxPathBytes+1), false, ""},
	} {
		got, err := rel(tc.in, tc.allowRoot)
		if tc.want == "" {
			if err == nil {
				t.Errorf("rel(%.40q) = %q, want a refusal", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("rel(%.40q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestCheckVars bounds what a creator gives as env_vars and metadata.
func TestCheckVars(t *testing.T) {
	many := map[string]string{}
	for i := range MaxEnvVars + 1 {
		many["V"+strings.Repeat("x", i)] = ""
	}
	for _, tc := range []struct {
		vars  map[string]string
		names bool
		ok    bool
	}{
		{map[string]string{"A_1": "v"}, true, true},
		{map[string]string{"1A": "v"}, true, false},
		{map[string]string{"A-B": "v"}, true, false},
		{map[string]string{"a b": "v"}, false, true},
		{map[string]string{"": "v"}, false, false},
		{map[string]string{"A": "v\x00"}, true, false},
		{map[string]string{"A": strings.Repeat("v", MaxEnvValue+1)}, true, false},
		{map[string]string{strings.Repeat("A", MaxEnvName+1): ""}, true, false},
		{many, true, false},
	} {
		if err := checkVars("env_vars", tc.vars, tc.names); (err == nil) != tc.ok {
			t.Errorf("checkVars(%.60v): %v, want ok=%v", tc.vars, err, tc.ok)
		}
	}
}
