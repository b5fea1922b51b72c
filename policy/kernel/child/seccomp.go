package child

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Instruction is one classic BPF instruction, as struct sock_filter.
type Instruction struct {
	Code uint16 `json:"c"`
	Jt   uint8  `json:"t"`
	Jf   uint8  `json:"f"`
	K    uint32 `json:"k"`
}

// Filter is one compiled seccomp program.
type Filter []Instruction

// LoadFilters installs the filters on every thread of the calling process
// (SECCOMP_FILTER_FLAG_TSYNC), with no_new_privs set. They survive execve.
func LoadFilters(filters []Filter) error {
	if len(filters) == 0 {
		return errors.New("seccomp: no compiled filter in the spec")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	for i, f := range filters {
		if len(f) == 0 {
			return fmt.Errorf("seccomp: filter %d is empty", i)
		}
		raw := make([]unix.SockFilter, len(f))
		for j, in := range f {
			raw[j] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
		}
		prog := unix.SockFprog{Len: uint16(len(raw)), Filter: &raw[0]}
		_, _, errno := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
		if errno != 0 {
			return fmt.Errorf("seccomp: load filter %d: %w", i, errno)
		}
	}
	return nil
}
