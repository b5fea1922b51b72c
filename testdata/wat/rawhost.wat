;; rawhost.wat: the baseline for the op benchmark: 1000 calls of a host
;; function with moat.call's signature that does nothing.
(module
  (import "bench" "nop" (func $nop (param i32 i32 i32 i32 i32 i32) (result i64)))
  (memory (export "memory") 1)
  (func (export "loop1000") (result i64)
    (local $i i32)
    (local.set $i (i32.const 1000))
    (loop $again
      (drop (call $nop (i32.const 0) (i32.const 10) (i32.const 16) (i32.const 16) (i32.const 1024) (i32.const 1024)))
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (br_if $again (local.get $i)))
    (i64.const 0)))
