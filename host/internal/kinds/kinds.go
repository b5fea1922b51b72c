// Package kinds is the one registry of module kinds: each kind is claimed
// once, by the host's loader that runs it or by the driver that
// host/driver.Register adds. A kind registers itself where it is
// implemented (caddy's modules do the same), so adding one edits no list,
// and a second claim of a name is a programming error caught at init.
package kinds

import (
	"fmt"
	"sync"
)

var (
	mu      sync.Mutex
	claimed = map[string]string{}
)

// Claim records that owner runs modules of kind. It panics if kind is
// empty or already claimed, naming both owners.
func Claim(kind, owner string) {
	mu.Lock()
	defer mu.Unlock()
	if kind == "" {
		panic(fmt.Sprintf("moat: %s claims a module kind with no name", owner))
	}
	if prev, dup := claimed[kind]; dup {
		panic(fmt.Sprintf("moat: module kind %q is claimed twice: by %s, and by %s", kind, prev, owner))
	}
	claimed[kind] = owner
}
