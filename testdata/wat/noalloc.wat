;; noalloc.wat: a plugin missing its moat_alloc export.
(module
  (memory (export "memory") 1)
  (func (export "moat_abi_version") (result i32) (i32.const 1))
  (func (export "moat_actions") (result i64) (i64.const 0))
  (func (export "moat_invoke") (param i32 i32 i32) (result i64) (i64.const 0)))
