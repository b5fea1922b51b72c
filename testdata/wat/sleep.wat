;; A WASI command that makes one poll_oneoff clock subscription shaped by
;; its stdin (32 bytes, little-endian): timeout u64 @0, clock id u32 @8,
;; subclockflags u32 @12 (written as u16), add_now u32 @16 (1: the clock's
;; current time is added to the timeout, so a test can name an absolute
;; time relative to the guest's own clock). Its exit status says what
;; happened: 0 the event came back for the subscription without an
;; error; poll_oneoff's errno; 100+errno fd_read's; 200+errno
;; clock_time_get's; 250 the event's userdata is wrong; 251 the host
;; changed the subscription the guest handed it; 252+ the event's errno.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (local $e i32)
    ;; iovec at 0 -> 32 bytes at 64; nread at 8
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 32))
    (local.set $e (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (if (local.get $e) (then (call $exit (i32.add (i32.const 100) (local.get $e)))))
    (if (i32.load (i32.const 80))
      (then
        (local.set $e (call $clock (i32.load (i32.const 72)) (i64.const 1) (i32.const 336)))
        (if (local.get $e) (then (call $exit (i32.add (i32.const 200) (local.get $e)))))
        (i64.store (i32.const 64) (i64.add (i64.load (i32.const 64)) (i64.load (i32.const 336))))))
    ;; the subscription at 128: userdata 42, tag clock, id, timeout, precision 0, flags
    (i64.store (i32.const 128) (i64.const 42))
    (i32.store8 (i32.const 136) (i32.const 0))
    (i32.store (i32.const 144) (i32.load (i32.const 72)))
    (i64.store (i32.const 152) (i64.load (i32.const 64)))
    (i64.store (i32.const 160) (i64.const 0))
    (i32.store16 (i32.const 168) (i32.load (i32.const 76)))
    ;; the event at 256, nevents at 320
    (local.set $e (call $poll (i32.const 128) (i32.const 256) (i32.const 1) (i32.const 320)))
    (if (local.get $e) (then (call $exit (local.get $e))))
    (if (i64.ne (i64.load (i32.const 256)) (i64.const 42)) (then (call $exit (i32.const 250))))
    (if (i64.ne (i64.load (i32.const 152)) (i64.load (i32.const 64))) (then (call $exit (i32.const 251))))
    (if (i32.ne (i32.load16_u (i32.const 168)) (i32.load16_u (i32.const 76))) (then (call $exit (i32.const 251))))
    (if (i32.load16_u (i32.const 264)) (then (call $exit (i32.add (i32.const 252) (i32.load16_u (i32.const 264))))))
    (call $exit (i32.const 0))))
