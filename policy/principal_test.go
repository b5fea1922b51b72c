package policy_test

import (
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

func TestPrincipalValidate(t *testing.T) {
	for _, tt := range []struct {
		p    policy.Principal
		want string // "" means valid
	}{
		{policy.Principal{User: "ann", Org: "acme"}, ""},
		{policy.Principal{User: "ann@example.com", Org: "acme-1.eu"}, ""},
		{policy.Principal{User: "ann"}, "principal org is empty"},
		{policy.Principal{Org: "acme"}, "principal user is empty"},
		{policy.Principal{User: "ann", Org: "ac me"}, `contains ' '`},
		{policy.Principal{User: "ann", Org: "a/../b"}, `contains '/'`},
		{policy.Principal{User: strings.Repeat("u", 129), Org: "acme"}, "the limit is 128"},
	} {
		err := tt.p.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: got %v, want %q", tt.p, err, tt.want)
		}
	}
	if s := (policy.Principal{User: "ann", Org: "acme", Roles: []string{"admin"}}).String(); s != "ann@acme[admin]" {
		t.Errorf("String() = %q", s)
	}
}
