package child

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Rlimits are the resource limits set on a confined child before it execs.
// Zero leaves a limit unchanged (except Core, which is always 0).
type Rlimits struct {
	AddressSpace uint64 // RLIMIT_AS, bytes
	CPUSeconds   uint64 // RLIMIT_CPU soft limit; the hard limit is one second more (SIGXCPU, then SIGKILL)
	FileSize     uint64 // RLIMIT_FSIZE, bytes
	OpenFiles    uint64 // RLIMIT_NOFILE
	Procs        uint64 // RLIMIT_NPROC: counts every process of the real uid system-wide
}

// ApplyRlimits sets the limits on the calling process. NPROC is skipped when
// the real uid is 0 (the kernel ignores it for root); call it after the
// uid switch or pass uid so it is known. Core dumps are always disabled.
func ApplyRlimits(r Rlimits, uid int) error {
	set := func(name string, res int, soft, hard uint64) error {
		var cur unix.Rlimit
		if unix.Getrlimit(res, &cur) == nil && hard > cur.Max {
			hard = cur.Max // raising a hard limit needs privilege; never raise
		}
		soft = min(soft, hard)
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: soft, Max: hard}); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %w", name, soft, err)
		}
		return nil
	}
	if err := set("CORE", unix.RLIMIT_CORE, 0, 0); err != nil {
		return err
	}
	if r.AddressSpace > 0 {
		if err := set("AS", unix.RLIMIT_AS, r.AddressSpace, r.AddressSpace); err != nil {
			return err
		}
	}
	if r.CPUSeconds > 0 {
		if err := set("CPU", unix.RLIMIT_CPU, r.CPUSeconds, r.CPUSeconds+1); err != nil {
			return err
		}
	}
	if r.FileSize > 0 {
		if err := set("FSIZE", unix.RLIMIT_FSIZE, r.FileSize, r.FileSize); err != nil {
			return err
		}
	}
	if r.OpenFiles > 0 {
		if err := set("NOFILE", unix.RLIMIT_NOFILE, r.OpenFiles, r.OpenFiles); err != nil {
			return err
		}
	}
	if r.Procs > 0 && uid != 0 {
		if err := set("NPROC", unix.RLIMIT_NPROC, r.Procs, r.Procs); err != nil {
			return err
		}
	}
	return nil
}
