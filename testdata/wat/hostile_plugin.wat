;; hostile_plugin.wat: a moat plugin that attacks the host, one action per
;; attack, for host/hostile_test.go. moat_alloc misbehaves on purpose for
;; some input lengths (see below); every other length gets a sane buffer.
(module
  (import "moat" "call" (func $call (param i32 i32 i32 i32 i32 i32) (result i64)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 2)
  (table $t 1 funcref) ;; no maximum: the host must give it one

  (data (i32.const 0) "noop\0aecho\0atablegrow\0atablegrowloop\0amemgrowmax\0amemgrowlimit\0asleep\0arecurse\0aopflood\0asleeploop\0acallbadreq\0acalloverflow\0acalllenmax\0acallbadresp\0acallrespcapmax\0aoutlenmax\0aoutoverflow\0aexit\0asleepthenreturn\0atablesize\0a")
  (global $actions_len i32 (i32.const 205))
  (data (i32.const 512) "config.get")
  (data (i32.const 528) "{\22key\22:\22k\22}")

  (global $resp i32 (i32.const 8192))
  (global $in i32 (i32.const 65536))
  (global $depth (mut i32) (i32.const 0))

  (func (export "moat_abi_version") (result i32) (i32.const 1))
  (func (export "moat_actions") (result i64) (i64.extend_i32_u (global.get $actions_len)))

  ;; sleep $ns nanoseconds with one clock subscription at 4096 (events at 4160)
  (func $sleep (param $ns i64)
    (i64.store (i32.const 4096) (i64.const 0))       ;; userdata
    (i32.store8 (i32.const 4104) (i32.const 0))      ;; tag: clock
    (i32.store (i32.const 4112) (i32.const 1))       ;; clock id: monotonic
    (i64.store (i32.const 4120) (local.get $ns))     ;; timeout
    (i64.store (i32.const 4128) (i64.const 0))       ;; precision
    (i32.store16 (i32.const 4136) (i32.const 0))     ;; flags: relative
    (drop (call $poll (i32.const 4096) (i32.const 4160) (i32.const 1) (i32.const 4200))))

  ;; moat_alloc: lengths 1-6 are attacks, anything else gets 64 KiB on
  (func (export "moat_alloc") (param $n i32) (result i32)
    (local $need i32)
    (if (i32.eq (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (if (i32.eq (local.get $n) (i32.const 2))
      (then (return (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 1)))))
    (if (i32.eq (local.get $n) (i32.const 3)) (then (return (i32.const 0)))) ;; over its own data
    (if (i32.eq (local.get $n) (i32.const 4)) (then (unreachable)))
    (if (i32.eq (local.get $n) (i32.const 5)) (then (loop $l (br $l))))
    (if (i32.eq (local.get $n) (i32.const 6)) (then (call $sleep (i64.const 20000000000))))
    (local.set $need (i32.add (global.get $in) (local.get $n)))
    (block $ok
      (loop $grow
        (br_if $ok (i32.le_u (local.get $need) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then (unreachable)))
        (br $grow)))
    (global.get $in))

  (func $pack (param $p i32) (param $n i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $p)) (i64.const 32)) (i64.extend_i32_u (local.get $n))))
  ;; out32 returns one i32 as 4 bytes of output
  (func $out32 (param $v i32) (result i64)
    (i32.store (global.get $resp) (local.get $v))
    (call $pack (global.get $resp) (i32.const 4)))

  (func $recurse (param $x i64) (result i64)
    (global.set $depth (i32.add (global.get $depth) (i32.const 1)))
    (i64.add (call $recurse (i64.add (local.get $x) (i64.const 1))) (local.get $x)))

  (func (export "moat_invoke") (param $action i32) (param $in i32) (param $len i32) (result i64)
    (local $r i32)
    (block $tablesize (block $sleepthenreturn (block $exit (block $outoverflow (block $outlenmax (block $callrespcapmax
    (block $callbadresp (block $calllenmax (block $calloverflow (block $callbadreq (block $sleeploop (block $opflood
    (block $recurse (block $sleep (block $memgrowlimit (block $memgrowmax (block $tablegrowloop (block $tablegrow
    (block $echo (block $noop
      (br_table $noop $echo $tablegrow $tablegrowloop $memgrowmax $memgrowlimit $sleep $recurse $opflood $sleeploop
                $callbadreq $calloverflow $calllenmax $callbadresp $callrespcapmax $outlenmax $outoverflow $exit
                $sleepthenreturn $tablesize (local.get $action)))
    (return (i64.const 0)))
    ;; echo
    (return (call $pack (local.get $in) (local.get $len))))
    ;; tablegrow: one table.grow of 2^26 references (512 MiB of host memory if unbounded)
    (return (call $out32 (table.grow $t (ref.null func) (i32.const 0x4000000)))))
    ;; tablegrowloop: grow by 65536 until refused; the table's final size
    (block $done
      (loop $more
        (br_if $done (i32.eq (table.grow $t (ref.null func) (i32.const 65536)) (i32.const -1)))
        (br $more)))
    (return (call $out32 (table.size $t))))
    ;; memgrowmax: memory.grow by 65536 pages, then by 0xFFFFFFFF; both must be -1
    (local.set $r (memory.grow (i32.const 65536)))
    (i32.store (global.get $resp) (local.get $r))
    (i32.store (i32.add (global.get $resp) (i32.const 4)) (memory.grow (i32.const -1)))
    (return (call $pack (global.get $resp) (i32.const 8))))
    ;; memgrowlimit: grow a page at a time until refused, then carry on; the final size in pages
    (block $done
      (loop $more
        (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
        (br $more)))
    (return (call $out32 (memory.size))))
    ;; sleep: 20 s in poll_oneoff, then a loop of calls (a guest that goes on)
    (call $sleep (i64.const 20000000000))
    (return (call $out32 (i32.const 1))))
    ;; recurse: until the stack is exhausted
    (return (call $recurse (i64.const 0))))
    ;; opflood: host calls in a tight loop, forever
    (loop $again
      (drop (call $call (i32.const 512) (i32.const 10) (i32.const 528) (i32.const 11) (global.get $resp) (i32.const 4096)))
      (br $again))
    (unreachable))
    ;; sleeploop: 1 ms sleeps, forever
    (loop $again
      (call $sleep (i64.const 1000000))
      (br $again))
    (unreachable))
    ;; callbadreq: the request is outside memory
    (return (call $call (i32.const 512) (i32.const 10) (i32.const 0xfffffff0) (i32.const 100) (global.get $resp) (i32.const 4096))))
    ;; calloverflow: op pointer + length overflows 32 bits
    (return (call $call (i32.const 0xffffff00) (i32.const 0x200) (i32.const 0) (i32.const 0) (global.get $resp) (i32.const 4096))))
    ;; calllenmax: a request of 0xFFFFFFFF bytes
    (return (call $call (i32.const 512) (i32.const 10) (i32.const 0) (i32.const -1) (global.get $resp) (i32.const 4096))))
    ;; callbadresp: the reply buffer is outside memory
    (return (call $call (i32.const 512) (i32.const 10) (i32.const 528) (i32.const 11) (i32.const 0xffffff00) (i32.const 4096))))
    ;; callrespcapmax: a reply buffer claiming 4 GiB; the reply is small, so the host writes only that
    (return (call $call (i32.const 512) (i32.const 10) (i32.const 528) (i32.const 11) (global.get $resp) (i32.const -1))))
    ;; outlenmax: an output of 2^31-1 bytes
    (return (call $pack (i32.const 0) (i32.const 0x7fffffff))))
    ;; outoverflow: output pointer + length overflows 32 bits
    (return (call $pack (i32.const 0xfffffff0) (i32.const 0x100))))
    ;; exit: proc_exit(3) in the middle of an action
    (call $exit (i32.const 3))
    (unreachable))
    ;; sleepthenreturn: 20 s in poll_oneoff, then return at once (nothing after the host call checks a deadline)
    (call $sleep (i64.const 20000000000))
    (return (i64.const 0)))
    ;; tablesize: the table's size now (a pooled instance's table persists)
    (call $out32 (table.size $t)))
)
