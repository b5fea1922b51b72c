;; hostile_extism.wat: an Extism plug-in that attacks the host: tablegrow
;; (table.grow of 2^26, returns 0 when refused), sleep (20 s in
;; poll_oneoff) and spin.
(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (func (export "tablegrow") (result i32)
    (i32.ne (table.grow $t (ref.null func) (i32.const 0x4000000)) (i32.const -1)))
  (func (export "sleep") (result i32)
    (i64.store (i32.const 4096) (i64.const 0))
    (i32.store8 (i32.const 4104) (i32.const 0))
    (i32.store (i32.const 4112) (i32.const 1))
    (i64.store (i32.const 4120) (i64.const 20000000000))
    (i64.store (i32.const 4128) (i64.const 0))
    (i32.store16 (i32.const 4136) (i32.const 0))
    (drop (call $poll (i32.const 4096) (i32.const 4160) (i32.const 1) (i32.const 4200)))
    (i32.const 0))
  (func (export "spin") (result i32) (loop $l (br $l)) (i32.const 0)))
