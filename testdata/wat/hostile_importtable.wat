;; hostile_importtable.wat: imports a table; moat provides none.
(module
  (import "env" "table" (table 1 funcref))
  (func (export "_start")))
