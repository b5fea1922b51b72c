;; plugin.wat: a moat plugin written by hand against ABI v1, for the host's
;; tests and benchmarks. Every action exercises one path: the happy ones
;; (noop, echo, config), and the hostile ones (loop, trap, bad pointers,
;; memory growth, oversize output, an unknown op).
(module
  (import "moat" "call" (func $call (param i32 i32 i32 i32 i32 i32) (result i64)))
  (memory (export "memory") 2)

  ;; action list, read once by the host; the index is the action id
  (data (i32.const 0) "noop\0aecho\0aloop\0aconfig\0aunknownop\0abadptr\0abadout\0atrap\0agrow\0afail\0abig\0aconfigloop\0alog\0afetchbad\0a")
  (global $actions_len i32 (i32.const 89))
  (data (i32.const 512) "config.get")
  (data (i32.const 528) "no.such.op")
  (data (i32.const 544) "log.write")
  (data (i32.const 1024) "{\22code\22:\22guest_error\22,\22message\22:\22deliberate failure\22}")
  (global $fail_len i32 (i32.const 53))

  (global $resp i32 (i32.const 8192))   ;; response buffer, 8 KiB
  (global $resp_cap i32 (i32.const 8192))
  (global $in i32 (i32.const 65536))    ;; input buffer, grown on demand
  (global $spin (mut i32) (i32.const 0))

  (func (export "moat_abi_version") (result i32) (i32.const 1))

  (func (export "moat_actions") (result i64)
    (i64.extend_i32_u (global.get $actions_len)))   ;; pointer 0

  ;; moat_alloc: the input always lives at 64 KiB; grow memory to fit it
  (func (export "moat_alloc") (param $n i32) (result i32)
    (local $need i32)
    (local.set $need (i32.add (global.get $in) (local.get $n)))
    (block $ok
      (loop $grow
        (br_if $ok (i32.le_u (local.get $need) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then (unreachable)))
        (br $grow)))
    (global.get $in))

  ;; pack(ptr, len) and pack with the failed bit
  (func $pack (param $p i32) (param $n i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $p)) (i64.const 32)) (i64.extend_i32_u (local.get $n))))
  (func $packfail (param $p i32) (param $n i32) (result i64)
    (i64.or (call $pack (local.get $p) (local.get $n)) (i64.const 0x80000000)))

  ;; opcall: run op [name, name_len) with the input as request; reply is the output
  (func $opcall (param $name i32) (param $name_len i32) (param $in i32) (param $len i32) (result i64)
    (local $r i64)
    (local.set $r (call $call (local.get $name) (local.get $name_len) (local.get $in) (local.get $len)
                              (global.get $resp) (global.get $resp_cap)))
    (if (result i64) (i64.eqz (i64.shr_u (local.get $r) (i64.const 32)))
      (then (call $pack (global.get $resp) (i32.wrap_i64 (local.get $r))))
      (else (call $packfail (global.get $resp) (i32.wrap_i64 (local.get $r))))))

  (func (export "moat_invoke") (param $action i32) (param $in i32) (param $len i32) (result i64)
    (local $i i32)
    (block $fetchbad (block $log (block $configloop (block $big (block $fail (block $grow (block $trap
    (block $badout (block $badptr (block $unknownop (block $config (block $loop (block $echo (block $noop
      (br_table $noop $echo $loop $config $unknownop $badptr $badout $trap $grow $fail $big $configloop $log $fetchbad
                (local.get $action)))
    ;; noop
    (return (i64.const 0)))
    ;; echo
    (return (call $pack (local.get $in) (local.get $len))))
    ;; loop: spin forever, touching a global so the loop is not empty
    (loop $forever
      (global.set $spin (i32.add (global.get $spin) (i32.const 1)))
      (br $forever))
    (unreachable))
    ;; config: the input is a config.get request
    (return (call $opcall (i32.const 512) (i32.const 10) (local.get $in) (local.get $len))))
    ;; unknownop
    (return (call $opcall (i32.const 528) (i32.const 10) (local.get $in) (local.get $len))))
    ;; badptr: an op name far outside memory
    (return (call $call (i32.const 0x7fff0000) (i32.const 10) (i32.const 0) (i32.const 0)
                        (global.get $resp) (global.get $resp_cap))))
    ;; badout: output pointer outside memory
    (return (call $pack (i32.const 0xffffff00) (i32.const 100))))
    ;; trap
    (unreachable))
    ;; grow: grow 16 pages at a time until refused, then trap like an allocator would
    (loop $more
      (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    (unreachable))
    ;; fail
    (return (call $packfail (i32.const 1024) (global.get $fail_len))))
    ;; big: all of memory as output
    (return (call $pack (i32.const 0) (i32.mul (memory.size) (i32.const 65536)))))
    ;; configloop: 1000 config.get round trips (the op benchmark), reply of the last
    (local.set $i (i32.const 1000))
    (loop $again
      (drop (call $call (i32.const 512) (i32.const 10) (local.get $in) (local.get $len)
                        (global.get $resp) (global.get $resp_cap)))
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (br_if $again (local.get $i)))
    (return (call $opcall (i32.const 512) (i32.const 10) (local.get $in) (local.get $len))))
    ;; log: the input is a log.write request
    (return (call $opcall (i32.const 544) (i32.const 9) (local.get $in) (local.get $len))))
    ;; fetchbad: fetch a pending reply that does not exist
    (call $call (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (global.get $resp) (global.get $resp_cap)))
)
