;; hostile_startloop.wat: a plugin whose start function never returns.
(module
  (import "moat" "call" (func $call (param i32 i32 i32 i32 i32 i32) (result i64)))
  (memory (export "memory") 1)
  (data (i32.const 0) "noop\0a")
  (func $spin (loop $l (br $l)))
  (start $spin)
  (func (export "moat_abi_version") (result i32) (i32.const 1))
  (func (export "moat_actions") (result i64) (i64.const 5))
  (func (export "moat_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "moat_invoke") (param i32 i32 i32) (result i64) (i64.const 0)))
