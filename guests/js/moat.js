// moat.js — the moat guest SDK for JavaScript (QuickJS-NG running under moat).
//
//   import * as moat from "./moat.js";
//   const n = Number(moat.kv.get("count") ?? "0") + 1;
//   moat.kv.put("count", String(n));
//   moat.log.info("counted", { n });
//   const { id } = moat.db.insert("notes", { title: "buy milk", done: false });
//   const { docs } = moat.db.query("notes", { where: [moat.where("done", "=", false)], order: ["-due"] });
//   const hits = moat.knowledge.search("docs", "rotate key", { filter: { lang: "en" } });
//   moat.tasks.enqueue("digest", id, { key: id });
//
// Ops travel over the device-file transport: the host mounts a character
// device at /dev/moat/ops ($MOAT_OPS) when it runs the script with the op
// table enabled; each op is one JSON line written to it and one JSON line
// read back. A failed op throws a MoatError whose code is the host's
// (denied, not_found, invalid_argument, too_large, conflict,
// unavailable...): catch (e) { if (e.code === "conflict") ... }.
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

// UTF-8 and base64: kv values and task inputs are bytes, base64 in JSON.
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

function toBytes(v, what = "a kv value") {
  if (typeof v === "string") return utf8Encode(v);
  if (v instanceof Uint8Array) return v;
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  throw new MoatError("invalid_argument", `${what} is a string, Uint8Array or ArrayBuffer`);
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

// encodable checks that v has a JSON form before it joins a request:
// JSON.stringify would write NaN and the infinities as null (which the
// host would refuse, or store, far from the mistake) and throws a
// TypeError on a cycle or a BigInt. Either is a MoatError naming the op.
function encodable(op, what, v) {
  try {
    JSON.stringify(v, (k, x) => {
      if (typeof x === "number" && !Number.isFinite(x)) {
        throw new MoatError("invalid_argument", `op ${op}: ${what}${k ? ` (${k})` : ""} holds ${x}, which has no JSON form`);
      }
      return x;
    });
  } catch (e) {
    if (e instanceof MoatError) throw e;
    throw new MoatError("invalid_argument", `op ${op}: ${what} cannot be encoded as JSON: ${e.message}`);
  }
}

function plainObject(op, what, v) {
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new MoatError("invalid_argument", `op ${op}: ${what} must be an object, not ${v === null ? "null" : Array.isArray(v) ? "an array" : typeof v}`);
  }
  encodable(op, what, v);
}

function docOf(r) {
  return { id: r.id, version: r.version, owner: r.owner ?? "", created: r.created ?? "", updated: r.updated ?? "", doc: r.doc ?? {} };
}

// where builds a condition of a query: where("done", "=", false). op is
// one of = != < <= > >= in prefix contains.
export function where(field, op, value) {
  return [field, op, value];
}

// db is the module's documents: JSON objects in the models its moat.yaml
// declares (models:), each granted by name (capabilities: {db: [notes]}).
// The host checks every document against its model and scopes every op
// to the caller's organization (and, in a model with scope: user, to the
// caller): another organization's or user's document is not found. A
// document read back is {id, version, owner, created, updated, doc}.
export const db = {
  // insert stores doc (an object) as a new document of model: {id, version}.
  insert(model, doc) {
    plainObject("db.insert", "the document", doc);
    const r = call("db.insert", { model, doc });
    return { id: r.id, version: r.version };
  },
  // get returns the document id of model, or null when the caller's scope
  // holds none.
  get(model, id) {
    const r = call("db.get", { model, id });
    return r.found ? docOf(r) : null;
  },
  // query returns one page, {docs, next}, of the documents of model for
  // which every condition of where holds, in order ("-field" for
  // descending); next is "" on the last page, else pass it as after.
  query(model, { where = [], order = [], limit = 0, after = "" } = {}) {
    encodable("db.query", "where", where);
    const req = { model };
    if (where.length) req.where = where;
    if (order.length) req.order = order;
    if (limit) req.limit = limit;
    if (after) req.after = after;
    const r = call("db.query", req);
    return { docs: (r.docs ?? []).map(docOf), next: r.next ?? "" };
  },
  // update changes the document id of model (set's fields replace theirs,
  // unset's are removed) and returns its new version. With version the
  // document must still be at it, or the update throws code conflict.
  update(model, id, { set, unset, version } = {}) {
    const req = { model, id };
    if (set !== undefined) {
      plainObject("db.update", "set", set);
      req.set = set;
    }
    if (unset && unset.length) req.unset = unset;
    if (version) req.version = version;
    return call("db.update", req).version;
  },
  // delete removes the document id of model and reports whether it was
  // there; with version, the document must still be at it (else conflict).
  delete(model, id, version = 0) {
    const req = { model, id };
    if (version) req.version = version;
    return !!call("db.delete", req).deleted;
  },
  // count counts the documents of model for which every condition holds.
  count(model, where = []) {
    encodable("db.count", "where", where);
    const req = { model };
    if (where.length) req.where = where;
    return call("db.count", req).count;
  },
};

