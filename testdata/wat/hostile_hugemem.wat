;; hostile_hugemem.wat: a command declaring 4 GiB of memory at its minimum.
(module
  (memory (export "memory") 65536)
  (func (export "_start")))
