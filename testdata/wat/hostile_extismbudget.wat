;; hostile_extismbudget.wat: an Extism plug-in that asks the host to copy
;; and buffer more than an invocation may make it hold.
;;   bigcall: moat_call `times` times with one op name block and one request
;;     block, sized by the input (u64 request length, u64 op block length,
;;     u64 times, then the op name); the output is the last reply.
;;   fetch: http_request with the request JSON of the input, in a block of
;;     at least the size the input gives, and a body block of the length it
;;     gives (none for 0): u64 body length, u64 request block length, then
;;     the JSON; the output is 16 bytes: the response's length and status
;;     (u64 each).
;;   logs: log_info `count` times, each with a new block of `size` bytes
;;     (input: u64 size, u64 count).
;;   names: config_get and var_get `count` times each with one name block
;;     of `size` bytes, then var_set of that name to a value block of
;;     `value` bytes (input: u64 size, u64 count, u64 value; value 0: no
;;     var_set); the output is 8 bytes, the sum of the lookups' offsets
;;     (0: nothing found).
;;   seterror: error_set with a block of `size` bytes of 'e' (input: u64
;;     size), and a failure return.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "http_request" (func $http_request (param i64 i64) (result i64)))
  (import "extism:host/env" "http_status_code" (func $http_status_code (result i32)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))
  (import "extism:host/env" "config_get" (func $config_get (param i64) (result i64)))
  (import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))
  (import "extism:host/env" "var_set" (func $var_set (param i64 i64)))
  (import "extism:host/env" "error_set" (func $error_set (param i64)))
  (import "extism:host/user" "moat_call" (func $moat_call (param i64 i64) (result i64)))
  (memory (export "memory") 1)

  ;; $block returns a new block of at least $size bytes (more when the
  ;; input from $from on is longer) holding the input from $from on.
  (func $block (param $from i64) (param $size i64) (result i64)
    (local $n i64) (local $i i64) (local $b i64)
    (local.set $n (i64.sub (call $input_length) (local.get $from)))
    (if (i64.gt_u (local.get $n) (local.get $size)) (then (local.set $size (local.get $n))))
    (local.set $b (call $alloc (local.get $size)))
    (block $done
      (loop $copy
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (call $store_u8 (i64.add (local.get $b) (local.get $i))
          (call $input_load_u8 (i64.add (local.get $from) (local.get $i))))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $copy)))
    (local.get $b))

  (func (export "bigcall") (result i32)
    (local $req i64) (local $op i64) (local $times i64) (local $r i64)
    (local.set $req (call $alloc (call $input_load_u64 (i64.const 0))))
    (local.set $op (call $block (i64.const 24) (call $input_load_u64 (i64.const 8))))
    (local.set $times (call $input_load_u64 (i64.const 16)))
    (block $done
      (loop $again
        (br_if $done (i64.eqz (local.get $times)))
        (local.set $r (call $moat_call (local.get $op) (local.get $req)))
        (local.set $times (i64.sub (local.get $times) (i64.const 1)))
        (br $again)))
    (call $output_set (local.get $r) (call $length (local.get $r)))
    (i32.const 0))

  (func (export "fetch") (result i32)
    (local $body i64) (local $r i64) (local $out i64) (local $n i64)
    (if (i64.ne (call $input_load_u64 (i64.const 0)) (i64.const 0))
      (then (local.set $body (call $alloc (call $input_load_u64 (i64.const 0))))))
    (local.set $r (call $http_request
      (call $block (i64.const 16) (call $input_load_u64 (i64.const 8))) (local.get $body)))
    (if (i64.ne (local.get $r) (i64.const 0)) (then (local.set $n (call $length (local.get $r)))))
    (local.set $out (call $alloc (i64.const 16)))
    (call $store_u64 (local.get $out) (local.get $n))
    (call $store_u64 (i64.add (local.get $out) (i64.const 8)) (i64.extend_i32_u (call $http_status_code)))
    (call $output_set (local.get $out) (i64.const 16))
    (i32.const 0))

  (func (export "logs") (result i32)
    (local $n i64)
    (local.set $n (call $input_load_u64 (i64.const 8)))
    (block $done
      (loop $again
        (br_if $done (i64.eqz (local.get $n)))
        (call $log_info (call $alloc (call $input_load_u64 (i64.const 0))))
        (local.set $n (i64.sub (local.get $n) (i64.const 1)))
        (br $again)))
    (i32.const 0))

  (func (export "names") (result i32)
    (local $name i64) (local $n i64) (local $sum i64) (local $out i64)
    (local.set $name (call $alloc (call $input_load_u64 (i64.const 0))))
    (local.set $n (call $input_load_u64 (i64.const 8)))
    (block $done
      (loop $again
        (br_if $done (i64.eqz (local.get $n)))
        (local.set $sum (i64.add (local.get $sum) (call $config_get (local.get $name))))
        (local.set $n (i64.sub (local.get $n) (i64.const 1)))
        (br $again)))
    ;; var_get frees the name, so each call gets a new one.
    (local.set $n (call $input_load_u64 (i64.const 8)))
    (block $done
      (loop $again
        (br_if $done (i64.eqz (local.get $n)))
        (local.set $sum (i64.add (local.get $sum)
          (call $var_get (call $alloc (call $input_load_u64 (i64.const 0))))))
        (local.set $n (i64.sub (local.get $n) (i64.const 1)))
        (br $again)))
    (if (i64.ne (call $input_load_u64 (i64.const 16)) (i64.const 0))
      (then (call $var_set (call $alloc (call $input_load_u64 (i64.const 0)))
        (call $alloc (call $input_load_u64 (i64.const 16))))))
    (local.set $out (call $alloc (i64.const 8)))
    (call $store_u64 (local.get $out) (local.get $sum))
    (call $output_set (local.get $out) (i64.const 8))
    (i32.const 0))
  (func (export "seterror") (result i32)
    (local $n i64) (local $i i64) (local $b i64)
    (local.set $n (call $input_load_u64 (i64.const 0)))
    (local.set $b (call $alloc (local.get $n)))
    (block $done
      (loop $fill
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (call $store_u8 (i64.add (local.get $b) (local.get $i)) (i32.const 101))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $fill)))
    (call $error_set (local.get $b))
    (i32.const 1)))
