;; hostile_hoard.wat: a pooled plugin that fills its memory and survives
;; the refusal, as an interpreter that catches its own out-of-memory error
;; does, for the host's test that such an instance serves no other call.
;; hoard grows its memory until the host refuses, then answers "full"
;; (answer 0) or fails with its own guest_error (answer 1: its input's
;; first byte is "1"); calls answers how many calls this instance has
;; served, a digit (a new instance answers 1).
(module
  (memory (export "memory") 2)
  (data (i32.const 0) "hoard\0acalls\0a")
  (global $actions_len i32 (i32.const 12))
  (data (i32.const 256) "full")
  (data (i32.const 512) "{\22code\22:\22guest_error\22,\22message\22:\22out of memory, caught\22}")
  (global $fail_len i32 (i32.const 56))
  (global $in i32 (i32.const 4096))   ;; input buffer: the first page is enough
  (global $calls (mut i32) (i32.const 0))

  (func (export "moat_abi_version") (result i32) (i32.const 1))
  (func (export "moat_actions") (result i64) (i64.extend_i32_u (global.get $actions_len)))
  (func (export "moat_alloc") (param $n i32) (result i32) (global.get $in))

  (func $pack (param $p i32) (param $n i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $p)) (i64.const 32)) (i64.extend_i32_u (local.get $n))))

  (func (export "moat_invoke") (param $action i32) (param $in i32) (param $len i32) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (block $calls (block $hoard
      (br_table $hoard $calls (local.get $action)))
      ;; hoard: grow 16 pages at a time until refused, and survive it
      (loop $more
        (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
      (if (i32.and (i32.gt_u (local.get $len) (i32.const 0))
                   (i32.eq (i32.load8_u (local.get $in)) (i32.const 49)))
        (then (return (i64.or (call $pack (i32.const 512) (global.get $fail_len)) (i64.const 0x80000000)))))
      (return (call $pack (i32.const 256) (i32.const 4))))
    ;; calls: one digit
    (i32.store8 (i32.const 1024) (i32.add (i32.const 48) (global.get $calls)))
    (call $pack (i32.const 1024) (i32.const 1)))
)
