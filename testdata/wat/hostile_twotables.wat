;; hostile_twotables.wat: two tables, each under the cap alone, over it together.
(module
  (table 600000 funcref)
  (table 600000 externref)
  (func (export "_start")))
