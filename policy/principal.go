// Package policy decides what a caller may do: who the caller is (a
// Principal), what a module asks for (its Manifest, moat.yaml), what the
// operator grants (a Profile), what that leaves in effect (an Evaluation),
// and whether a module is signed by a key the operator trusts (Sign,
// Verify). It imports abi, policy/egress and internal helpers and no other
// package of ours, so it can be read, tested and reused without the
// runtime; its only outside dependencies are gopkg.in/yaml.v3,
// aead.dev/minisign and golang.org/x/mod/semver.
package policy

import (
	"fmt"
	"strings"
)

// Principal is the caller an invocation runs for: a user acting within an
// organization, holding roles. Every op runs with the caller's principal;
// storage is scoped by its Org, so one organization never sees another's
// data.
type Principal struct {
	User  string   `json:"user"`
	Org   string   `json:"org"`
	Roles []string `json:"roles,omitempty"`
}

// Validate reports a principal that cannot own data: an empty or malformed
// user or organization.
func (p Principal) Validate() error {
	if err := validName("org", p.Org); err != nil {
		return err
	}
	return validName("user", p.User)
}

// HasRole reports whether the principal holds role.
func (p Principal) HasRole(role string) bool {
	for _, r := range p.Roles {
		if r == role {
			return true
		}
	}
	return false
}

func (p Principal) String() string {
	if len(p.Roles) == 0 {
		return p.User + "@" + p.Org
	}
	return p.User + "@" + p.Org + "[" + strings.Join(p.Roles, ",") + "]"
}

// validName accepts 1–128 characters of letters, digits and ._-@+ so that a
// name is safe in logs, file names and URLs.
func validName(field, s string) error {
	if s == "" {
		return fmt.Errorf("principal %s is empty: set it (for example --%s acme)", field, field)
	}
	if len(s) > 128 {
		return fmt.Errorf("principal %s is %d bytes long: the limit is 128", field, len(s))
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-@+", r)
		if !ok {
			return fmt.Errorf("principal %s %q contains %q: use letters, digits and . _ - @ +", field, s, r)
		}
	}
	return nil
}
