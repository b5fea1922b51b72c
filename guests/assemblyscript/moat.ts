// The moat guest SDK for AssemblyScript (ABI version 1).
//
// A plugin is a WebAssembly module that declares named actions; the moat
// host invokes them with an input and returns their output. Inside an
// action the plugin reaches the host through ops: its configuration
// (config.get), the structured log (log.info...), a key-value store
// (kv.get/put/remove/list), documents in the models of its moat.yaml
// (db.insert/get/query/update/remove/count), ranked full-text search
// (knowledge.add/remove/search), background tasks
// (tasks.enqueue/status/cancel), HTTP requests the host sends (http.fetch),
// media the host keeps (media.fetch/put/get/info/thumbnail), model calls
// (ai.complete/embed) and, for any other op, call.
//
//   import * as moat from "../../guests/assemblyscript/moat";
//   export { moat_abi_version, moat_actions, moat_alloc, moat_invoke } from "../../guests/assemblyscript/moat";
//
//   moat.action("greet", (input: Uint8Array): moat.Output => {
//     const name = moat.text(input);
//     moat.log.info("greeting", ["name", name]);
//     return moat.Output.text("Hello, " + name + "!");
//   });
//
// The entry file must re-export the four exports (AssemblyScript exports
// only what the entry file exports) and build with this file's abort:
//
//   asc index.ts --use abort=<path to this file without .ts>/abort -O3 -o plugin.wasm
//
// (examples/hello-as/asconfig.json does both). The module then imports only
// moat.call and, for abort's message, wasi_snapshot_preview1.fd_write; no
// WASI shim is needed, because a plugin talks to the world through ops.
//
// Conventions:
//   - AssemblyScript has no exceptions, so ops return a Result<T> (or a
//     MoatError | null) and actions return an Output. Output.fail(err)
//     passes an op's error code (for example "denied") to the host's caller;
//     r.error!.is(Code.CONFLICT) tells a stale db version.
//   - JSON going to the host (documents, conditions, meta) is built with
//     Obj and Value, which escape for you; Value.raw checks JSON text is one
//     value, so nothing handed in can add members to the request around it.
//   - An abort (a failed assertion, an out-of-bounds index, running out of
//     memory) ends the instance: the host reports a trap carrying the
//     message, which abort writes to stderr.
//   - The host reuses an instance for many invocations, one at a time, so
//     globals persist. The input is valid only during the call. Ops work
//     only while an action runs; register actions at the top level.

// ---- the ABI ----------------------------------------------------------------

/** The ABI version this SDK implements; the host refuses other versions. */
export const ABI_VERSION: i32 = 1;

/** Error codes of the ABI. They cross the wire as strings. */
export namespace Code {
  export const INVALID_ARGUMENT = "invalid_argument";
  export const NOT_FOUND = "not_found";
  export const UNKNOWN_OP = "unknown_op";
  export const DENIED = "denied";
  export const TOO_LARGE = "too_large";
  export const CONFLICT = "conflict";
  export const UNAVAILABLE = "unavailable";
  export const INTERNAL = "internal";
  export const RESOURCE_EXHAUSTED = "resource_exhausted";
  export const GUEST_ERROR = "guest_error";
  export const CONFIRMATION_REQUIRED = "confirmation_required";
}

/** A failure: an ABI code and a message. */
export class MoatError {
  constructor(public code: string, public message: string) {
    if (code.length == 0) this.code = Code.GUEST_ERROR;
  }
  /** Whether the error has the given code. */
  is(code: string): bool {
    return this.code == code;
  }
  toString(): string {
    return this.message.length ? this.code + ": " + this.message : this.code;
  }
}

/** The outcome of an op: a value, or an error (then ok is false). */
export class Result<T> {
  constructor(public value: T, public error: MoatError | null) {}
  get ok(): bool {
    return this.error === null;
  }
}

function success<T>(value: T): Result<T> {
  return new Result<T>(value, null);
}

function failure<T>(e: MoatError): Result<T> {
  // The value of a failed result is never read: zero (null) will do.
  if (isReference<T>()) return new Result<T>(changetype<T>(0), e);
  return new Result<T>(<T>0, e);
}

/** What an action returns: its output, or an error that fails the call. */
export class Output {
  private constructor(public bytes: Uint8Array, public error: MoatError | null) {}
  /** Output of raw bytes. */
  static bytes(b: Uint8Array): Output {
    return new Output(b, null);
  }
  /** Output of a string, as UTF-8. */
  static text(s: string): Output {
    return new Output(Uint8Array.wrap(String.UTF8.encode(s)), null);
  }
  /** Fails the invocation with err's code, e.g. an op's error. */
  static fail(err: MoatError): Output {
    return new Output(new Uint8Array(0), err);
  }
  /** Fails the invocation with a code (see Code) and a message. */
  static error(code: string, message: string): Output {
    return new Output(new Uint8Array(0), new MoatError(code, message));
  }
}

/** The UTF-8 text in b (an action's input, a kv value). */
export function text(b: Uint8Array): string {
  return String.UTF8.decodeUnsafe(b.dataStart, b.length);
}

/** An action's handler. The input is valid only during the call. */
export type Handler = (input: Uint8Array) => Output;

// ---- byte buffers and JSON ---------------------------------------------------
// Requests are built and replies read as UTF-8 bytes, so a large kv value
// is never copied through a UTF-16 string.

/** A growable byte buffer. */
class Buf {
  data: Uint8Array = new Uint8Array(64);
  len: i32 = 0;

  reserve(n: i32): void {
    if (this.len + n <= this.data.length) return;
    let cap = this.data.length * 2;
    while (cap < this.len + n) cap *= 2;
    const d = new Uint8Array(cap);
    memory.copy(d.dataStart, this.data.dataStart, this.len);
    this.data = d;
  }
  byte(b: i32): void {
    this.reserve(1);
    unchecked((this.data[this.len++] = <u8>b));
  }
  raw(p: usize, n: i32): void {
    this.reserve(n);
    memory.copy(this.data.dataStart + this.len, p, n);
    this.len += n;
  }
  str(s: string): void {
    const b = String.UTF8.encode(s);
    this.raw(changetype<usize>(b), b.byteLength);
  }
  json(s: string): void {
    this.byte(0x22);
    let start = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c != 0x22 && c != 0x5c && c >= 0x20) continue;
      if (i > start) this.str(s.substring(start, i));
      if (c == 0x22) this.str('\\"');
      else if (c == 0x5c) this.str("\\\\");
      else this.str("\\u00" + (c < 16 ? "0" : "") + c.toString(16));
      start = i + 1;
    }
    if (start < s.length) this.str(start == 0 ? s : s.substring(start));
    this.byte(0x22);
  }
  bytes(): Uint8Array {
    return this.data.subarray(0, this.len);
  }
  text(): string {
    return String.UTF8.decodeUnsafe(this.data.dataStart, this.len);
  }
}

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

function b64encode(out: Buf, b: Uint8Array): void {
  out.reserve(((b.length + 2) / 3) * 4);
  for (let i = 0; i < b.length; i += 3) {
    const v = (<u32>b[i] << 16) | (i + 1 < b.length ? <u32>b[i + 1] << 8 : 0) | (i + 2 < b.length ? <u32>b[i + 2] : 0);
    out.byte(B64.charCodeAt(v >> 18));
    out.byte(B64.charCodeAt((v >> 12) & 63));
    out.byte(i + 1 < b.length ? B64.charCodeAt((v >> 6) & 63) : 0x3d);
    out.byte(i + 2 < b.length ? B64.charCodeAt(v & 63) : 0x3d);
  }
}

function b64digit(c: i32): i32 {
  if (c >= 0x41 && c <= 0x5a) return c - 0x41;
  if (c >= 0x61 && c <= 0x7a) return c - 0x61 + 26;
  if (c >= 0x30 && c <= 0x39) return c - 0x30 + 52;
  if (c == 0x2b) return 62;
  if (c == 0x2f) return 63;
  return -1;
}

/** Decodes padded standard base64, or returns null. */
function b64decode(s: Uint8Array): Uint8Array | null {
  if (s.length % 4 != 0) return null;
  const out = new Buf();
  for (let i = 0; i < s.length; i += 4) {
    let v: u32 = 0;
    let pad = 0;
    for (let k = 0; k < 4; k++) {
      const c = <i32>s[i + k];
      let d = b64digit(c);
      if (c == 0x3d && i + 4 == s.length && k >= 2) {
        pad++;
        d = 0;
      } else if (d < 0 || pad > 0) return null;
      v = (v << 6) | <u32>d;
    }
    out.byte(v >> 16);
    if (pad < 2) out.byte(v >> 8);
    if (pad < 1) out.byte(v);
  }
  return out.bytes();
}

/**
 * A cursor over a JSON reply (UTF-8 bytes). Every method returns false or
 * null on malformed input. Exported for users of call with ops this SDK
 * does not wrap.
 */
export class JSONReader {
  i: i32 = 0;
  constructor(public b: Uint8Array) {}

  ws(): void {
    while (this.i < this.b.length) {
      const c = this.b[this.i];
      if (c != 0x20 && c != 0x09 && c != 0x0a && c != 0x0d) break;
      this.i++;
    }
  }
  eat(c: i32): bool {
    this.ws();
    if (this.i < this.b.length && this.b[this.i] == c) {
      this.i++;
      return true;
    }
    return false;
  }
  peek(): i32 {
    this.ws();
    return this.i < this.b.length ? <i32>this.b[this.i] : -1;
  }

