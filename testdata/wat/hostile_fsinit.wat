;; hostile_fsinit.wat: a reactor plugin whose _initialize makes the
;; directory "init" in its first preopen (fd 3, a read-write grant), which
;; no caller could answer for, and keeps the errno. Its action "mkdir"
;; makes "call" there, during an invocation, and returns two bytes: the
;; errno _initialize got, then its own.
(module
  (import "wasi_snapshot_preview1" "path_create_directory" (func $mkdir (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "mkdir\0a")
  (data (i32.const 64) "init")
  (data (i32.const 80) "call")
  (func (export "_initialize")
    (i32.store8 (i32.const 512) (call $mkdir (i32.const 3) (i32.const 64) (i32.const 4))))
  (func (export "moat_abi_version") (result i32) (i32.const 1))
  (func (export "moat_actions") (result i64) (i64.const 6))
  (func (export "moat_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "moat_invoke") (param i32 i32 i32) (result i64)
    (i32.store8 (i32.const 513) (call $mkdir (i32.const 3) (i32.const 80) (i32.const 4)))
    (i64.or (i64.shl (i64.const 512) (i64.const 32)) (i64.const 2))))