// knowledge is the module's ranked full-text search: documents of text
// with metadata in named collections (capabilities: {knowledge: [docs]}).
// A query is plain text, never syntax; meta and filter are flat objects of
// strings, numbers and booleans.
export const knowledge = {
  // add stores text under id in collection, replacing the document of that
  // id there, and reports whether it replaced one.
  add(collection, id, text, meta) {
    const req = { collection, id, text: String(text) };
    if (meta !== undefined) {
      plainObject("knowledge.add", "meta", meta);
      req.meta = meta;
    }
    return !!call("knowledge.add", req).replaced;
  },
  // delete removes the document id from collection and reports whether it
  // existed.
  delete(collection, id) {
    return !!call("knowledge.delete", { collection, id }).deleted;
  },
  // search returns the documents of collection holding every word of
  // query, best first: [{id, score, snippet, meta}], at most limit (0: 10)
  // whose meta holds every member of filter.
  search(collection, query, { limit = 0, filter } = {}) {
    const req = { collection, query: String(query) };
    if (limit) req.limit = limit;
    if (filter !== undefined) {
      plainObject("knowledge.search", "filter", filter);
      req.filter = filter;
    }
    return (call("knowledge.search", req).hits ?? []).map((h) => ({ id: h.id, score: h.score, snippet: h.snippet ?? "", meta: h.meta ?? {} }));
  },
};

// tasks queues background runs of this module's own actions
// (capabilities: {tasks: true}). A task runs later, on whichever host
// claims it, as the principal whose invocation enqueued it, retried with
// backoff; it runs at least once, so make the action safe to repeat.
export const tasks = {
  // enqueue queues a run of action with input (a string, Uint8Array or
  // ArrayBuffer) and returns {id, existing}. delay is a duration in Go's
  // syntax ("90s", "2h30m") or a number of seconds; at a Date or an RFC
  // 3339 string (at most one, at most 30 days ahead); maxAttempts 1 to 25
  // (default 3); key makes the enqueue idempotent: while a task of this
  // module and organization holds it, enqueue returns that task, existing.
  enqueue(action, input, { delay, at, maxAttempts, key } = {}) {
    const req = { action };
    if (input !== undefined && input !== null) {
      const b = toBytes(input, "a task's input");
      if (b.length) req.input = b64Encode(b);
    }
    if (delay !== undefined) req.delay = typeof delay === "number" ? `${delay}s` : String(delay);
    if (at !== undefined) req.at = at instanceof Date ? at.toISOString() : String(at);
    if (maxAttempts) req.max_attempts = maxAttempts;
    if (key) req.key = key;
    const r = call("task.enqueue", req);
    return { id: r.id, existing: !!r.existing };
  },
  // status returns a task's state: {state (queued, running, done, failed,
  // cancelled), attempts, maxAttempts, result (the action's output:
  // Uint8Array) and resultText (as UTF-8), error, code, runAt}. An id of no
  // task of this module and organization throws code not_found.
  status(id) {
    const r = call("task.status", { id });
    const result = r.result ? b64Decode(r.result) : new Uint8Array(0);
    return {
      state: r.state,
      attempts: r.attempts ?? 0,
      maxAttempts: r.max_attempts ?? 0,
      result,
      resultText: utf8Decode(result),
      error: r.error ?? "",
      code: r.code ?? "",
      runAt: r.run_at ?? "",
    };
  },
  // cancel cancels a queued or running task: {cancelled, state}, state
  // being the task's state after the call either way.
  cancel(id) {
    const r = call("task.cancel", { id });
    return { cancelled: !!r.cancelled, state: r.state };
  },
};
