package policy_test

import (
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

// TestAuthorizeExec: exec_roles decide who may run code of its own; a
// profile without them (or no profile) lets every valid principal; a role
// name that is not one is refused at load, naming the field.
func TestAuthorizeExec(t *testing.T) {
	coders, err := policy.ParseProfile("coders.yaml", []byte("name: coders\nexec_roles: [coder, admin]\n"))
	if err != nil {
		t.Fatal(err)
	}
	open, err := policy.ParseProfile("open.yaml", []byte("name: open\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		p    *policy.Profile
		who  policy.Principal
		want string // "" allowed, else in the error
	}{
		{"a coder", coders, policy.Principal{User: "c", Org: "o", Roles: []string{"coder"}}, ""},
		{"an admin", coders, policy.Principal{User: "a", Org: "o", Roles: []string{"viewer", "admin"}}, ""},
		{"a viewer", coders, policy.Principal{User: "v", Org: "o", Roles: []string{"viewer"}}, "requires one of roles [coder admin]; v@o has [viewer] (rule: profile coders exec_roles)"},
		{"no roles", coders, policy.Principal{User: "n", Org: "o"}, "n@o has no roles"},
		{"anyone, without exec_roles", open, policy.Principal{User: "n", Org: "o"}, ""},
		{"anyone, without a profile", nil, policy.Principal{User: "n", Org: "o"}, ""},
		{"no principal", open, policy.Principal{}, "denied"},
	} {
		err := tt.p.AuthorizeExec(tt.who)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	if _, err := policy.ParseProfile("bad.yaml", []byte("name: bad\nexec_roles: [\"two words\"]\n")); err == nil || !strings.Contains(err.Error(), "exec_roles[0]") {
		t.Errorf("a role name with a space: %v", err)
	}
}