  private hex4(): i32 {
    if (this.i + 4 > this.b.length) return -1;
    let v = 0;
    for (let k = 0; k < 4; k++) {
      const c = <i32>this.b[this.i++];
      let d = -1;
      if (c >= 0x30 && c <= 0x39) d = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) d = c - 0x61 + 10;
      else if (c >= 0x41 && c <= 0x46) d = c - 0x41 + 10;
      if (d < 0) return -1;
      v = (v << 4) | d;
    }
    return v;
  }

  private utf8(out: Buf, r: i32): void {
    if (r < 0x80) out.byte(r);
    else if (r < 0x800) {
      out.byte(0xc0 | (r >> 6));
      out.byte(0x80 | (r & 0x3f));
    } else if (r < 0x10000) {
      out.byte(0xe0 | (r >> 12));
      out.byte(0x80 | ((r >> 6) & 0x3f));
      out.byte(0x80 | (r & 0x3f));
    } else {
      out.byte(0xf0 | (r >> 18));
      out.byte(0x80 | ((r >> 12) & 0x3f));
      out.byte(0x80 | ((r >> 6) & 0x3f));
      out.byte(0x80 | (r & 0x3f));
    }
  }

  /** Reads a string literal's unescaped UTF-8 bytes into out (or skips it). */
  stringBytes(out: Buf | null): bool {
    if (!this.eat(0x22)) return false;
    while (this.i < this.b.length) {
      const start = this.i;
      while (this.i < this.b.length) {
        const c = this.b[this.i];
        if (c == 0x22 || c == 0x5c || c < 0x20) break;
        this.i++;
      }
      if (out !== null) out.raw(this.b.dataStart + start, this.i - start);
      if (this.i >= this.b.length || this.b[this.i] < 0x20) return false;
      if (this.b[this.i++] == 0x22) return true;
      if (this.i >= this.b.length) return false;
      const e = <i32>this.b[this.i++];
      let plain = -1;
      if (e == 0x22 || e == 0x5c || e == 0x2f) plain = e;
      else if (e == 0x62) plain = 8;
      else if (e == 0x66) plain = 12;
      else if (e == 0x6e) plain = 10;
      else if (e == 0x72) plain = 13;
      else if (e == 0x74) plain = 9;
      if (plain >= 0) {
        if (out !== null) out.byte(plain);
        continue;
      }
      if (e != 0x75) return false;
      let r = this.hex4();
      if (r < 0) return false;
      if (r >= 0xd800 && r < 0xdc00 && this.i + 6 <= this.b.length && this.b[this.i] == 0x5c && this.b[this.i + 1] == 0x75) {
        const save = this.i;
        this.i += 2;
        const lo = this.hex4();
        if (lo >= 0xdc00 && lo < 0xe000) r = 0x10000 + ((r - 0xd800) << 10) + (lo - 0xdc00);
        else this.i = save;
      }
      if (r >= 0xd800 && r < 0xe000) r = 0xfffd; // a lone surrogate, as Go decodes it
      if (out !== null) this.utf8(out, r);
    }
    return false;
  }

  /** Reads a string literal, or returns null. */
  string(): string | null {
    const out = new Buf();
    return this.stringBytes(out) ? out.text() : null;
  }

  /** Steps over one value of any type (nesting is bounded). */
  skip(depth: i32 = 0): bool {
    if (depth > 64) return false;
    const c = this.peek();
    if (c == 0x22) return this.stringBytes(null);
    if (c == 0x7b || c == 0x5b) {
      const close = c == 0x7b ? 0x7d : 0x5d;
      this.i++;
      if (this.eat(close)) return true;
      while (true) {
        if (c == 0x7b && !(this.stringBytes(null) && this.eat(0x3a))) return false;
        if (!this.skip(depth + 1)) return false;
        if (this.eat(0x2c)) continue;
        return this.eat(close);
      }
    }
    // true, false, null or a number, held to JSON's grammar: valid()
    // checks JSON handed to the SDK with this too.
    if (this.literal("true") || this.literal("false") || this.literal("null")) return true;
    return this.number();
  }

  private literal(word: string): bool {
    if (this.i + word.length > this.b.length) return false;
    for (let k = 0; k < word.length; k++) if (<i32>this.b[this.i + k] != word.charCodeAt(k)) return false;
    this.i += word.length;
    return true;
  }

  private digits(): bool {
    const start = this.i;
    while (this.i < this.b.length && this.b[this.i] >= 0x30 && this.b[this.i] <= 0x39) this.i++;
    return this.i > start;
  }

  /** Steps over a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
  number(): bool {
    if (this.i < this.b.length && this.b[this.i] == 0x2d) this.i++;
    if (this.i < this.b.length && this.b[this.i] == 0x30) this.i++;
    else if (!this.digits()) return false;
    if (this.i < this.b.length && this.b[this.i] == 0x2e) {
      this.i++;
      if (!this.digits()) return false;
    }
    if (this.i < this.b.length && (this.b[this.i] == 0x65 || this.b[this.i] == 0x45)) {
      this.i++;
      if (this.i < this.b.length && (this.b[this.i] == 0x2b || this.b[this.i] == 0x2d)) this.i++;
      if (!this.digits()) return false;
    }
    return true;
  }

  /**
   * Positions the cursor at the value of member key of the top-level
   * object; false when the text is not an object or lacks the member.
   */
  find(key: string): bool {
    this.i = 0;
    if (!this.eat(0x7b)) return false;
    if (this.eat(0x7d)) return false;
    const want = Uint8Array.wrap(String.UTF8.encode(key));
    const name = new Buf();
    while (true) {
      name.len = 0;
      if (!this.stringBytes(name) || !this.eat(0x3a)) return false;
      if (name.len == want.length && memory.compare(name.data.dataStart, want.dataStart, name.len) == 0) {
        this.ws();
        return true;
      }
      if (!this.skip() || !this.eat(0x2c)) return false;
    }
  }

  /** The boolean member key; absent or malformed is false. */
  bool(key: string): bool {
    if (!this.find(key) || this.i + 4 > this.b.length) return false;
    return this.b[this.i] == 0x74 && this.b[this.i + 1] == 0x72 && this.b[this.i + 2] == 0x75 && this.b[this.i + 3] == 0x65;
  }

  /** The JSON text of member key (a view into the text), or null. */
  raw(key: string): Uint8Array | null {
    if (!this.find(key)) return null;
    const start = this.i;
    if (!this.skip()) return null;
    return this.b.subarray(start, this.i);
  }

  /** The string member key, or null when absent or not a string. */
  getString(key: string): string | null {
    return this.find(key) ? this.string() : null;
  }

  /** The integer member key: an error when absent or not an integer of 64 bits. */
  getInt(key: string): Result<i64> {
    const raw = this.raw(key);
    if (raw === null) return failure<i64>(new MoatError(Code.INTERNAL, "member " + key + " is missing or malformed"));
    const v = parseInt64(raw);
    if (!v.ok) return failure<i64>(new MoatError(Code.INTERNAL, "member " + key + " is not an integer"));
    return v;
  }

  /** The number member key: an error when absent or not a number. */
  getNumber(key: string): Result<f64> {
    const raw = this.raw(key);
    if (raw === null || !new JSONReader(raw).number()) return failure<f64>(new MoatError(Code.INTERNAL, "member " + key + " is missing or not a number"));
    return success<f64>(parseFloat(String.UTF8.decodeUnsafe(raw.dataStart, raw.length)));
  }

  /**
   * The elements of the array member key, each a view of its JSON text,
   * or null when absent or malformed.
   */
  elements(key: string): Uint8Array[] | null {
    if (!this.find(key) || !this.eat(0x5b)) return null;
    const out = new Array<Uint8Array>();
    if (this.eat(0x5d)) return out;
    while (true) {
      this.ws();
      const start = this.i;
      if (!this.skip()) return null;
      out.push(this.b.subarray(start, this.i));
      if (this.eat(0x2c)) continue;
      return this.eat(0x5d) ? out : null;
    }
    return null; // unreachable; AssemblyScript wants a return
  }
}

/** The integer in b (JSON text with no fraction or exponent), if it fits in 64 bits. */
function parseInt64(b: Uint8Array): Result<i64> {
  const r = new JSONReader(b);
  if (!r.number() || r.i != b.length) return failure<i64>(new MoatError(Code.INVALID_ARGUMENT, "not a number"));
  let i = 0;
  const neg = b.length > 0 && b[0] == 0x2d;
  if (neg) i++;
  let v: u64 = 0;
  for (; i < b.length; i++) {
    const d = <i32>b[i] - 0x30;
    if (d < 0 || d > 9) return failure<i64>(new MoatError(Code.INVALID_ARGUMENT, "not an integer"));
    if (v > (u64.MAX_VALUE - <u64>d) / 10) return failure<i64>(new MoatError(Code.INVALID_ARGUMENT, "out of range"));
    v = v * 10 + <u64>d;
  }
  if (neg ? v > <u64>i64.MAX_VALUE + 1 : v > <u64>i64.MAX_VALUE) return failure<i64>(new MoatError(Code.INVALID_ARGUMENT, "out of range"));
  return success<i64>(neg ? -(<i64>v) : <i64>v);
}

/**
 * Whether text is exactly one JSON value (white space around it
 * allowed). The SDK checks JSON handed to it with this before the JSON
 * joins a request, so that text such as {}, "model": "other" cannot add
 * members to the request around it.
 */
export function valid(text: string): bool {
  const r = new JSONReader(Uint8Array.wrap(String.UTF8.encode(text)));
  r.ws();
  if (!r.skip()) return false;
  r.ws();
  return r.i == r.b.length;
}

/** s as a JSON string literal. */
function quote(s: string): string {
  const parts = new Array<string>();
  parts.push('"');
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c != 0x22 && c != 0x5c && c >= 0x20) continue;
    if (i > start) parts.push(s.substring(start, i));
    if (c == 0x22) parts.push('\\"');
    else if (c == 0x5c) parts.push("\\\\");
    else parts.push("\\u00" + (c < 16 ? "0" : "") + c.toString(16));
    start = i + 1;
  }
  if (start < s.length) parts.push(start == 0 ? s : s.substring(start));
  parts.push('"');
  return parts.join("");
}

