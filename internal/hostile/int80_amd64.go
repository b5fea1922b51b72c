package hostile

// Int80 executes int 0x80 with the i386 calling convention and returns
// eax.
func Int80(nr, a1, a2, a3 uintptr) uintptr

const haveInt80 = true
