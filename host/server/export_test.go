package server

// SetBeforeCommit makes every upload of s call f after its load and before
// it stores the version: where a racing request lands in the tests.
func SetBeforeCommit(s *Server, f func()) { s.modules.beforeCommit = f }
