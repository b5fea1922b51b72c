;; extism_noop.wat: the trivial action as an Extism plugin (no imports), for
;; the side-by-side benchmark against extism go-sdk.
(module
  (memory (export "memory") 1)
  (func (export "noop") (result i32) (i32.const 0)))