/**
 * A JSON value to send: a document's field, a condition's value, a meta
 * value. Make one with the static constructors; Value.raw takes JSON
 * text, checked to be one value. A number that is not finite has no JSON
 * form: its Value is not ok, and an op given it fails with
 * invalid_argument before anything is sent.
 */
export class Value {
  private constructor(public readonly json: string, public readonly ok: bool = true) {}
  static str(s: string): Value {
    return new Value(quote(s));
  }
  static int(v: i64): Value {
    return new Value(v.toString());
  }
  static num(v: f64): Value {
    return isFinite(v) ? new Value(v.toString()) : new Value("null", false);
  }
  static bool(v: bool): Value {
    return new Value(v ? "true" : "false");
  }
  static null(): Value {
    return new Value("null");
  }
  static strs(a: string[]): Value {
    const parts = new Array<string>(a.length);
    for (let i = 0; i < a.length; i++) parts[i] = quote(a[i]);
    return new Value("[" + parts.join(",") + "]");
  }
  static ints(a: i64[]): Value {
    const parts = new Array<string>(a.length);
    for (let i = 0; i < a.length; i++) parts[i] = a[i].toString();
    return new Value("[" + parts.join(",") + "]");
  }
  static array(a: Value[]): Value {
    let ok = true;
    const parts = new Array<string>(a.length);
    for (let i = 0; i < a.length; i++) {
      parts[i] = a[i].json;
      ok = ok && a[i].ok;
    }
    return new Value("[" + parts.join(",") + "]", ok);
  }
  static object(o: Obj): Value {
    return new Value(o.json(), o.ok);
  }
  /** JSON text as a value, or null unless it is exactly one JSON value. */
  static raw(json: string): Value | null {
    return valid(json) ? new Value(json) : null;
  }
}

/**
 * A JSON object being built, for documents, sets, meta and filters:
 *
 *   const doc = new moat.Obj().str("title", title).int("n", 3).bool("done", false);
 */
export class Obj {
  private parts: string[] = [];
  ok: bool = true;
  /** Sets key to v. */
  set(key: string, v: Value): Obj {
    this.parts.push(quote(key) + ":" + v.json);
    this.ok = this.ok && v.ok;
    return this;
  }
  str(key: string, v: string): Obj {
    return this.set(key, Value.str(v));
  }
  int(key: string, v: i64): Obj {
    return this.set(key, Value.int(v));
  }
  num(key: string, v: f64): Obj {
    return this.set(key, Value.num(v));
  }
  bool(key: string, v: bool): Obj {
    return this.set(key, Value.bool(v));
  }
  strs(key: string, v: string[]): Obj {
    return this.set(key, Value.strs(v));
  }
  get empty(): bool {
    return this.parts.length == 0;
  }
  /** The object's JSON text. */
  json(): string {
    return "{" + this.parts.join(",") + "}";
  }
}

// ---- the transport ------------------------------------------------------------

@external("moat", "call")
declare function hostCall(opPtr: usize, opLen: i32, reqPtr: usize, reqLen: i32, respPtr: usize, respCap: i32): u64;

// The op names as UTF-8, encoded once.
const OP_CONFIG_GET = String.UTF8.encode("config.get");
const OP_LOG_WRITE = String.UTF8.encode("log.write");
const OP_KV_GET = String.UTF8.encode("kv.get");
const OP_KV_PUT = String.UTF8.encode("kv.put");
const OP_KV_DELETE = String.UTF8.encode("kv.delete");
const OP_KV_LIST = String.UTF8.encode("kv.list");

const STATUS_OK: u32 = 0;
const STATUS_ERROR: u32 = 1;
const STATUS_TOO_SMALL: u32 = 2;

// The first response buffer is large enough that almost every reply arrives
// in one crossing; it grows to the largest reply seen, and a buffer past
// MAX_RETAINED is dropped when the invocation ends.
const INITIAL_RESP = 16 << 10;
const MAX_RETAINED = 1 << 20;

let respBuf = new Uint8Array(INITIAL_RESP);

function decodeError(op: string, body: Uint8Array): MoatError {
  const r = new JSONReader(body);
  if (r.find("code")) {
    const code = r.string();
    if (code !== null && code.length > 0) {
      let msg: string | null = null;
      if (r.find("message")) msg = r.string();
      return new MoatError(code, msg !== null ? msg : "");
    }
  }
  return new MoatError(Code.INTERNAL, "op " + op + " failed with an undecodable error reply: " + String.UTF8.decode(body.slice(0).buffer));
}

/**
 * Sends one op and returns the reply body, which aliases the shared
 * response buffer: it is valid until the next op.
 */
function roundTrip(op: string, req: Buf, name: ArrayBuffer = String.UTF8.encode(op)): Result<Uint8Array> {
  if (op.length == 0) return failure<Uint8Array>(new MoatError(Code.INVALID_ARGUMENT, "op name is empty"));
  let v = hostCall(changetype<usize>(name), name.byteLength, req.data.dataStart, req.len, respBuf.dataStart, respBuf.length);
  let status = <u32>(v >> 32);
  let n = <i32>(<u32>v);
  if (status == STATUS_TOO_SMALL) {
    // The host kept the reply; fetch it with an empty op name into a
    // buffer of the size it asked for.
    if (n <= respBuf.length) {
      return failure<Uint8Array>(new MoatError(Code.INTERNAL, "op " + op + ": host asked for a " + n.toString() + "-byte buffer but " + respBuf.length.toString() + " bytes were offered"));
    }
    respBuf = new Uint8Array(n);
    v = hostCall(0, 0, 0, 0, respBuf.dataStart, respBuf.length);
    status = <u32>(v >> 32);
    n = <i32>(<u32>v);
    if (status == STATUS_TOO_SMALL) return failure<Uint8Array>(new MoatError(Code.INTERNAL, "op " + op + ": host asked for a larger buffer twice"));
  }
  if (n > respBuf.length) return failure<Uint8Array>(new MoatError(Code.INTERNAL, "op " + op + ": host reported a reply larger than the buffer"));
  const body = respBuf.subarray(0, n);
  if (status == STATUS_OK) return success<Uint8Array>(body);
  if (status == STATUS_ERROR) return failure<Uint8Array>(decodeError(op, body));
  return failure<Uint8Array>(new MoatError(Code.INTERNAL, "op " + op + ": host returned unknown status " + status.toString()));
}

// The request buffer, reused by every op: ops never overlap (the guest is
// single-threaded and nothing runs inside a host call), and reusing it
// saves allocations, which are the main cost of an op in AssemblyScript.
const reqBuf = new Buf();

function newRequest(): Buf {
  reqBuf.len = 0;
  return reqBuf;
}

function keyRequest(key: string): Buf {
  const b = newRequest();
  b.str('{"key":');
  b.json(key);
  return b;
}

/**
 * Runs an op by name with a JSON request ("" means {}) and returns the
 * JSON reply: the door to any op this SDK does not wrap.
 */
export function call(op: string, request: string): Result<string> {
  const req = newRequest();
  req.str(request.length ? request : "{}");
  const r = roundTrip(op, req);
  if (!r.ok) return failure<string>(r.error!);
  return success<string>(String.UTF8.decodeUnsafe(r.value.dataStart, r.value.length));
}

// ---- ops ----------------------------------------------------------------------

/**
 * Who an invocation runs for, as caller() returns it: the user and
 * organization the host authenticated, the user's roles, and the
 * correlation id the host's log records and audit events carry.
 */
export class Principal {
  user: string = "";
  org: string = "";
  roles: string[] = [];
  correlationId: string = "";
  /** Whether the principal holds role. */
  hasRole(role: string): bool {
    return this.roles.includes(role);
  }
}

/**
 * Who the invocation runs for (the op moat.caller). It needs no grant. The
 * principal is the host's, never anything in the input: key per-user data
 * by caller().value.user, not by a user id the caller sends, which anyone
 * can write.
 */
export function caller(): Result<Principal> {
  const req = newRequest();
  req.str("{}");
  const r = roundTrip("moat.caller", req);
  if (!r.ok) return failure<Principal>(r.error!);
  const j = new JSONReader(r.value);
  const p = new Principal();
  const user = j.getString("user"), org = j.getString("org");
  if (user === null || org === null || user.length == 0 || org.length == 0) {
    return failure<Principal>(new MoatError(Code.INTERNAL, "op moat.caller: the reply names no user or organization"));
  }
  p.user = user;
  p.org = org;
  const id = j.getString("correlation_id");
  if (id !== null) p.correlationId = id;
  const els = j.elements("roles");
  if (els !== null) {
    for (let i = 0; i < els.length; i++) {
      const role = new JSONReader(els[i]).string();
      if (role === null) return failure<Principal>(new MoatError(Code.INTERNAL, "op moat.caller: a role of the reply is not a string"));
      p.roles.push(role);
    }
  }
  return success<Principal>(p);
}

/** The module's configuration, set by whoever loads the module. */
export namespace config {
  /** The value of key, or null when the configuration has no such key. */
  export function get(key: string): Result<string | null> {
    const req = keyRequest(key);
    req.byte(0x7d);
    const r = roundTrip("config.get", req, OP_CONFIG_GET);
    if (!r.ok) return failure<string | null>(r.error!);
    const j = new JSONReader(r.value);
    if (!j.bool("found")) return success<string | null>(null);
    if (!j.find("value")) return success<string | null>("");
    const v = j.string();
    if (v === null) return failure<string | null>(new MoatError(Code.INTERNAL, "op config.get: reply value is not a string"));
    return success<string | null>(v);
  }
}

