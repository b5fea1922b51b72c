package hostile

import (
	"syscall"
	"time"
)

// ProcessCPU is this process's user and system time so far: what the
// deadline tests read before and after a pause, to see that nothing of a
// guest ended at its deadline runs on.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
