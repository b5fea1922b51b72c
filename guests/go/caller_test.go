package moat

import (
	"errors"
	"reflect"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// TestCaller: Caller sends moat.caller with an empty request and reads
// the principal back; no roles is an empty list; a reply naming no user
// is an error, never an empty principal to key data by.
func TestCaller(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	reply := abi.CallerResponse{User: "ann", Org: "acme", Roles: []string{"admin", "viewer"}, CorrelationID: "c-1"}
	var sent []byte
	h.ops[abi.OpCaller] = func(req []byte) ([]byte, error) {
		sent = append([]byte(nil), req...)
		return abi.Marshal(&reply)
	}
	p, err := Caller()
	if err != nil || !reflect.DeepEqual(p, Principal{User: "ann", Org: "acme", Roles: []string{"admin", "viewer"}, CorrelationID: "c-1"}) {
		t.Fatalf("Caller = %+v, %v", p, err)
	}
	if string(sent) != "{}" {
		t.Errorf("the request was %s, want {}", sent)
	}
	if !p.HasRole("admin") || p.HasRole("adm") {
		t.Errorf("HasRole of %v", p.Roles)
	}
	reply = abi.CallerResponse{User: "bob", Org: "acme"}
	if p, err := Caller(); err != nil || p.Roles == nil || len(p.Roles) != 0 || p.User != "bob" {
		t.Errorf("Caller without roles = %#v, %v; want an empty, non-nil list", p, err)
	}
	reply = abi.CallerResponse{Org: "acme"}
	var ae *abi.Error
	if _, err := Caller(); !errors.As(err, &ae) || ae.Code != abi.CodeInternal {
		t.Errorf("Caller of a reply without a user = %v, want internal", err)
	}
}