/**
 * The host's structured log; the host tags each record with the module,
 * action, principal and correlation id. Fields are alternating keys and
 * string values, as in log.info("greeted", ["name", name]). debug, info,
 * warn and error drop the record if the op fails (logging should never
 * fail an action); write returns the error.
 */
export namespace log {
  export const DEBUG = "debug";
  export const INFO = "info";
  export const WARN = "warn";
  export const ERROR = "error";

  /** Writes one record; level is DEBUG, INFO, WARN or ERROR. */
  export function write(level: string, message: string, fields: string[] = []): MoatError | null {
    const req = newRequest();
    req.str('{"level":');
    req.json(level);
    req.str(',"message":');
    req.json(message);
    if (fields.length > 0) {
      req.str(',"fields":{');
      for (let i = 0; i < fields.length; i += 2) {
        if (i > 0) req.byte(0x2c);
        if (i + 1 < fields.length) {
          req.json(fields[i]);
          req.byte(0x3a);
          req.json(fields[i + 1]);
        } else {
          req.str('"!BADKEY":'); // a key without a value, as log/slog does
          req.json(fields[i]);
        }
      }
      req.byte(0x7d);
    }
    req.byte(0x7d);
    const r = roundTrip("log.write", req, OP_LOG_WRITE);
    return r.error;
  }
  export function debug(message: string, fields: string[] = []): void {
    write(DEBUG, message, fields);
  }
  export function info(message: string, fields: string[] = []): void {
    write(INFO, message, fields);
  }
  export function warn(message: string, fields: string[] = []): void {
    write(WARN, message, fields);
  }
  export function error(message: string, fields: string[] = []): void {
    write(ERROR, message, fields);
  }
}

/**
 * The module's key-value store, scoped by the host to the caller's
 * organization and this module. Keys are at most 512 bytes and values at
 * most 1 MiB; the host enforces both (Code.TOO_LARGE).
 */
export namespace kv {
  /** The value of key, or null if the key does not exist. */
  export function get(key: string): Result<Uint8Array | null> {
    const req = keyRequest(key);
    req.byte(0x7d);
    const r = roundTrip("kv.get", req, OP_KV_GET);
    if (!r.ok) return failure<Uint8Array | null>(r.error!);
    const j = new JSONReader(r.value);
    if (!j.bool("found")) return success<Uint8Array | null>(null);
    if (!j.find("value")) return success<Uint8Array | null>(new Uint8Array(0));
    const enc = new Buf();
    const v = j.stringBytes(enc) ? b64decode(enc.bytes()) : null;
    if (v === null) return failure<Uint8Array | null>(new MoatError(Code.INTERNAL, "op kv.get: the value is not a base64 string"));
    return success<Uint8Array | null>(v);
  }

  /** The value of key as UTF-8 text, or null if the key does not exist. */
  export function getString(key: string): Result<string | null> {
    const r = get(key);
    if (!r.ok) return failure<string | null>(r.error!);
    const v = r.value;
    if (v === null) return success<string | null>(null);
    return success<string | null>(String.UTF8.decodeUnsafe(v.dataStart, v.length));
  }

  /** Sets key to value, replacing any value it had. */
  export function put(key: string, value: Uint8Array): MoatError | null {
    const req = keyRequest(key);
    req.str(',"value":"');
    b64encode(req, value);
    req.str('"}');
    return roundTrip("kv.put", req, OP_KV_PUT).error;
  }

  /** Sets key to the UTF-8 bytes of value. */
  export function putString(key: string, value: string): MoatError | null {
    return put(key, Uint8Array.wrap(String.UTF8.encode(value)));
  }

  /** Removes key and reports whether it existed. (delete is a reserved word.) */
  export function remove(key: string): Result<bool> {
    const req = keyRequest(key);
    req.byte(0x7d);
    const r = roundTrip("kv.delete", req, OP_KV_DELETE);
    if (!r.ok) return failure<bool>(r.error!);
    return success<bool>(new JSONReader(r.value).bool("deleted"));
  }

  /**
   * Every key that starts with prefix, in lexical order, following the
   * host's pagination (at most 1000 keys per op).
   */
  export function list(prefix: string): Result<string[]> {
    const keys = new Array<string>();
    let after: string | null = null;
    while (true) {
      const req = newRequest();
      req.str('{"prefix":');
      req.json(prefix);
      if (after !== null) {
        req.str(',"after":');
        req.json(after);
      }
      req.byte(0x7d);
      const r = roundTrip("kv.list", req, OP_KV_LIST);
      if (!r.ok) return failure<string[]>(r.error!);
      const j = new JSONReader(r.value);
      const more = j.bool("more");
      if (!j.find("keys") || !j.eat(0x5b)) return failure<string[]>(new MoatError(Code.INTERNAL, "op kv.list: reply has no keys array"));
      let count = 0;
      if (!j.eat(0x5d)) {
        while (true) {
          const k = j.string();
          if (k === null) return failure<string[]>(new MoatError(Code.INTERNAL, "op kv.list: malformed keys array"));
          keys.push(k);
          after = k;
          count++;
          if (j.eat(0x2c)) continue;
          if (j.eat(0x5d)) break;
          return failure<string[]>(new MoatError(Code.INTERNAL, "op kv.list: malformed keys array"));
        }
      }
      if (!more) return success<string[]>(keys);
      if (count == 0) return failure<string[]>(new MoatError(Code.INTERNAL, "op kv.list: the host said more keys follow but returned none"));
    }
    return success<string[]>(keys); // unreachable; AssemblyScript wants a return
  }
}

// The members a request ends with, written into req: "key":JSON for each
// Value or Obj given, refused (invalid_argument) when one is not ok.
function badJSON<T>(op: string, what: string): Result<T> {
  return failure<T>(new MoatError(Code.INVALID_ARGUMENT, "op " + op + ": " + what + " holds a number that is not finite, which has no JSON form"));
}

function memberString(req: Buf, key: string, v: string): void {
  req.byte(0x2c);
  req.json(key);
  req.byte(0x3a);
  req.json(v);
}

function memberJSON(req: Buf, key: string, json: string): void {
  req.byte(0x2c);
  req.json(key);
  req.byte(0x3a);
  req.str(json);
}

function memberStrings(req: Buf, key: string, a: string[]): void {
  req.byte(0x2c);
  req.json(key);
  req.str(":[");
  for (let i = 0; i < a.length; i++) {
    if (i > 0) req.byte(0x2c);
    req.json(a[i]);
  }
  req.byte(0x5d);
}

function utf8(b: Uint8Array): string {
  return String.UTF8.decodeUnsafe(b.dataStart, b.length);
}

/**
 * The module's documents: JSON objects in the models its moat.yaml
 * declares (models:), each granted by name (capabilities: {db: [notes]}).
 * The host checks every document against its model and scopes every op to
 * the caller's organization (and, in a model with scope: user, to the
 * caller): another organization's or user's document is not found.
 *
 *   const ins = moat.db.insert("notes", new moat.Obj().str("title", "buy milk").bool("done", false));
 *   if (!ins.ok) return moat.Output.fail(ins.error!);
 *   const q = new moat.db.Query();
 *   q.where = [moat.db.cond("done", moat.db.EQ, moat.Value.bool(false))];
 *   q.order = ["-due"];
 *   const page = moat.db.query("notes", q);
 *
 * Field types, operators and limits are those of abi/db.go in the moat
 * repository.
 */
export namespace db {
  export const EQ = "=";
  export const NE = "!=";
  export const LT = "<";
  export const LE = "<=";
  export const GT = ">";
  export const GE = ">=";
  export const IN = "in";
  export const PREFIX = "prefix";
  export const CONTAINS = "contains";

  /** A new document's id and version (1). */
  export class Inserted {
    constructor(public id: string, public version: i64) {}
  }

  /** A stored document and what the host keeps beside it. */
  export class Doc {
    id: string = "";
    /** 1 on insert, one more on every update. */
    version: i64 = 0;
    owner: string = "";
    /** RFC 3339 in UTC, millisecond precision. */
    created: string = "";
    updated: string = "";
    /** The document: a JSON object. */
    json: string = "{}";
    /** A reader of the document's members (getString, getInt...). */
    reader(): JSONReader {
      return new JSONReader(Uint8Array.wrap(String.UTF8.encode(this.json)));
    }
  }

  /** One condition: [field, op, value]. */
  export class Cond {
    constructor(public field: string, public op: string, public value: Value) {}
  }

  /** A condition: cond("done", db.EQ, Value.bool(false)). */
  export function cond(field: string, op: string, value: Value): Cond {
    return new Cond(field, op, value);
  }

  /**
   * A query: every condition of where holds; order names fields, "-field"
   * for descending (ties, and no order, go by id); limit is the page size
   * (0: the host's default, 100; at most 1000); after is the next of the
   * previous page.
   */
  export class Query {
    where: Cond[] = [];
    order: string[] = [];
    limit: i32 = 0;
    after: string = "";
  }

  /** One page of a query; next is "" on the last. */
  export class Page {
    docs: Doc[] = [];
    next: string = "";
  }

  /**
   * What update does: set's fields replace theirs, unset's are removed;
   * with version not 0 the document must still be at that version, or the
   * update fails with Code.CONFLICT.
   */
  export class Change {
    set: Obj | null = null;
    unset: string[] = [];
    version: i64 = 0;
  }

  function request(model: string, id: string | null = null): Buf {
    const req = newRequest();
    req.str('{"model":');
    req.json(model);
    if (id !== null) memberString(req, "id", id);
    return req;
  }

  function conditions(req: Buf, where: Cond[]): bool {
    if (where.length == 0) return true;
    req.str(',"where":[');
    for (let i = 0; i < where.length; i++) {
      const c = where[i];
      if (!c.value.ok) return false;
      if (i > 0) req.byte(0x2c);
      req.byte(0x5b);
      req.json(c.field);
      req.byte(0x2c);
      req.json(c.op);
      req.byte(0x2c);
      req.str(c.value.json);
      req.byte(0x5d);
    }
    req.byte(0x5d);
    return true;
  }

