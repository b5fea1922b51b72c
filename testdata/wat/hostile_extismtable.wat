;; hostile_extismtable.wat: an Extism plug-in declaring a table of 10^8
;; references at its minimum.
(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (memory (export "memory") 1)
  (table 100000000 funcref)
  (func (export "run") (result i32) (i32.const 0)))
