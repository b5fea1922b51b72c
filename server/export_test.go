package server

// SetBeforeCommit makes every upload of s call f after its load and before
// it stores the version: where a racing request lands in the tests.
func SetBeforeCommit(s *Server, f func()) { s.modules.beforeCommit = f }

// SetBeforeLoad makes every sync of s (a load on demand or through the
// change feed) call f before it loads a module: where a test holds a load
// in flight. Set it before the load it is for.
func SetBeforeLoad(s *Server, f func(org, name string)) { s.modules.beforeLoad = f }

// Loading is the number of module loads in flight on s.
func Loading(s *Server) int {
	s.modules.flightMu.Lock()
	defer s.modules.flightMu.Unlock()
	return len(s.modules.flights)
}

// PageBridge is the moat-page.js the server serves.
func PageBridge() []byte { return pageBridge }
