;; internal/wasmsnap's fixture: a memory with a data segment, two mutable
;; globals, and a function it does not export (an entry for Prepare).
(module
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 7))
  (global $h (mut i64) (i64.const 0))
  (data (i32.const 16) "initial")
  ;; set stores v at addr and in both globals.
  (func (export "set") (param $addr i32) (param $v i32)
    local.get $addr
    local.get $v
    i32.store
    local.get $v
    global.set $g
    local.get $v
    i64.extend_i32_u
    i64.const 32
    i64.shl
    global.set $h)
  (func (export "get") (param i32) (result i32) local.get 0 i32.load)
  (func (export "g") (result i32) global.get $g)
  (func (export "h") (result i64) global.get $h)
  (func (export "grow") (param i32) (result i32) local.get 0 memory.grow)
  ;; entry: the byte at its first argument plus its second.
  (func $entry (param i32 i32) (result i32)
    local.get 0
    i32.load8_u
    local.get 1
    i32.add))
