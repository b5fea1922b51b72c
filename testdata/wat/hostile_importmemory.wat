;; hostile_importmemory.wat: imports its memory from the moat module, which has none.
(module
  (import "moat" "memory" (memory 1))
  (func (export "_start")))