  function readDoc(op: string, b: Uint8Array): Result<Doc> {
    const j = new JSONReader(b);
    const d = new Doc();
    const id = j.getString("id");
    const version = j.getInt("version");
    const doc = j.raw("doc");
    if (id === null || !version.ok || doc === null || doc.length == 0 || doc[0] != 0x7b) {
      return failure<Doc>(new MoatError(Code.INTERNAL, "op " + op + ": a document of the reply lacks its id, version or doc"));
    }
    d.id = id;
    d.version = version.value;
    d.json = utf8(doc);
    const owner = j.getString("owner");
    if (owner !== null) d.owner = owner;
    const created = j.getString("created");
    if (created !== null) d.created = created;
    const updated = j.getString("updated");
    if (updated !== null) d.updated = updated;
    return success<Doc>(d);
  }

  /** Stores doc as a new document of model. */
  export function insert(model: string, doc: Obj): Result<Inserted> {
    if (!doc.ok) return badJSON<Inserted>("db.insert", "the document");
    const req = request(model);
    memberJSON(req, "doc", doc.json());
    req.byte(0x7d);
    const r = roundTrip("db.insert", req);
    if (!r.ok) return failure<Inserted>(r.error!);
    const j = new JSONReader(r.value);
    const id = j.getString("id");
    const v = j.getInt("version");
    if (id === null || !v.ok) return failure<Inserted>(new MoatError(Code.INTERNAL, "op db.insert: the reply has no id and version"));
    return success<Inserted>(new Inserted(id, v.value));
  }

  /** The document id of model, or null when the caller's scope holds none. */
  export function get(model: string, id: string): Result<Doc | null> {
    const req = request(model, id);
    req.byte(0x7d);
    const r = roundTrip("db.get", req);
    if (!r.ok) return failure<Doc | null>(r.error!);
    if (!new JSONReader(r.value).bool("found")) return success<Doc | null>(null);
    const d = readDoc("db.get", r.value);
    if (!d.ok) return failure<Doc | null>(d.error!);
    return success<Doc | null>(d.value);
  }

  /** One page of the documents of model that q selects. */
  export function query(model: string, q: Query): Result<Page> {
    const req = request(model);
    if (!conditions(req, q.where)) return badJSON<Page>("db.query", "a condition's value");
    if (q.order.length > 0) memberStrings(req, "order", q.order);
    if (q.limit != 0) memberJSON(req, "limit", q.limit.toString());
    if (q.after.length > 0) memberString(req, "after", q.after);
    req.byte(0x7d);
    const r = roundTrip("db.query", req);
    if (!r.ok) return failure<Page>(r.error!);
    const j = new JSONReader(r.value);
    const els = j.elements("docs");
    if (els === null) return failure<Page>(new MoatError(Code.INTERNAL, "op db.query: the reply has no docs array"));
    const page = new Page();
    for (let i = 0; i < els.length; i++) {
      const d = readDoc("db.query", els[i]);
      if (!d.ok) return failure<Page>(d.error!);
      page.docs.push(d.value);
    }
    const next = j.getString("next");
    if (next !== null) page.next = next;
    return success<Page>(page);
  }

  /** Changes the document id of model; its new version. */
  export function update(model: string, id: string, c: Change): Result<i64> {
    const req = request(model, id);
    const set = c.set;
    if (set !== null) {
      if (!set.ok) return badJSON<i64>("db.update", "set");
      memberJSON(req, "set", set.json());
    }
    if (c.unset.length > 0) memberStrings(req, "unset", c.unset);
    if (c.version != 0) memberJSON(req, "version", c.version.toString());
    req.byte(0x7d);
    const r = roundTrip("db.update", req);
    if (!r.ok) return failure<i64>(r.error!);
    const v = new JSONReader(r.value).getInt("version");
    if (!v.ok) return failure<i64>(new MoatError(Code.INTERNAL, "op db.update: the reply has no version"));
    return v;
  }

  /**
   * Removes the document id of model and reports whether it was there.
   * With version not 0 the document must still be at that version, or
   * the delete fails with Code.CONFLICT. (delete is a reserved word.)
   */
  export function remove(model: string, id: string, version: i64 = 0): Result<bool> {
    const req = request(model, id);
    if (version != 0) memberJSON(req, "version", version.toString());
    req.byte(0x7d);
    const r = roundTrip("db.delete", req);
    if (!r.ok) return failure<bool>(r.error!);
    return success<bool>(new JSONReader(r.value).bool("deleted"));
  }

  /** Counts the documents of model for which every condition holds. */
  export function count(model: string, where: Cond[] = []): Result<i64> {
    const req = request(model);
    if (!conditions(req, where)) return badJSON<i64>("db.count", "a condition's value");
    req.byte(0x7d);
    const r = roundTrip("db.count", req);
    if (!r.ok) return failure<i64>(r.error!);
    const n = new JSONReader(r.value).getInt("count");
    if (!n.ok) return failure<i64>(new MoatError(Code.INTERNAL, "op db.count: the reply has no count"));
    return n;
  }
}

/**
 * The module's knowledge: documents of text with metadata in named
 * collections, searched by ranked full text, scoped by the host to the
 * caller's organization and this module; granted per collection
 * (capabilities: {knowledge: [docs]}). A query is plain text, never
 * syntax. meta and filter are flat: strings, numbers and booleans. The
 * rules and limits are those of abi/knowledge.go in the moat repository.
 */
export namespace knowledge {
  /** One document a search found. */
  export class Hit {
    id: string = "";
    /** Higher is better; compare scores of one search only. */
    score: f64 = 0;
    /** The text around the words found, "…" where it was cut. */
    snippet: string = "";
    /** Its meta: a JSON object ({} when it has none). */
    meta: string = "{}";
    reader(): JSONReader {
      return new JSONReader(Uint8Array.wrap(String.UTF8.encode(this.meta)));
    }
  }

  /** At most limit hits (0: 10; at most 50); only documents whose meta holds every member of filter. */
  export class SearchOptions {
    limit: i32 = 0;
    filter: Obj | null = null;
  }

  function request(collection: string): Buf {
    const req = newRequest();
    req.str('{"collection":');
    req.json(collection);
    return req;
  }

  /** Stores text under id in collection, replacing the document of that id; whether it replaced one. */
  export function add(collection: string, id: string, text: string, meta: Obj | null = null): Result<bool> {
    const req = request(collection);
    memberString(req, "id", id);
    memberString(req, "text", text);
    if (meta !== null) {
      if (!meta.ok) return badJSON<bool>("knowledge.add", "meta");
      memberJSON(req, "meta", meta.json());
    }
    req.byte(0x7d);
    const r = roundTrip("knowledge.add", req);
    if (!r.ok) return failure<bool>(r.error!);
    return success<bool>(new JSONReader(r.value).bool("replaced"));
  }

  /** Removes the document id from collection; whether it existed. (delete is a reserved word.) */
  export function remove(collection: string, id: string): Result<bool> {
    const req = request(collection);
    memberString(req, "id", id);
    req.byte(0x7d);
    const r = roundTrip("knowledge.delete", req);
    if (!r.ok) return failure<bool>(r.error!);
    return success<bool>(new JSONReader(r.value).bool("deleted"));
  }

  /** The documents of collection holding every word of query, best first. */
  export function search(collection: string, query: string, opts: SearchOptions = new SearchOptions()): Result<Hit[]> {
    const req = request(collection);
    memberString(req, "query", query);
    if (opts.limit != 0) memberJSON(req, "limit", opts.limit.toString());
    const filter = opts.filter;
    if (filter !== null) {
      if (!filter.ok) return badJSON<Hit[]>("knowledge.search", "filter");
      memberJSON(req, "filter", filter.json());
    }
    req.byte(0x7d);
    const r = roundTrip("knowledge.search", req);
    if (!r.ok) return failure<Hit[]>(r.error!);
    const els = new JSONReader(r.value).elements("hits");
    if (els === null) return failure<Hit[]>(new MoatError(Code.INTERNAL, "op knowledge.search: the reply has no hits array"));
    const hits = new Array<Hit>();
    for (let i = 0; i < els.length; i++) {
      const j = new JSONReader(els[i]);
      const h = new Hit();
      const id = j.getString("id");
      const score = j.getNumber("score");
      if (id === null || !score.ok) return failure<Hit[]>(new MoatError(Code.INTERNAL, "op knowledge.search: a hit of the reply lacks its id or score"));
      h.id = id;
      h.score = score.value;
      const snippet = j.getString("snippet");
      if (snippet !== null) h.snippet = snippet;
      const meta = j.raw("meta");
      if (meta !== null && meta.length > 0 && meta[0] == 0x7b) h.meta = utf8(meta);
      hits.push(h);
    }
    return success<Hit[]>(hits);
  }
}

/**
 * Background runs of this module's own actions (capabilities: {tasks:
 * true}). A task runs later, on whichever host claims it, as the
 * principal whose invocation enqueued it, retried with backoff; it runs
 * at least once, so make the action safe to repeat. Limits are those of
 * abi/task.go in the moat repository.
 */
export namespace tasks {
  export const QUEUED = "queued";
  export const RUNNING = "running";
  export const DONE = "done";
  export const FAILED = "failed";
  export const CANCELLED = "cancelled";

  /**
   * An enqueue's options; the defaults run the task as soon as a runner is
   * free, with 3 attempts. delay is a duration in Go's syntax ("90s",
   * "15m", "2h30m"), at an RFC 3339 time: at most one, at most 30 days
   * ahead. maxAttempts is 1 to 25 (0: 3). A key makes the enqueue
   * idempotent: while a task of this module and organization holds it,
   * enqueue returns that task (existing true).
   */
  export class Options {
    delay: string = "";
    at: string = "";
    maxAttempts: i32 = 0;
    key: string = "";
  }

