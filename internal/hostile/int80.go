// Package hostile holds what moat's hostile tests need to act as an
// attacker: system calls through every ABI the kernel offers a process.
package hostile

import "syscall"

// X32Bit marks a system call number as one of the x32 ABI on x86-64.
const X32Bit = 0x40000000

// I386 makes a system call through the i386 entry (int 0x80), as a 64-bit
// process can on x86-64, and returns its result as the errno it stands
// for (0 on success). ok is false where there is no such entry.
func I386(nr, a1, a2, a3 uintptr) (errno syscall.Errno, ok bool) {
	if !haveInt80 {
		return 0, false
	}
	r := int32(Int80(nr, a1, a2, a3))
	if r < 0 && r > -4096 {
		return syscall.Errno(-r), true
	}
	return 0, true
}

// X32 makes a system call through the x32 numbering (bit 30 set).
func X32(nr, a1, a2, a3 uintptr) syscall.Errno {
	_, _, errno := syscall.RawSyscall(nr|X32Bit, a1, a2, a3)
	return errno
}
