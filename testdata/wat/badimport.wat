;; badimport.wat: imports a function no moat host provides.
(module
  (import "env" "launch_missiles" (func (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")))