  export class Enqueued {
    constructor(public id: string, public existing: bool) {}
  }

  /** A task's state. */
  export class Status {
    /** QUEUED, RUNNING, DONE, FAILED or CANCELLED. */
    state: string = "";
    attempts: i32 = 0;
    maxAttempts: i32 = 0;
    /** Done: the action's output. */
    result: Uint8Array = new Uint8Array(0);
    /** The last failure, and its code. */
    error: string = "";
    code: string = "";
    /** Queued: when it runs next (RFC 3339). */
    runAt: string = "";
  }

  /** What a cancel did; state is the task's state after it either way. */
  export class Cancelled {
    constructor(public cancelled: bool, public state: string) {}
  }

  /** Queues a run of action with input. */
  export function enqueue(action: string, input: Uint8Array, opts: Options = new Options()): Result<Enqueued> {
    const req = newRequest();
    req.str('{"action":');
    req.json(action);
    if (input.length > 0) {
      req.str(',"input":"');
      b64encode(req, input);
      req.byte(0x22);
    }
    if (opts.delay.length > 0) memberString(req, "delay", opts.delay);
    if (opts.at.length > 0) memberString(req, "at", opts.at);
    if (opts.maxAttempts != 0) memberJSON(req, "max_attempts", opts.maxAttempts.toString());
    if (opts.key.length > 0) memberString(req, "key", opts.key);
    req.byte(0x7d);
    const r = roundTrip("task.enqueue", req);
    if (!r.ok) return failure<Enqueued>(r.error!);
    const j = new JSONReader(r.value);
    const id = j.getString("id");
    if (id === null || id.length == 0) return failure<Enqueued>(new MoatError(Code.INTERNAL, "op task.enqueue: the reply has no id"));
    return success<Enqueued>(new Enqueued(id, j.bool("existing")));
  }

  function idRequest(id: string): Buf {
    const req = newRequest();
    req.str('{"id":');
    req.json(id);
    req.byte(0x7d);
    return req;
  }

  /** The state of the task id of this module; Code.NOT_FOUND for an id of no task of it. */
  export function status(id: string): Result<Status> {
    const r = roundTrip("task.status", idRequest(id));
    if (!r.ok) return failure<Status>(r.error!);
    const j = new JSONReader(r.value);
    const st = new Status();
    const state = j.getString("state");
    const attempts = j.getInt("attempts");
    const max = j.getInt("max_attempts");
    if (state === null || !attempts.ok || !max.ok) return failure<Status>(new MoatError(Code.INTERNAL, "op task.status: the reply has no state and attempts"));
    st.state = state;
    st.attempts = <i32>attempts.value;
    st.maxAttempts = <i32>max.value;
    const error = j.getString("error");
    if (error !== null) st.error = error;
    const code = j.getString("code");
    if (code !== null) st.code = code;
    const runAt = j.getString("run_at");
    if (runAt !== null) st.runAt = runAt;
    if (j.find("result")) {
      const enc = new Buf();
      const v = j.stringBytes(enc) ? b64decode(enc.bytes()) : null;
      if (v === null) return failure<Status>(new MoatError(Code.INTERNAL, "op task.status: the result is not a base64 string"));
      st.result = v.slice(0);
    }
    return success<Status>(st);
  }

  /** Cancels the task id of this module if it is queued or running. */
  export function cancel(id: string): Result<Cancelled> {
    const r = roundTrip("task.cancel", idRequest(id));
    if (!r.ok) return failure<Cancelled>(r.error!);
    const j = new JSONReader(r.value);
    const state = j.getString("state");
    return success<Cancelled>(new Cancelled(j.bool("cancelled"), state !== null ? state : ""));
  }
}

/**
 * HTTP requests the host sends for the plugin (the op http.fetch). The
 * host, not the plugin, makes the connection: the URL must be covered by
 * one of the module's http grants (capabilities: {http:
 * ["https://api.example.com:443"]}), on every redirect too, and the
 * address it reaches is checked after DNS, so a plugin reaches loopback,
 * private or metadata addresses only where a grant names them. Headers a
 * grant injects (a secret as a bearer token) are added by the host and
 * never shown to the plugin.
 *
 *   const req = new moat.http.Request("POST", "https://api.example.com/v1/items");
 *   req.headers.set("Content-Type", "application/json");
 *   req.body = Uint8Array.wrap(String.UTF8.encode('{"name":"x"}'));
 *   const r = moat.http.fetch(req);
 *   if (!r.ok) return moat.Output.fail(r.error!);         // denied, too_large, unavailable...
 *   if (r.value.status == 200) { ... r.value.body, r.value.header("content-type") ... }
 *
 * A status of 4xx or 5xx is a response, not an error. Limits are those
 * of abi/http.go in the moat repository.
 */
export namespace http {
  /** A request; the defaults are the host's (GET, 10 s, 1 MiB of body). */
  export class Request {
    /** The plugin's own headers (names case-insensitive). */
    headers: Map<string, string> = new Map<string, string>();
    /** The body's bytes (at most 2 MiB). */
    body: Uint8Array = new Uint8Array(0);
    /** The whole request's time, redirects and body included (0: 10 s; at most 60 000). */
    timeoutMs: i32 = 0;
    /** The most bytes of response body (0: 1 MiB; at most 2 MiB); a longer one fails with Code.TOO_LARGE. */
    maxBytes: i64 = 0;
    /** method "" is GET. */
    constructor(public method: string, public url: string) {}
  }

  /** The final response, after redirects. */
  export class Response {
    status: i32 = 0;
    /** Names in lower case; a header sent more than once is its values joined by ", ". */
    headers: Map<string, string> = new Map<string, string>();
    body: Uint8Array = new Uint8Array(0);
    /** Where the body came from (the last redirect's target). */
    url: string = "";
    /** The value of header name (any case), or null. */
    header(name: string): string | null {
      const k = name.toLowerCase();
      return this.headers.has(k) ? this.headers.get(k) : null;
    }
    /** The body as UTF-8 text. */
    text(): string {
      return utf8(this.body);
    }
  }

  /** Sends req; the final response. */
  export function fetch(req: Request): Result<Response> {
    const b = newRequest();
    b.str('{"url":');
    b.json(req.url);
    if (req.method.length > 0) memberString(b, "method", req.method);
    if (req.headers.size > 0) {
      b.str(',"headers":{');
      const names = req.headers.keys();
      for (let i = 0; i < names.length; i++) {
        if (i > 0) b.byte(0x2c);
        b.json(names[i]);
        b.byte(0x3a);
        b.json(req.headers.get(names[i]));
      }
      b.byte(0x7d);
    }
    if (req.body.length > 0) {
      b.str(',"body":"');
      b64encode(b, req.body);
      b.byte(0x22);
    }
    if (req.timeoutMs != 0) memberJSON(b, "timeout_ms", req.timeoutMs.toString());
    if (req.maxBytes != 0) memberJSON(b, "max_bytes", req.maxBytes.toString());
    b.byte(0x7d);
    const r = roundTrip("http.fetch", b);
    if (!r.ok) return failure<Response>(r.error!);
    const j = new JSONReader(r.value);
    const status = j.getInt("status");
    if (!status.ok) return failure<Response>(new MoatError(Code.INTERNAL, "op http.fetch: the reply has no status"));
    const resp = new Response();
    resp.status = <i32>status.value;
    const url = j.getString("url");
    if (url !== null) resp.url = url;
    const headers = j.raw("headers");
    if (headers !== null && headers.length > 0 && headers[0] == 0x7b) {
      const h = new JSONReader(headers);
      h.eat(0x7b);
      if (!h.eat(0x7d)) {
        while (true) {
          const name = h.string();
          const value = name !== null && h.eat(0x3a) ? h.string() : null;
          if (name === null || value === null) return failure<Response>(new MoatError(Code.INTERNAL, "op http.fetch: the reply's headers are not strings"));
          resp.headers.set(name, value);
          if (h.eat(0x2c)) continue;
          if (h.eat(0x7d)) break;
          return failure<Response>(new MoatError(Code.INTERNAL, "op http.fetch: malformed headers in the reply"));
        }
      }
    }
    if (j.find("body")) {
      const enc = new Buf();
      const body = j.stringBytes(enc) ? b64decode(enc.bytes()) : null;
      if (body === null) return failure<Response>(new MoatError(Code.INTERNAL, "op http.fetch: the body is not a base64 string"));
      resp.body = body;
    }
    return success<Response>(resp);
  }

  /** GETs url with the host's default limits. */
  export function get(url: string): Result<Response> {
    return fetch(new Request("GET", url));
  }

  /**
   * The request of an action bound to an HTTP route (moat.yaml routes:;
   * abi/route.go in the moat repository). Headers hold only those the
   * server passes (lower case; never Authorization or Cookie); query holds
   * each parameter's first value.
   */
  export class RouteRequest {
    route: string = "";
    /** key, public or webhook. */
    auth: string = "";
    method: string = "";
    path: string = "";
    params: Map<string, string> = new Map<string, string>();
    query: Map<string, string> = new Map<string, string>();
    headers: Map<string, string> = new Map<string, string>();
    /** A public or webhook caller's source address. */
    remote: string = "";
    body: Uint8Array = new Uint8Array(0);
    /** The path parameter name, or null. */
    param(name: string): string | null {
      return this.params.has(name) ? this.params.get(name) : null;
    }
    /** The value of header name (any case), or null. */
    header(name: string): string | null {
      const k = name.toLowerCase();
      return this.headers.has(k) ? this.headers.get(k) : null;
    }
    /** The first value of the query parameter name, or null. */
    queryValue(name: string): string | null {
      return this.query.has(name) ? this.query.get(name) : null;
    }
    /** The body as UTF-8 text. */
    text(): string {
      return utf8(this.body);
    }
  }

