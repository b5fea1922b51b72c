// The acceptance matrix's AssemblyScript plugin (see ../README.md): action
// all tries every op family through the SDK (moat.ts, which moat build
// provides) and prints one line per family, "<family> ok <value>" or
// "<family> err <code>: <message>"; action noop returns its input.
import * as moat from "./moat";

// AssemblyScript exports only what the entry file exports.
export { moat_abi_version, moat_actions, moat_alloc, moat_invoke } from "./moat";

// A family's attempt: its value, or the error its line reports.
class Attempt {
  constructor(public value: string, public error: string | null) {}
}

function ok(value: string): Attempt {
  return new Attempt(value, null);
}

function fail(e: moat.MoatError): Attempt {
  return new Attempt("", e.toString());
}

function bytes(s: string): Uint8Array {
  return Uint8Array.wrap(String.UTF8.encode(s));
}

// config reads a value every moat.yaml of the matrix sets.
function config(key: string): moat.Result<string> {
  const r = moat.config.get(key);
  if (!r.ok) return new moat.Result<string>("", r.error);
  if (r.value === null) return new moat.Result<string>("", new moat.MoatError(moat.Code.NOT_FOUND, "config has no " + key));
  return new moat.Result<string>(r.value!, null);
}

function tryLog(input: string): Attempt {
  const err = moat.log.write(moat.log.INFO, "matrix", ["input", input]);
  return err !== null ? fail(err) : ok("");
}

function tryConfig(input: string): Attempt {
  const r = moat.config.get("greeting");
  if (!r.ok) return fail(r.error!);
  return ok(r.value !== null ? r.value! : "-");
}

function tryKV(input: string): Attempt {
  const old = moat.kv.getString("matrix");
  if (!old.ok) return fail(old.error!);
  const err = moat.kv.putString("matrix", input);
  if (err !== null) return fail(err);
  return ok(old.value !== null ? old.value! : "-");
}

function tryDB(input: string): Attempt {
  const n = moat.db.count("notes");
  if (!n.ok) return fail(n.error!);
  const ins = moat.db.insert("notes", new moat.Obj().str("title", input));
  if (!ins.ok) return fail(ins.error!);
  return ok(n.value.toString());
}

function tryKnowledge(input: string): Attempt {
  const hits = moat.knowledge.search("docs", "matrix");
  if (!hits.ok) return fail(hits.error!);
  const add = moat.knowledge.add("docs", input, "matrix " + input);
  if (!add.ok) return fail(add.error!);
  return ok(hits.value.length.toString());
}

function tryTasks(input: string): Attempt {
  const opts = new moat.tasks.Options();
  opts.delay = "1h";
  const t = moat.tasks.enqueue("noop", bytes(input), opts);
  if (!t.ok) return fail(t.error!);
  const s = moat.tasks.status(t.value.id);
  if (!s.ok) return fail(s.error!);
  return ok(s.value.state);
}

function tryHTTP(input: string): Attempt {
  const url = config("url");
  if (!url.ok) return fail(url.error!);
  const req = new moat.http.Request("GET", url.value);
  req.timeoutMs = 5000;
  const r = moat.http.fetch(req);
  if (!r.ok) return fail(r.error!);
  return ok(r.value.status.toString() + " " + r.value.text());
}

function tryMedia(input: string): Attempt {
  const pdf = config("pdf");
  if (!pdf.ok) return fail(pdf.error!);
  const item = moat.media.put(bytes(pdf.value), "application/pdf");
  if (!item.ok) return fail(item.error!);
  const info = moat.media.info(item.value.id);
  if (!info.ok) return fail(info.error!);
  return ok(info.value.type + " " + info.value.size.toString());
}

function tryAI(input: string): Attempt {
  const c = moat.ai.complete("small-chat", [moat.ai.user("say matrix")]);
  if (!c.ok) return fail(c.error!);
  return ok(c.value.text);
}

// ---- files ------------------------------------------------------------------
// AssemblyScript has no file API of its own: a file is read through WASI,
// as wasi-libc reads one for C and Rust. The host preopens each granted
// directory under its own path; the file is opened relative to the
// preopen whose path is the longest prefix of the file's.

// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "fd_prestat_get")
declare function fd_prestat_get(fd: u32, buf: usize): u16;
// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "fd_prestat_dir_name")
declare function fd_prestat_dir_name(fd: u32, path: usize, len: usize): u16;
// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "path_open")
declare function path_open(dirfd: u32, dirflags: u32, path: usize, pathLen: usize, oflags: u16, base: u64, inheriting: u64, fdflags: u16, fd: usize): u16;
// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "fd_read")
declare function fd_read(fd: u32, iovs: usize, iovsLen: usize, nread: usize): u16;
// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "fd_close")
declare function fd_close(fd: u32): u16;

