;; hostile_fsraw.wat: a WASI command that makes raw WASI file calls a
;; language's runtime would clean up first (".." chains, absolute paths,
;; opens without following links, links and renames between preopens) and
;; prints the errno of each as one byte, in this order. Preopen fd 3 is a
;; read-only grant holding file.txt, sub/, link_up -> ../outside/secret,
;; link_passwd -> /etc/passwd and a FIFO; fd 4 a read-write grant holding
;; out -> ../outside.
;;
;;  0 open fd3 "sub/../../outside/secret"        8 link fd4 "../outside/secret" -> "hl"
;;  1 open fd3 "link_up"                         9 link fd4 "out/secret" -> "hl"
;;  2 open fd3 "/etc/passwd"                    10 rename fd3 "file.txt" -> fd4 "a"
;;  3 open fd3 "link_passwd", not following    11 mkdir fd3 "d"
;;  4 open fd3 "file.txt" truncating            12 unlink fd3 "file.txt"
;;  5 open fd3 "a" creating                     13 open fd4 "out/secret" creating, truncating
;;  6 symlink "/etc/shadow" at fd4 "sl"         14 open fd3 "fifo"
;;  7 rename fd4 "a" -> fd4 "../x"              15 open fd3 "sub/../../../../(...)/etc/passwd"
;;                                              16 open fd3 "file.txt" for reading (0)
(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_symlink" (func $symlink (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_rename" (func $rename (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_link" (func $link (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_create_directory" (func $mkdir (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_unlink_file" (func $unlink (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "sub/../../outside/secret")
  (data (i32.const 200) "link_up")
  (data (i32.const 300) "/etc/passwd")
  (data (i32.const 400) "link_passwd")
  (data (i32.const 500) "file.txt")
  (data (i32.const 600) "../outside/secret")
  (data (i32.const 700) "sl")
  (data (i32.const 800) "/etc/shadow")
  (data (i32.const 900) "a")
  (data (i32.const 950) "../x")
  (data (i32.const 1000) "out/secret")
  (data (i32.const 1100) "hl")
  (data (i32.const 1200) "fifo")
  (data (i32.const 1300) "d")
  (data (i32.const 1400) "sub/../../../../../../../../../../../../etc/passwd")

  ;; $r stores errno e as result byte i.
  (func $r (param $i i32) (param $e i32)
    (i32.store8 (i32.add (i32.const 4096) (local.get $i)) (local.get $e)))
  ;; $o opens path at fd with lookup flags, open flags and rights.
  (func $o (param $fd i32) (param $follow i32) (param $p i32) (param $n i32) (param $oflags i32) (param $rights i64) (result i32)
    (call $open (local.get $fd) (local.get $follow) (local.get $p) (local.get $n) (local.get $oflags)
      (local.get $rights) (i64.const 0) (i32.const 0) (i32.const 8192)))

  (func (export "_start")
    (call $r (i32.const 0) (call $o (i32.const 3) (i32.const 1) (i32.const 100) (i32.const 24) (i32.const 0) (i64.const 2)))
    (call $r (i32.const 1) (call $o (i32.const 3) (i32.const 1) (i32.const 200) (i32.const 7) (i32.const 0) (i64.const 2)))
    (call $r (i32.const 2) (call $o (i32.const 3) (i32.const 1) (i32.const 300) (i32.const 11) (i32.const 0) (i64.const 2)))
    (call $r (i32.const 3) (call $o (i32.const 3) (i32.const 0) (i32.const 400) (i32.const 11) (i32.const 0) (i64.const 2)))
    (call $r (i32.const 4) (call $o (i32.const 3) (i32.const 1) (i32.const 500) (i32.const 8) (i32.const 8) (i64.const 64)))
    (call $r (i32.const 5) (call $o (i32.const 3) (i32.const 1) (i32.const 900) (i32.const 1) (i32.const 1) (i64.const 64)))
    (call $r (i32.const 6) (call $symlink (i32.const 800) (i32.const 11) (i32.const 4) (i32.const 700) (i32.const 2)))
    (call $r (i32.const 7) (call $rename (i32.const 4) (i32.const 900) (i32.const 1) (i32.const 4) (i32.const 950) (i32.const 4)))
    (call $r (i32.const 8) (call $link (i32.const 4) (i32.const 0) (i32.const 600) (i32.const 17) (i32.const 4) (i32.const 1100) (i32.const 2)))
    (call $r (i32.const 9) (call $link (i32.const 4) (i32.const 0) (i32.const 1000) (i32.const 10) (i32.const 4) (i32.const 1100) (i32.const 2)))
    (call $r (i32.const 10) (call $rename (i32.const 3) (i32.const 500) (i32.const 8) (i32.const 4) (i32.const 900) (i32.const 1)))
    (call $r (i32.const 11) (call $mkdir (i32.const 3) (i32.const 1300) (i32.const 1)))
    (call $r (i32.const 12) (call $unlink (i32.const 3) (i32.const 500) (i32.const 8)))
    (call $r (i32.const 13) (call $o (i32.const 4) (i32.const 1) (i32.const 1000) (i32.const 10) (i32.const 9) (i64.const 64)))
    (call $r (i32.const 14) (call $o (i32.const 3) (i32.const 1) (i32.const 1200) (i32.const 4) (i32.const 0) (i64.const 2)))
    (call $r (i32.const 15) (call $o (i32.const 3) (i32.const 1) (i32.const 1400) (i32.const 50) (i32.const 0) (i64.const 2)))
    (call $r (i32.const 16) (call $o (i32.const 3) (i32.const 1) (i32.const 500) (i32.const 8) (i32.const 0) (i64.const 2)))
    (i32.store (i32.const 8200) (i32.const 4096))
    (i32.store (i32.const 8204) (i32.const 17))
    (drop (call $write (i32.const 1) (i32.const 8200) (i32.const 1) (i32.const 8208)))))