  /** The members of a JSON object of strings (or, with firsts, of arrays of strings: their first), or null when malformed. */
  function stringMap(raw: Uint8Array | null, firsts: bool, into: Map<string, string>): bool {
    if (raw === null) return true;
    const h = new JSONReader(raw);
    if (!h.eat(0x7b)) return false;
    if (h.eat(0x7d)) return true;
    while (true) {
      const name = h.string();
      if (name === null || !h.eat(0x3a)) return false;
      let value: string | null = null;
      if (firsts) {
        if (!h.eat(0x5b)) return false;
        if (!h.eat(0x5d)) {
          value = h.string();
          while (value !== null && h.eat(0x2c)) if (h.string() === null) return false;
          if (!h.eat(0x5d)) return false;
        }
      } else {
        value = h.string();
      }
      if (value !== null) into.set(name, value);
      else if (!firsts) return false;
      if (h.eat(0x2c)) continue;
      return h.eat(0x7d);
    }
  }

  function field(j: JSONReader, k: string): string {
    const v = j.getString(k);
    return v === null ? "" : v;
  }

  /** Reads an action's input as its route's request; Code.INVALID_ARGUMENT when it is not one (the action was invoked directly). */
  export function request(input: Uint8Array): Result<RouteRequest> {
    const bad = new MoatError(Code.INVALID_ARGUMENT, "the input is not an HTTP request of a route (moat.yaml routes:)");
    const j = new JSONReader(input);
    const kind = j.getString("moat");
    if (kind === null || kind != "http.request") return failure<RouteRequest>(bad);
    const r = new RouteRequest();
    r.route = field(j, "route");
    r.auth = field(j, "auth");
    r.method = field(j, "method");
    r.path = field(j, "path");
    r.remote = field(j, "remote");
    if (!stringMap(j.raw("params"), false, r.params) || !stringMap(j.raw("headers"), false, r.headers) || !stringMap(j.raw("query"), true, r.query)) {
      return failure<RouteRequest>(bad);
    }
    const enc = j.getString("body_base64");
    if (enc !== null && enc.length > 0) {
      const b = b64decode(Uint8Array.wrap(String.UTF8.encode(enc)));
      if (b === null) return failure<RouteRequest>(bad);
      r.body = b;
    } else {
      r.body = Uint8Array.wrap(String.UTF8.encode(field(j, "body")));
    }
    return success<RouteRequest>(r);
  }

  /**
   * The output that answers an action's route: status (0: 200),
   * contentType ("": text/plain), headers (only those abi/route.go allows:
   * Location, Cache-Control, ETag, ...; never Set-Cookie), and the body
   * (sent as text when it is UTF-8, else as base64).
   */
  export function response(status: i32, contentType: string, headers: Map<string, string> | null, body: Uint8Array): Output {
    const b = new Buf();
    b.str('{"moat":"http.response"');
    if (status != 0) memberJSON(b, "status", status.toString());
    if (contentType.length > 0) memberString(b, "content_type", contentType);
    if (headers !== null && headers.size > 0) {
      b.str(',"headers":{');
      const names = headers.keys();
      for (let i = 0; i < names.length; i++) {
        if (i > 0) b.byte(0x2c);
        b.json(names[i]);
        b.byte(0x3a);
        b.json(headers.get(names[i]));
      }
      b.byte(0x7d);
    }
    if (body.length > 0) {
      if (validUTF8(body)) {
        memberString(b, "body", utf8(body));
      } else {
        b.str(',"body_base64":"');
        b64encode(b, body);
        b.byte(0x22);
      }
    }
    b.byte(0x7d);
    return Output.bytes(b.bytes());
  }

  /** Whether b is UTF-8 without NULs. */
  function validUTF8(b: Uint8Array): bool {
    for (let i = 0; i < b.length; ) {
      const c = <i32>b[i];
      let k = 0;
      if (c == 0) k = 0;
      else if (c < 0x80) k = 1;
      else if ((c & 0xe0) == 0xc0 && c >= 0xc2) k = 2;
      else if ((c & 0xf0) == 0xe0) k = 3;
      else if ((c & 0xf8) == 0xf0 && c <= 0xf4) k = 4;
      if (k == 0 || i + k > b.length) return false;
      for (let n = 1; n < k; n++) if ((<i32>b[i + n] & 0xc0) != 0x80) return false;
      i += k;
    }
    return true;
  }
}

/**
 * The organization's media: images, audio, video and PDF documents that
 * the host fetches, checks and keeps, and that clients receive only from
 * moat (GET /v1/media/{id} or a signed URL), never from where they came
 * from (capabilities: {media: true}; fetch needs an http grant covering
 * the URL as well). The host decides what an item is from its bytes:
 * bytes of no allowed type, or of another type than the one given, fail
 * with Code.INVALID_ARGUMENT. JPEG and PNG images are kept without their
 * metadata (EXIF, GPS); an item's id is the hex SHA-256 of the bytes
 * kept. Limits are those of abi/media.go in the moat repository.
 */
export namespace media {
  /** The whole image within width x height, aspect kept (the default). */
  export const CONTAIN = "contain";
  /** Width x height filled, aspect kept, the overflow cut from the centre. */
  export const COVER = "cover";
  /** Exactly width x height, stretched. */
  export const FILL = "fill";

  /** A stored item. */
  export class Info {
    /** 64 lowercase hexadecimal digits. */
    id: string = "";
    /** "image/png", "application/pdf"... */
    type: string = "";
    size: i64 = 0;
    /** 0 for what is not an image. */
    width: i32 = 0;
    height: i32 = 0;
  }

  /** An item and its bytes. */
  export class Item {
    constructor(public info: Info, public data: Uint8Array) {}
  }

  function readInfo(op: string, body: Uint8Array): Result<Info> {
    const j = new JSONReader(body);
    const id = j.getString("id");
    const type = j.getString("type");
    const size = j.getInt("size");
    if (id === null || id.length == 0 || type === null || !size.ok) return failure<Info>(new MoatError(Code.INTERNAL, "op " + op + ": the reply lacks the item's id, type or size"));
    const info = new Info();
    info.id = id;
    info.type = type;
    info.size = size.value;
    const w = j.getInt("width");
    if (w.ok) info.width = <i32>w.value;
    const h = j.getInt("height");
    if (h.ok) info.height = <i32>h.value;
    return success<Info>(info);
  }

  function infoCall(op: string, req: Buf): Result<Info> {
    const r = roundTrip(op, req);
    if (!r.ok) return failure<Info>(r.error!);
    return readInfo(op, r.value);
  }

  function idRequest(id: string): Buf {
    const req = newRequest();
    req.str('{"id":');
    req.json(id);
    return req;
  }

  /** Has the host download url (under the module's http grants) and keep it; get reads its bytes. */
  export function fetch(url: string): Result<Info> {
    const req = newRequest();
    req.str('{"url":');
    req.json(url);
    req.byte(0x7d);
    return infoCall("media.fetch", req);
  }

  /** Keeps data (at most 2 MiB); type, when not "", must be what the bytes are. */
  export function put(data: Uint8Array, type: string = ""): Result<Info> {
    const req = newRequest();
    req.str('{"data":"');
    b64encode(req, data);
    req.byte(0x22);
    if (type.length > 0) memberString(req, "type", type);
    req.byte(0x7d);
    return infoCall("media.put", req);
  }

  /** An item of the caller's organization and its bytes; Code.TOO_LARGE past 2 MiB, Code.NOT_FOUND for no item. */
  export function get(id: string): Result<Item> {
    const req = idRequest(id);
    req.byte(0x7d);
    const r = roundTrip("media.get", req);
    if (!r.ok) return failure<Item>(r.error!);
    const info = readInfo("media.get", r.value);
    if (!info.ok) return failure<Item>(info.error!);
    const j = new JSONReader(r.value);
    const enc = new Buf();
    const data = j.find("data") && j.stringBytes(enc) ? b64decode(enc.bytes()) : null;
    if (data === null) return failure<Item>(new MoatError(Code.INTERNAL, "op media.get: the reply's data is missing or not base64"));
    return success<Item>(new Item(info.value, data));
  }

  /** Describes an item of the caller's organization. */
  export function info(id: string): Result<Info> {
    const req = idRequest(id);
    req.byte(0x7d);
    return infoCall("media.info", req);
  }

  /** Makes (and keeps) a thumbnail of the image item id, at most width x height (each 1 to 2048), fitted by fit. */
  export function thumbnail(id: string, width: i32, height: i32, fit: string = CONTAIN): Result<Info> {
    const req = idRequest(id);
    memberJSON(req, "width", width.toString());
    memberJSON(req, "height", height.toString());
    if (fit.length > 0) memberString(req, "fit", fit);
    req.byte(0x7d);
    return infoCall("media.thumbnail", req);
  }
}

/**
 * Model calls through the providers the operator configured
 * (OpenAI-compatible APIs), by the operator's aliases, each granted by
 * name (capabilities: {ai: [small-chat]}). Token budgets per organization
 * and per module per day are checked before each call: one over a budget
 * fails with Code.DENIED, naming it. Every call is audited as a model
 * call, with the id the reply carries. Limits are those of abi/ai.go in
 * the moat repository.
 *
 *   const opts = new moat.ai.Options();
 *   opts.maxTokens = 200;
 *   const c = moat.ai.complete("small-chat", [moat.ai.system("Answer in one sentence."), moat.ai.user(question)], opts);
 *   if (!c.ok) return moat.Output.fail(c.error!);
 *   return moat.Output.text(c.value.text);
 */
export namespace ai {
  export const SYSTEM = "system";
  export const USER = "user";
  export const ASSISTANT = "assistant";