const ERRNO_BADF: u16 = 8;
const LOOKUP_SYMLINK_FOLLOW: u32 = 1;
const RIGHT_FD_READ: u64 = 2;

// The reasons of the errors a read can meet, as the C library words them.
function reason(errno: u16): string {
  switch (errno) {
    case 2: return "Permission denied";
    case 8: return "Bad file descriptor";
    case 31: return "Is a directory";
    case 44: return "No such file or directory";
    case 54: return "Not a directory";
    case 63: return "Operation not permitted";
    case 76: return "Capabilities insufficient";
  }
  return "WASI error " + errno.toString();
}

function ioError(why: string): Attempt {
  return new Attempt("", "io: " + why);
}

// preopen finds the preopened directory holding path: its fd and the path
// relative to it, or fd -1.
class Preopen {
  constructor(public fd: i32, public rel: string) {}
}

function preopen(path: string): Preopen {
  let best = new Preopen(-1, "");
  let bestLen = -1;
  const stat = new ArrayBuffer(8); // prestat: u8 tag, u32 name_len at 4
  for (let fd: u32 = 3; ; fd++) {
    const e = fd_prestat_get(fd, changetype<usize>(stat));
    if (e == ERRNO_BADF) break;
    if (e != 0 || load<u8>(changetype<usize>(stat)) != 0) continue;
    const nameLen = load<u32>(changetype<usize>(stat), 4);
    const name = new ArrayBuffer(<i32>nameLen);
    if (fd_prestat_dir_name(fd, changetype<usize>(name), nameLen) != 0) continue;
    let dir = String.UTF8.decode(name);
    while (dir.length > 1 && dir.endsWith("/")) dir = dir.substring(0, dir.length - 1);
    const holds = dir == "/" ? path.startsWith("/") : path == dir || path.startsWith(dir + "/");
    if (holds && dir.length > bestLen) {
      let rel = path.substring(dir.length);
      while (rel.startsWith("/")) rel = rel.substring(1);
      best = new Preopen(<i32>fd, rel.length > 0 ? rel : ".");
      bestLen = dir.length;
    }
  }
  return best;
}

function readFile(path: string): Attempt {
  const dir = preopen(path);
  if (dir.fd < 0) return ioError("no granted directory holds " + path);
  const rel = String.UTF8.encode(dir.rel);
  const fdOut = new ArrayBuffer(4);
  let e = path_open(<u32>dir.fd, LOOKUP_SYMLINK_FOLLOW, changetype<usize>(rel), rel.byteLength, 0, RIGHT_FD_READ, 0, 0, changetype<usize>(fdOut));
  if (e != 0) return ioError(reason(e));
  const fd = load<u32>(changetype<usize>(fdOut));
  let data = new Uint8Array(0);
  const chunk = new Uint8Array(4096);
  const iov = new ArrayBuffer(12); // iovec {buf, buf_len}, then nread
  store<u32>(changetype<usize>(iov), <u32>chunk.dataStart);
  store<u32>(changetype<usize>(iov), <u32>chunk.length, 4);
  for (;;) {
    e = fd_read(fd, changetype<usize>(iov), 1, changetype<usize>(iov) + 8);
    const n = <i32>load<u32>(changetype<usize>(iov), 8);
    if (e != 0 || n == 0) break;
    const grown = new Uint8Array(data.length + n);
    grown.set(data);
    grown.set(chunk.subarray(0, n), data.length);
    data = grown;
  }
  fd_close(fd);
  if (e != 0) return ioError(reason(e));
  return ok(moat.text(data).trim());
}

function tryFiles(input: string): Attempt {
  const path = config("file");
  if (!path.ok) return fail(path.error!);
  return readFile(path.value);
}

// ---- the actions --------------------------------------------------------------

class Family {
  constructor(public name: string, public attempt: (input: string) => Attempt) {}
}

const families: Family[] = [
  new Family("log", tryLog),
  new Family("config", tryConfig),
  new Family("kv", tryKV),
  new Family("db", tryDB),
  new Family("knowledge", tryKnowledge),
  new Family("tasks", tryTasks),
  new Family("http", tryHTTP),
  new Family("media", tryMedia),
  new Family("ai", tryAI),
  new Family("files", tryFiles),
];

function all(input: Uint8Array): moat.Output {
  const value = moat.text(input);
  let out = "";
  for (let i = 0; i < families.length; i++) {
    const f = families[i];
    const a = f.attempt(value);
    const err = a.error;
    out += (err !== null ? f.name + " err " + err : (f.name + " ok " + a.value).trimEnd()) + "\n";
  }
  return moat.Output.text(out);
}

function noop(input: Uint8Array): moat.Output {
  return moat.Output.bytes(input.slice(0));
}

moat.action("all", all);
moat.action("noop", noop);
