;; hostile_bigtable.wat: a table of 10^8 references at its minimum (800 MiB
;; of host memory at instantiation if the host let it load).
(module
  (table 100000000 funcref)
  (func (export "_start")))