  /** One turn of a conversation. */
  export class Message {
    constructor(public role: string, public content: string) {}
  }
  /** The message that sets the conversation's rules. */
  export function system(content: string): Message {
    return new Message(SYSTEM, content);
  }
  /** A message of the user's. */
  export function user(content: string): Message {
    return new Message(USER, content);
  }
  /** A message of the model's, for a conversation's history. */
  export function assistant(content: string): Message {
    return new Message(ASSISTANT, content);
  }

  /** A completion's options; the defaults leave everything to the provider. */
  export class Options {
    /** 1 to 32768 (0: the provider's default). */
    maxTokens: i32 = 0;
    /** 0 to 2 (NaN, the default: the provider's). */
    temperature: f64 = NaN;
    /** A JSON Schema object: the reply is JSON matching it. */
    jsonSchema: Value | null = null;
  }

  /** What a call cost, in the provider's tokens. */
  export class Usage {
    inputTokens: i64 = 0;
    outputTokens: i64 = 0;
  }

  /** A model's reply. */
  export class Completion {
    /** JSON when the call set a schema. */
    text: string = "";
    usage: Usage = new Usage();
    /** The model call's id in the audit trail. */
    modelCallId: string = "";
  }

  /** One vector per input, in order. */
  export class Embedding {
    vectors: Array<Array<f32>> = [];
    usage: Usage = new Usage();
    modelCallId: string = "";
  }

  function readUsage(j: JSONReader, u: Usage): string | null {
    const raw = j.raw("usage");
    if (raw !== null) {
      const uj = new JSONReader(raw);
      const i = uj.getInt("input_tokens");
      if (i.ok) u.inputTokens = i.value;
      const o = uj.getInt("output_tokens");
      if (o.ok) u.outputTokens = o.value;
    }
    const id = j.getString("model_call_id");
    return id !== null && id.length > 0 ? id : null;
  }

  /** Asks model (an operator's alias) to continue messages. */
  export function complete(model: string, messages: Message[], opts: Options = new Options()): Result<Completion> {
    const schema = opts.jsonSchema;
    if (schema !== null && (!schema.ok || !schema.json.trimStart().startsWith("{")))
      return failure<Completion>(new MoatError(Code.INVALID_ARGUMENT, "op ai.complete: jsonSchema is not a JSON object"));
    if (!isNaN(opts.temperature) && !isFinite(opts.temperature))
      return failure<Completion>(new MoatError(Code.INVALID_ARGUMENT, "op ai.complete: the temperature is not finite; use 0 to 2, or NaN for the provider's default"));
    const req = newRequest();
    req.str('{"model":');
    req.json(model);
    req.str(',"messages":[');
    for (let i = 0; i < messages.length; i++) {
      if (i > 0) req.byte(0x2c);
      req.str('{"role":');
      req.json(messages[i].role);
      memberString(req, "content", messages[i].content);
      req.byte(0x7d);
    }
    req.byte(0x5d);
    if (opts.maxTokens != 0) memberJSON(req, "max_tokens", opts.maxTokens.toString());
    if (!isNaN(opts.temperature)) memberJSON(req, "temperature", Value.num(opts.temperature).json);
    if (schema !== null) memberJSON(req, "json_schema", schema.json);
    req.byte(0x7d);
    const r = roundTrip("ai.complete", req);
    if (!r.ok) return failure<Completion>(r.error!);
    const j = new JSONReader(r.value);
    const c = new Completion();
    const text = j.getString("text");
    if (text === null) return failure<Completion>(new MoatError(Code.INTERNAL, "op ai.complete: the reply has no text"));
    c.text = text;
    const id = readUsage(j, c.usage);
    if (id === null) return failure<Completion>(new MoatError(Code.INTERNAL, "op ai.complete: the reply has no model_call_id"));
    c.modelCallId = id;
    return success<Completion>(c);
  }

  /** Asks model (an operator's alias) for one vector per input. */
  export function embed(model: string, input: string[]): Result<Embedding> {
    const req = newRequest();
    req.str('{"model":');
    req.json(model);
    memberStrings(req, "input", input);
    req.byte(0x7d);
    const r = roundTrip("ai.embed", req);
    if (!r.ok) return failure<Embedding>(r.error!);
    const j = new JSONReader(r.value);
    const els = j.elements("vectors");
    if (els === null) return failure<Embedding>(new MoatError(Code.INTERNAL, "op ai.embed: the reply has no vectors array"));
    const e = new Embedding();
    for (let i = 0; i < els.length; i++) {
      const vj = new JSONReader(els[i]);
      const vec = new Array<f32>();
      let ok = vj.eat(0x5b);
      if (ok && !vj.eat(0x5d)) {
        while (true) {
          vj.ws();
          const start = vj.i;
          if (!vj.number()) {
            ok = false;
            break;
          }
          vec.push(<f32>parseFloat(String.UTF8.decodeUnsafe(vj.b.dataStart + start, vj.i - start)));
          if (vj.eat(0x2c)) continue;
          ok = vj.eat(0x5d);
          break;
        }
      }
      if (!ok) return failure<Embedding>(new MoatError(Code.INTERNAL, "op ai.embed: a vector holds something other than numbers"));
      e.vectors.push(vec);
    }
    if (e.vectors.length != input.length)
      return failure<Embedding>(new MoatError(Code.INTERNAL, "op ai.embed: " + input.length.toString() + " inputs but the reply has " + e.vectors.length.toString() + " vectors"));
    const id = readUsage(j, e.usage);
    if (id === null) return failure<Embedding>(new MoatError(Code.INTERNAL, "op ai.embed: the reply has no model_call_id"));
    e.modelCallId = id;
    return success<Embedding>(e);
  }
}

// ---- actions and the exports --------------------------------------------------

const names = new Array<string>();
const handlers = new Array<Handler>();
let actionList: ArrayBuffer | null = null;
// The input buffer moat_alloc hands out, and the last output: both live in
// globals so the garbage collector keeps them while the host holds their
// addresses (it never moves objects).
let inputBuf = new ArrayBuffer(0);
let lastOutput = new Uint8Array(0);

/**
 * Registers fn as the action called name. Call it at the top level of the
 * entry file: the host reads the action list once, after instantiation,
 * and addresses actions by their index in registration order.
 */
export function action(name: string, fn: Handler): void {
  assert(name.length > 0 && name.indexOf("\n") < 0, "moat.action: the name is empty or contains a newline");
  assert(names.indexOf(name) < 0, "moat.action: action " + name + " is registered twice");
  assert(actionList === null, "moat.action: action " + name + " registered after the host read the action list");
  names.push(name);
  handlers.push(fn);
}

/** Export: the ABI version. */
export function moat_abi_version(): i32 {
  return ABI_VERSION;
}

/** Export: the action list, "name\nname\n", as Pack(ptr, len). */
export function moat_actions(): u64 {
  if (actionList === null) actionList = String.UTF8.encode(names.length ? names.join("\n") + "\n" : "");
  const l = actionList!;
  return (<u64>changetype<usize>(l) << 32) | <u64>l.byteLength;
}

/** Export: a buffer of size bytes for the host to write the input to. */
export function moat_alloc(size: u32): usize {
  // An ArrayBuffer holds at most 1 GiB: a larger size aborts (a trap).
  if (<u32>inputBuf.byteLength < size) inputBuf = new ArrayBuffer(<i32>size);
  return changetype<usize>(inputBuf);
}

function encodeError(e: MoatError): Uint8Array {
  const b = new Buf();
  b.str('{"code":');
  b.json(e.code);
  b.str(',"message":');
  b.json(e.message);
  b.byte(0x7d);
  return b.bytes();
}

/** Export: runs action number action on the input at [ptr, +len). */
export function moat_invoke(action: u32, ptr: usize, len: u32): u64 {
  const base = changetype<usize>(inputBuf);
  let out: Output;
  if (action >= <u32>handlers.length) {
    out = Output.error("no_such_action", "no action at index " + action.toString() + "; the module has " + handlers.length.toString() + " actions");
  } else if (len > 0 && (ptr < base || <u64>(ptr - base) + <u64>len > <u64>inputBuf.byteLength)) {
    out = Output.error(Code.INVALID_ARGUMENT, "moat_invoke: the input is not inside the buffer returned by moat_alloc");
  } else {
    const input = len > 0 ? Uint8Array.wrap(inputBuf, <i32>(ptr - base), <i32>len) : new Uint8Array(0);
    out = handlers[action](input);
  }
  let failed: u64 = 0;
  const err = out.error;
  if (err !== null) {
    lastOutput = encodeError(err);
    failed = 1 << 31;
  } else {
    lastOutput = out.bytes;
  }
  if (inputBuf.byteLength > MAX_RETAINED) inputBuf = new ArrayBuffer(0);
  if (respBuf.length > MAX_RETAINED) respBuf = new Uint8Array(INITIAL_RESP);
  return (<u64>lastOutput.dataStart << 32) | <u64>lastOutput.length | failed;
}

// ---- abort --------------------------------------------------------------------

@external("wasi_snapshot_preview1", "fd_write")
declare function fdWrite(fd: i32, iovs: usize, iovsLen: i32, written: usize): i32;

/**
 * The abort of a plugin (selected with --use abort=.../moat/abort): writes
 * the message to stderr, which the host attaches to the trap it reports,
 * and traps. It needs no WASI shim.
 */
export function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  let text = "abort: " + (message !== null ? message : "(no message)");
  if (fileName !== null) text += " at " + fileName + ":" + line.toString() + ":" + column.toString();
  const b = String.UTF8.encode(text + "\n");
  const iov = memory.data(16);
  store<usize>(iov, changetype<usize>(b));
  store<usize>(iov, <usize>b.byteLength, sizeof<usize>());
  fdWrite(2, iov, 1, iov + 8);
  unreachable();
}
