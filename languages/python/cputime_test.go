package python_test

import (
	"syscall"
	"testing"
	"time"
)

// cpuTimer reports CPU time per operation next to wall time: on a shared
// machine wall time measures the neighbours as much as the code. who is
// RUSAGE_SELF for work in this process, RUSAGE_CHILDREN for subprocesses.
type cpuTimer struct {
	who   int
	start time.Duration
}

func startCPU(who int) cpuTimer { return cpuTimer{who: who, start: cpuTime(who)} }

func (c cpuTimer) report(b *testing.B) {
	b.ReportMetric(float64(cpuTime(c.who)-c.start)/float64(b.N)/1e6, "cpu-ms/op")
}

func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
