;; hostile_cmd.wat: a WASI command whose first argument picks an attack:
;; "sleep" (20 s in poll_oneoff), "read" (fd_read of stdin), "pollstdin"
;; (poll_oneoff on stdin and a 20 s clock), "table" (table.grow of 2^26,
;; exit 7 when refused), "memory" (memory.grow of 2^15 pages, 2 GiB, which it
;; survives when refused), "x" (a loop). It exits 0 when the attack returns.
(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $argc (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $argv (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (table $t 1 funcref)

  (func $clock (param $at i32) (param $ns i64)
    (i64.store (local.get $at) (i64.const 7))
    (i32.store8 (i32.add (local.get $at) (i32.const 8)) (i32.const 0))
    (i32.store (i32.add (local.get $at) (i32.const 16)) (i32.const 1))
    (i64.store (i32.add (local.get $at) (i32.const 24)) (local.get $ns))
    (i64.store (i32.add (local.get $at) (i32.const 32)) (i64.const 0))
    (i32.store16 (i32.add (local.get $at) (i32.const 40)) (i32.const 0)))

  ;; the first byte of argv[1]
  (func $arg (result i32)
    (drop (call $argc (i32.const 0) (i32.const 4)))
    (if (i32.lt_u (i32.load (i32.const 0)) (i32.const 2)) (then (return (i32.const 0))))
    (drop (call $argv (i32.const 16) (i32.const 1024)))
    (i32.load8_u (i32.load (i32.const 20))))

  (func (export "_start")
    (local $a i32)
    (local.set $a (call $arg))
    ;; 's'leep
    (if (i32.eq (local.get $a) (i32.const 0x73))
      (then
        (call $clock (i32.const 4096) (i64.const 20000000000))
        (drop (call $poll (i32.const 4096) (i32.const 8192) (i32.const 1) (i32.const 8000)))
        (return)))
    ;; 'r'ead: one fd_read of stdin into 64 bytes at 12288
    (if (i32.eq (local.get $a) (i32.const 0x72))
      (then
        (i32.store (i32.const 12000) (i32.const 12288))
        (i32.store (i32.const 12004) (i32.const 64))
        (drop (call $read (i32.const 0) (i32.const 12000) (i32.const 1) (i32.const 12008)))
        (return)))
    ;; 'p'ollstdin: a clock of 20 s and stdin readable
    (if (i32.eq (local.get $a) (i32.const 0x70))
      (then
        (call $clock (i32.const 4096) (i64.const 20000000000))
        (i64.store (i32.const 4144) (i64.const 8))
        (i32.store8 (i32.const 4152) (i32.const 1)) ;; fd_read
        (i32.store (i32.const 4160) (i32.const 0))  ;; fd 0
        (drop (call $poll (i32.const 4096) (i32.const 8192) (i32.const 2) (i32.const 8000)))
        (return)))
    ;; 't'able
    (if (i32.eq (local.get $a) (i32.const 0x74))
      (then
        (if (i32.eq (table.grow $t (ref.null func) (i32.const 0x4000000)) (i32.const -1))
          (then (call $exit (i32.const 7))))
        (return)))
    ;; 'm'emory: a refused grow is survived; exit 0
    (if (i32.eq (local.get $a) (i32.const 0x6d))
      (then
        (drop (memory.grow (i32.const 0x8000)))
        (return)))
    ;; 'x': a loop
    (if (i32.eq (local.get $a) (i32.const 0x78))
      (then (loop $l (br $l)))))
)
