package extism

import "net"

// SetResolver makes the HTTP clients of modules loaded from now on resolve
// names with r (a test's own DNS server); the returned function restores
// the default.
func SetResolver(r *net.Resolver) func() {
	old := testResolver.Swap(r)
	return func() { testResolver.Store(old) }
}
