;; hostile_outcap.wat: a WASI command that passes its output cap and then
;; ends cleanly, so that nothing but the host's record of the overflow can
;; tell. The first byte of argv[1] picks how: "o" one write of 4096 bytes
;; to stdout, then return from _start; "e" the same to stderr, then
;; proc_exit(0); "m" 64 writes of 64 bytes to stdout, then return; "n" one
;; write of 4096 bytes to stdout, then proc_exit(3). Write errors are
;; ignored, as a careless or hostile program does.
(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $argc (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $argv (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)

  (func $arg (result i32)
    (drop (call $argc (i32.const 0) (i32.const 4)))
    (if (i32.lt_u (i32.load (i32.const 0)) (i32.const 2)) (then (return (i32.const 0))))
    (drop (call $argv (i32.const 16) (i32.const 1024)))
    (i32.load8_u (i32.load (i32.const 20))))

  ;; one fd_write of n bytes from 8192 to fd
  (func $out (param $fd i32) (param $n i32)
    (i32.store (i32.const 4000) (i32.const 8192))
    (i32.store (i32.const 4004) (local.get $n))
    (drop (call $write (local.get $fd) (i32.const 4000) (i32.const 1) (i32.const 4008))))

  (func (export "_start")
    (local $a i32)
    (local $i i32)
    ;; fill 4096 bytes at 8192 with 'A'
    (memory.fill (i32.const 8192) (i32.const 0x41) (i32.const 4096))
    (local.set $a (call $arg))
    (if (i32.eq (local.get $a) (i32.const 0x6f)) ;; 'o'
      (then (call $out (i32.const 1) (i32.const 4096)) (return)))
    (if (i32.eq (local.get $a) (i32.const 0x65)) ;; 'e'
      (then (call $out (i32.const 2) (i32.const 4096)) (call $exit (i32.const 0))))
    (if (i32.eq (local.get $a) (i32.const 0x6e)) ;; 'n'
      (then (call $out (i32.const 1) (i32.const 4096)) (call $exit (i32.const 3))))
    (if (i32.eq (local.get $a) (i32.const 0x6d)) ;; 'm'
      (then
        (loop $l
          (call $out (i32.const 1) (i32.const 64))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $l (i32.lt_u (local.get $i) (i32.const 64))))
        (return))))
)
