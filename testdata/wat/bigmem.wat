;; bigmem.wat: a command whose initial memory (512 pages, 32 MiB) is over small limits.
(module
  (memory (export "memory") 512)
  (func (export "_start")))
