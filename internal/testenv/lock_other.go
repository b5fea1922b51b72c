//go:build !linux

package testenv

import "os"

// lockFile is a no-op where moat's timing tests do not run (the guests'
// packages build for wasip1, whose tests import this package for its
// other helpers): Timing's in-process mutex still serializes them.
func lockFile(*os.File) error { return nil }
