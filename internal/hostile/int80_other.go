//go:build !amd64

package hostile

// Int80 does nothing where there is no i386 entry.
func Int80(nr, a1, a2, a3 uintptr) uintptr { return 0 }

const haveInt80 = false
