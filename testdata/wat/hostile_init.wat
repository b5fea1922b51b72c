;; hostile_init.wat: a reactor plugin whose _initialize sleeps 20 s in
;; poll_oneoff when its data byte at 64 is 's', and traps otherwise; the
;; test flips that byte to make the trapping variant.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "noop\0a")
  (data (i32.const 64) "s")
  (func (export "_initialize")
    (if (i32.ne (i32.load8_u (i32.const 64)) (i32.const 0x73)) (then (unreachable)))
    (i64.store (i32.const 4096) (i64.const 0))
    (i32.store8 (i32.const 4104) (i32.const 0))
    (i32.store (i32.const 4112) (i32.const 1))
    (i64.store (i32.const 4120) (i64.const 20000000000))
    (i64.store (i32.const 4128) (i64.const 0))
    (i32.store16 (i32.const 4136) (i32.const 0))
    (drop (call $poll (i32.const 4096) (i32.const 4160) (i32.const 1) (i32.const 4200))))
  (func (export "moat_abi_version") (result i32) (i32.const 1))
  (func (export "moat_actions") (result i64) (i64.const 5))
  (func (export "moat_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "moat_invoke") (param i32 i32 i32) (result i64) (i64.const 0)))
