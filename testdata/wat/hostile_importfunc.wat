;; hostile_importfunc.wat: imports a function moat's own module does not have.
(module
  (import "moat" "exec" (func $exec (param i32 i32) (result i32)))
  (func (export "_start") (drop (call $exec (i32.const 0) (i32.const 0)))))
