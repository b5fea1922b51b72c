;; hostile_wasisig.wat: imports a WASI function with the wrong signature.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i64) (result i64)))
  (func (export "_start") (drop (call $w (i64.const 0)))))
