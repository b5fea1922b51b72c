// moat.js — the moat guest SDK for JavaScript (QuickJS-NG running under moat).
//
//   import * as moat from "./moat.js";
//   const n = Number(moat.kv.get("count") ?? "0") + 1;
//   moat.kv.put("count", String(n));
//   moat.log.info("counted", { n });
//
// Ops travel over the device-file transport: the host mounts a character
// device at /dev/moat/ops ($MOAT_OPS) when it runs the script with the op
// table enabled; each op is one JSON line written to it and one JSON line
// read back. A failed op throws a MoatError whose code is the host's
// (denied, not_found, invalid_argument, too_large, unavailable...).
import * as std from "qjs:std";

export class MoatError extends Error {
  constructor(code, message) {
    super(message ? `${code}: ${message}` : code);
    this.name = "MoatError";
    this.code = code;
  }
}

let dev = null;

function device() {
  if (dev) return dev;
  const path = std.getenv("MOAT_OPS");
  if (!path) {
    throw new MoatError("unavailable", "the op table is not enabled for this run ($MOAT_OPS is unset)");
  }
  const err = {};
  dev = std.open(path, "r+", err);
  if (!dev) {
    throw new MoatError("unavailable", `cannot open ${path}: ${std.strerror(err.errno)}`);
  }
  return dev;
}

// call runs one op by name and returns its decoded response.
export function call(op, req) {
  const f = device();
  f.puts(JSON.stringify({ op, req: req ?? {} }) + "\n");
  f.flush();
  const line = f.getline();
  if (line === null) {
    throw new MoatError("internal", `no reply from the host for op ${op}`);
  }
  const reply = JSON.parse(line);
  if (reply.error) {
    throw new MoatError(reply.error.code, reply.error.message);
  }
  return reply.resp ?? {};
}

// UTF-8 and base64: kv values are bytes, base64 in JSON.
const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

function utf8Encode(s) {
  const out = [];
  for (const ch of s) {
    let c = ch.codePointAt(0);
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return new Uint8Array(out);
}

function utf8Decode(b) {
  let s = "";
  for (let i = 0; i < b.length; ) {
    const c = b[i++];
    let cp;
    if (c < 0x80) cp = c;
    else if (c < 0xe0) cp = ((c & 31) << 6) | (b[i++] & 63);
    else if (c < 0xf0) cp = ((c & 15) << 12) | ((b[i++] & 63) << 6) | (b[i++] & 63);
    else cp = ((c & 7) << 18) | ((b[i++] & 63) << 12) | ((b[i++] & 63) << 6) | (b[i++] & 63);
    s += String.fromCodePoint(cp);
  }
  return s;
}

function b64Encode(b) {
  let s = "";
  for (let i = 0; i < b.length; i += 3) {
    const n = (b[i] << 16) | ((b[i + 1] ?? 0) << 8) | (b[i + 2] ?? 0);
    s += B64[n >> 18] + B64[(n >> 12) & 63];
    s += i + 1 < b.length ? B64[(n >> 6) & 63] : "=";
    s += i + 2 < b.length ? B64[n & 63] : "=";
  }
  return s;
}

function b64Decode(s) {
  const clean = s.replace(/=+$/, "");
  const out = new Uint8Array(Math.floor((clean.length * 3) / 4));
  let n = 0, bits = 0, j = 0;
  for (const ch of clean) {
    n = (n << 6) | B64.indexOf(ch);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[j++] = (n >> bits) & 255;
    }
  }
  return out;
}

function toBytes(v) {
  if (typeof v === "string") return utf8Encode(v);
  if (v instanceof Uint8Array) return v;
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  throw new MoatError("invalid_argument", "a kv value is a string, Uint8Array or ArrayBuffer");
}

// kv is the module's key-value store, scoped by the host to the caller's
// organization and this module. get returns a string (UTF-8) or null.
export const kv = {
  get(key) {
    const b = kv.getBytes(key);
    return b === null ? null : utf8Decode(b);
  },
  getBytes(key) {
    const r = call("kv.get", { key });
    return r.found ? b64Decode(r.value ?? "") : null;
  },
  put(key, value) {
    call("kv.put", { key, value: b64Encode(toBytes(value)) });
  },
  delete(key) {
    return call("kv.delete", { key }).deleted;
  },
  // list returns {keys, more}; pass the last key as after to continue.
  list({ prefix = "", after = "", limit = 0 } = {}) {
    return call("kv.list", { prefix, after, limit });
  },
};

function logAt(level) {
  return (message, fields) => {
    call("log.write", { level, message: String(message), fields: fields ?? undefined });
  };
}

// log writes to the host's structured log, tagged with the module, the
// caller and the correlation id.
export const log = {
  debug: logAt("debug"),
  info: logAt("info"),
  warn: logAt("warn"),
  error: logAt("error"),
};

// config returns one value of the module's configuration, or undefined.
export function config(key) {
  const r = call("config.get", { key });
  return r.found ? r.value : undefined;
}
