package host

import (
	"context"
	"encoding/binary"
	"math"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// A sleep must work in every language, whichever clock it sleeps on.
// WASI's poll_oneoff takes clock subscriptions that are relative (sleep
// this long) or absolute (sleep until the clock reads this), and wazero
// serves only the first: an absolute one is ENOTSUP (errno 58). wasi-libc
// implements clock_nanosleep(TIMER_ABSTIME) with an absolute subscription,
// and CPython's time.sleep uses exactly that, so every time.sleep of a
// Python run raised "OSError: [Errno 58] Not supported".
//
// The host wraps wazero's poll_oneoff (absoluteClock): before it runs, an
// absolute subscription is rewritten, in the guest's memory, into the
// relative one that ends at the same instant on the same clock (the
// guest's own clock_time_get, so the instance's configured clocks decide,
// as they decided the time the guest computed its deadline from); one
// already past is a zero timeout. After the call, whichever way it ends,
// the subscription is put back as the guest wrote it. The sleep itself is
// then wazero's, with the module's Nanosleep (sleep.go): it ends at the
// run's deadline or cancellation, never after.
//
// Hostile timeouts are bounded on the way too: wazero converts a relative
// timeout to a time.Duration, so one of 2^63 ns or more became negative
// and the "sleep" returned at once, and a stdin poll converts it to int32
// milliseconds, where a long one wrapped. Every relative timeout is
// clamped to maxPollTimeout (24.8 days: no run lives that long, and the
// deadline ends the sleep long before).

// maxPollTimeout is the longest timeout a clock subscription keeps: the
// largest that is still a positive int32 of milliseconds.
const maxPollTimeout = uint64(math.MaxInt32) * uint64(time.Millisecond)

// Offsets in a WASI preview 1 subscription (48 bytes): userdata u64, the
// tag u8 at 8, then the clock union at 16: id u32, timeout u64 at 24,
// precision u64 at 32, flags u16 at 40.
const (
	subSize       = 48
	subTag        = 8
	subClockID    = 16
	subTimeout    = 24
	subFlags      = 40
	eventTagClock = 0
	clockAbstime  = 1
)

// absoluteClock wraps WASI's poll_oneoff (orig) so that absolute clock
// subscriptions work and no clock timeout overflows; clockTimeGet is
// WASI's clock_time_get, which tells the guest's own time.
func absoluteClock(orig, clockTimeGet api.GoModuleFunction) api.GoModuleFunction {
	return api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		in, out, n := uint32(stack[0]), uint32(stack[1]), uint32(stack[2])
		mem := mod.Memory()
		var subs []byte
		ok := false
		if mem != nil && n > 0 && uint64(n)*subSize <= math.MaxUint32 {
			subs, ok = mem.Read(in, n*subSize)
		}
		if !ok {
			// Nothing to rewrite: wazero refuses it (EINVAL, EFAULT).
			orig.Call(ctx, mod, stack)
			return
		}
		type saved struct {
			off   uint32
			bytes [subFlags + 2 - subTimeout]byte
		}
		var restore []saved
		defer func() {
			for _, s := range restore {
				copy(subs[s.off+subTimeout:], s.bytes[:])
			}
		}()
		le := binary.LittleEndian
		for i := uint32(0); i < n; i++ {
			s := subs[i*subSize : (i+1)*subSize]
			if s[subTag] != eventTagClock {
				continue
			}
			flags, timeout := le.Uint16(s[subFlags:]), le.Uint64(s[subTimeout:])
			rel := timeout
			switch flags {
			case 0:
			case clockAbstime:
				now, errno := guestClock(ctx, mod, clockTimeGet, le.Uint32(s[subClockID:]), out)
				if errno != 0 {
					stack[0] = uint64(errno)
					return
				}
				rel = 0
				if timeout > now {
					rel = timeout - now
				}
			default:
				continue // wazero refuses flags it does not know (EINVAL)
			}
			rel = min(rel, maxPollTimeout)
			if rel == timeout && flags == 0 {
				continue
			}
			var sv saved
			sv.off = i * subSize
			copy(sv.bytes[:], s[subTimeout:subFlags+2])
			restore = append(restore, sv)
			le.PutUint64(s[subTimeout:], rel)
			le.PutUint16(s[subFlags:], 0)
		}
		orig.Call(ctx, mod, stack)
	})
}

// guestClock reads clock id as the guest reads it (WASI's clock_time_get,
// with the instance's configured clocks), using the first 8 bytes of the
// poll's event buffer at out, which poll_oneoff overwrites anyway. It
// returns WASI's errno when the clock is unknown or out is not memory.
func guestClock(ctx context.Context, mod api.Module, clockTimeGet api.GoModuleFunction, id, out uint32) (uint64, uint32) {
	st := []uint64{uint64(id), 1, uint64(out)}
	clockTimeGet.Call(ctx, mod, st)
	if errno := uint32(st[0]); errno != 0 {
		return 0, errno
	}
	now, ok := mod.Memory().ReadUint64Le(out)
	if !ok {
		return 0, wasiEFAULT
	}
	return now, 0
}
