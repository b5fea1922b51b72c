;; wat2wasm: --debug-names
;; interrupt_ops.wat: every kind of instruction immediate the loop
;; instrumentation (host/interrupt.go) must step over, in functions that
;; loop. host's TestInstrumentLoopsDifferential calls every export of the
;; module as built and as instrumented, and compares the results: a
;; decoder that misreads one immediate inserts its check in the middle of
;; an instruction, and the module no longer validates or computes
;; something else.
(module
  (type $binop (func (param i32 i32) (result i32)))
  (type $pair (func (param i32) (result i32 i32)))
  (import "envg" "g" (global $imported i32))
  (import "env" "inc" (func $inc (param i32) (result i32)))
  (memory 1 2)
  (table $t 4 8 funcref)
  (table $ext 2 externref)
  (global $counter (mut i32) (i32.const 0))
  (global $wide (mut i64) (i64.const 0x7fffffffffffffff))
  (global $fref funcref (ref.func $sub))
  (global $started (mut i32) (i32.const 0))
  (data $d "moat interrupt fixture 0123456789")
  (elem $e func $add $sub)
  (elem declare func $mul $inc)
  (elem $exprs funcref (ref.func $mul) (ref.null func) (ref.func $add))

  ;; the start section's function: its effect is observed by "started"
  (func $start (global.set $started (call $inc (i32.const 41))))
  (start $start)
  (func (export "started") (result i32) (global.get $started))

  ;; calls across the imported and defined functions, in a loop, and a
  ;; function reference held in a global and in a passive segment
  (func (export "calls") (result i32)
    (local $i i32) (local $acc i32)
    (table.set $t (i32.const 0) (global.get $fref))
    (table.init $t $exprs (i32.const 1) (i32.const 0) (i32.const 3))
    (loop $l
      (local.set $acc (call $inc (call $add (local.get $acc) (local.get $i))))
      (local.set $acc (i32.add (local.get $acc)
        (call_indirect $t (type $binop) (local.get $i) (i32.const 2) (i32.const 0))))
      (local.set $acc (i32.add (local.get $acc)
        (call_indirect $t (type $binop) (local.get $i) (i32.const 2) (i32.const 1))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 25))))
    (i32.add (local.get $acc) (ref.is_null (ref.func $inc))))

  (func $add (type $binop) (i32.add (local.get 0) (local.get 1)))
  (func $sub (type $binop) (i32.sub (local.get 0) (local.get 1)))
  (func $mul (type $binop) (i32.mul (local.get 0) (local.get 1)))

  ;; a loop with parameters and results (multiple values)
  (func (export "sum_to") (param $n i32) (result i32)
    (local $i i32)
    (i32.const 0)
    (loop $l (param i32) (result i32)
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (i32.add (local.get $i))
      (br_if $l (i32.lt_u (local.get $i) (local.get $n)))))

  ;; nested loops, br_table, select with and without a type
  (func (export "branches") (result i32)
    (local $i i32) (local $acc i32)
    (loop $outer
      (block $b2 (block $b1 (block $b0
        (br_table $b0 $b1 $b2 $b2 (i32.rem_u (local.get $i) (i32.const 4))))
        (local.set $acc (i32.add (local.get $acc) (i32.const 1))))
        (local.set $acc (i32.add (local.get $acc) (i32.const 10))))
      (local.set $acc (select (local.get $acc) (i32.const 7) (i32.const 1)))
      (local.set $acc (select (result i32) (local.get $acc) (i32.const 9) (local.get $i)))
      (loop $inner
        (global.set $counter (i32.add (global.get $counter) (i32.const 1)))
        (br_if $inner (i32.and (global.get $counter) (i32.const 1))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $outer (i32.lt_u (local.get $i) (i32.const 100))))
    (i32.add (local.get $acc) (global.get $imported)))

  ;; memory: loads and stores with offsets, bulk memory, size and grow
  (func (export "memory") (result i64)
    (local $i i32)
    (memory.init $d (i32.const 100) (i32.const 0) (i32.const 33))
    (data.drop $d)
    (memory.fill (i32.const 200) (i32.const 0x5a) (i32.const 64))
    (memory.copy (i32.const 300) (i32.const 100) (i32.const 33))
    (loop $l
      (i32.store8 offset=1000 (local.get $i) (i32.load8_u offset=300 (local.get $i)))
      (i64.store32 offset=2000 align=4 (i32.shl (local.get $i) (i32.const 2)) (i64.extend_i32_s (local.get $i)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 33))))
    (drop (memory.grow (i32.const 1)))
    (i64.add
      (i64.add (i64.load offset=1000 (i32.const 0)) (i64.load32_u offset=2000 (i32.const 128)))
      (i64.add (i64.extend_i32_u (memory.size)) (i64.load16_s (i32.const 200)))))

  ;; constants of every width, sign extension, saturating conversions
  (func (export "numbers") (result i64)
    (local $i i32) (local $acc i64)
    (loop $l
      (local.set $acc (i64.add (local.get $acc) (i64.const -0x123456789abcdef)))
      (local.set $acc (i64.xor (local.get $acc) (i64.extend8_s (i64.const 0x80))))
      (local.set $acc (i64.add (local.get $acc) (i64.trunc_sat_f64_s (f64.const 1e300))))
      (local.set $acc (i64.add (local.get $acc) (i64.extend_i32_s (i32.trunc_sat_f32_u (f32.const -3.5)))))
      (local.set $acc (i64.add (local.get $acc) (i64.reinterpret_f64 (f64.const 2.5))))
      (local.set $acc (i64.add (local.get $acc) (i64.extend_i32_u (i32.reinterpret_f32 (f32.const 0.1)))))
      (local.set $acc (i64.add (local.get $acc) (global.get $wide)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (local.set $acc (i64.add (local.get $acc) (i64.extend_i32_s (i32.const -1_000_000_000))))
      (br_if $l (i32.lt_s (local.get $i) (i32.const 50))))
    (local.get $acc))

  ;; tables and references: call_indirect, table.get/set/size/grow/fill/copy/init, ref.*
  (func (export "tables") (result i32)
    (local $i i32) (local $acc i32)
    (table.init $t $e (i32.const 0) (i32.const 0) (i32.const 2))
    (table.set $t (i32.const 2) (ref.func $mul))
    (table.copy $t $t (i32.const 3) (i32.const 0) (i32.const 1))
    (elem.drop $e)
    (loop $l
      (local.set $acc (i32.add (local.get $acc)
        (call_indirect $t (type $binop) (local.get $i) (i32.const 3) (i32.rem_u (local.get $i) (i32.const 4)))))
      (local.set $acc (i32.add (local.get $acc) (ref.is_null (table.get $t (i32.const 1)))))
      (local.set $acc (i32.add (local.get $acc) (ref.is_null (ref.null extern))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 40))))
    (drop (table.grow $ext (ref.null extern) (i32.const 3)))
    (table.fill $ext (i32.const 0) (ref.null extern) (i32.const 5))
    (i32.add (local.get $acc) (i32.add (table.size $t) (table.size $ext))))

  ;; 128-bit SIMD: constants, shuffles, lanes, loads and stores with lanes
  (func (export "simd") (result i64)
    (local $v v128) (local $i i32)
    (local.set $v (v128.const i32x4 1 2 3 4))
    (v128.store offset=16 (i32.const 0) (v128.const i64x2 0x1111111111111111 0x2222222222222222))
    (loop $l
      (local.set $v (i32x4.add (local.get $v) (v128.load offset=16 (i32.const 0))))
      (local.set $v (i8x16.shuffle 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 (local.get $v) (local.get $v)))
      (local.set $v (i32x4.replace_lane 2 (local.get $v) (i32.add (i32x4.extract_lane 1 (local.get $v)) (local.get $i))))
      (local.set $v (v128.load32_lane offset=16 3 (i32.const 4) (local.get $v)))
      (v128.store64_lane offset=64 1 (i32.const 0) (local.get $v))
      (local.set $v (i16x8.add (local.get $v) (v128.load8x8_s offset=64 (i32.const 0))))
      (local.set $v (v128.or (local.get $v) (v128.load32_zero (i32.const 20))))
      (local.set $v (i8x16.swizzle (local.get $v) (i8x16.splat (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 16))))
    (i64.add (i64x2.extract_lane 0 (local.get $v)) (i64x2.extract_lane 1 (local.get $v))))

  ;; a loop that returns a pair through a block of a type index
  (func (export "pair") (result i32)
    (local $i i32)
    (i32.const 0)
    (loop $l (type $pair)
      (drop)
      (local.set $i (i32.add (local.get $i) (i32.const 3)))
      (local.get $i)
      (local.get $i)
      (br_if $l (i32.lt_u (local.get $i) (i32.const 30))))
    (drop))
)
