// moat.js — the moat guest SDK for JavaScript (QuickJS-NG running under moat).
//
//   import * as moat from "./moat.js";
//   const { user, org, roles, correlationId } = moat.caller();
//   const n = Number(moat.kv.get("count") ?? "0") + 1;
//   moat.kv.put("count", String(n));
//   moat.log.info("counted", { n });
//   const { id } = moat.db.insert("notes", { title: "buy milk", done: false });
//   const { docs } = moat.db.query("notes", { where: [moat.where("done", "=", false)], order: ["-due"] });
//   const hits = moat.knowledge.search("docs", "rotate key", { filter: { lang: "en" } });
//   moat.tasks.enqueue("digest", id, { key: id });
//   const resp = moat.http.fetch("https://api.example.com/v1/items", { timeoutMs: 5000 });
//   const img = moat.media.fetch("https://images.example.com/cat.jpg");
//   const { text } = moat.ai.complete("small-chat", [{ role: "user", content: "Hello" }], { maxTokens: 100 });
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

// Principal is who an invocation runs for, as caller returns it: user and
// org (as the host authenticated them), roles (never null) and
// correlationId (what the host's log records and audit events carry).
export class Principal {
  constructor(r) {
    if (typeof r.user !== "string" || r.user === "" || typeof r.org !== "string" || r.org === "") {
      throw new MoatError("internal", "op moat.caller: the reply names no user or organization");
    }
    this.user = r.user;
    this.org = r.org;
    this.roles = Array.isArray(r.roles) ? r.roles.map(String) : [];
    this.correlationId = r.correlation_id ?? "";
  }
  // hasRole reports whether the principal holds role.
  hasRole(role) {
    return this.roles.includes(role);
  }
}

// caller returns who the invocation runs for (the op moat.caller). It
// needs no grant, and is asked anew on every call: a resident instance
// serves many callers. The principal is the host's, never anything in the
// input: key per-user data by caller().user, not by a user id the caller
// sends, which anyone can write.
export function caller() {
  return new Principal(call("moat.caller", {}));
}

const configCache = new Map();

// config returns one value of the module's configuration, or undefined.
// The configuration is fixed for as long as the module is loaded, so a
// value is asked of the host once per instance and kept.
export function config(key) {
  if (!configCache.has(key)) {
    const r = call("config.get", { key });
    configCache.set(key, r.found ? r.value : undefined);
  }
  return configCache.get(key);
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

// HTTPResponse is what http.fetch returns: status, headers (lower-case
// names; a header sent more than once is its values joined by ", "),
// body (a Uint8Array) and url (where the body came from, after
// redirects). A status of 4xx or 5xx is a response, not an error.
export class HTTPResponse {
  constructor(r) {
    this.status = r.status;
    this.headers = r.headers ?? {};
    this.body = r.body ? b64Decode(r.body) : new Uint8Array(0);
    this.url = r.url ?? "";
  }
  // header returns the value of header name (any case), or null.
  header(name) {
    return this.headers[String(name).toLowerCase()] ?? null;
  }
  // text returns the body decoded as UTF-8.
  text() {
    return utf8Decode(this.body);
  }
  // json parses the body as JSON.
  json() {
    return JSON.parse(this.text());
  }
}

function timeout(op, ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new MoatError("invalid_argument", `op ${op}: timeoutMs is a number of milliseconds (0 to 60000), not ${ms}`);
  }
  return Math.ceil(ms);
}

// http sends HTTP requests through the host (the op http.fetch). The host,
// not the script, makes the connection: the URL must be covered by one of
// the module's http grants (capabilities: {http:
// ["https://api.example.com:443"]}), on every redirect too, and the
// address it reaches is checked after DNS, so loopback, private and
// metadata addresses are reached only where a grant names them. Headers a
// grant injects (a secret as a bearer token) are added by the host and
// never shown to the script. A URL no grant covers throws code denied, a
// body over its limit too_large, a server out of reach or too slow
// unavailable.
export const http = {
  // fetch sends a request: method (default GET), headers (an object of
  // strings), body (a string, Uint8Array or ArrayBuffer; at most 2 MiB),
  // timeoutMs (the whole request: 0 is 10 s, at most 60000) and maxBytes
  // (the response body: 0 is 1 MiB, at most 2 MiB). It returns an
  // HTTPResponse.
  fetch(url, { method, headers, body, timeoutMs, maxBytes } = {}) {
    const req = { url: String(url) };
    if (method) req.method = String(method);
    if (headers !== undefined && headers !== null) {
      plainObject("http.fetch", "headers", headers);
      for (const [k, v] of Object.entries(headers)) {
        if (typeof v !== "string") throw new MoatError("invalid_argument", `op http.fetch: header ${k} is a ${typeof v}, not a string`);
      }
      req.headers = headers;
    }
    if (body !== undefined && body !== null) {
      const b = toBytes(body, "a request body");
      if (b.length) req.body = b64Encode(b);
    }
    if (timeoutMs !== undefined && timeoutMs !== null) {
      const ms = timeout("http.fetch", timeoutMs);
      if (ms) req.timeout_ms = ms;
    }
    if (maxBytes) req.max_bytes = maxBytes;
    return new HTTPResponse(call("http.fetch", req));
  },
  // get fetches url with GET and the host's default limits.
  get(url) {
    return http.fetch(url);
  },
  // request reads the input of an action bound to an HTTP route
  // (moat.yaml routes:; abi/route.go): a RouteRequest. It throws
  // invalid_argument when the input is not one (the action was invoked
  // directly).
  request(input) {
    let r;
    try {
      r = JSON.parse(typeof input === "string" ? input : utf8Decode(toBytes(input, "the input")));
    } catch {
      r = null;
    }
    if (!r || r.moat !== "http.request") {
      throw new MoatError("invalid_argument", "the input is not an HTTP request of a route (moat.yaml routes:)");
    }
    return new RouteRequest(r);
  },
  // response is what an action returns to answer its route: status
  // (default 200), contentType (default text/plain), headers (only those
  // abi/route.go allows: Location, Cache-Control, ETag, ...; never
  // Set-Cookie), and one of body (a string or Uint8Array), json (any
  // value, sent as application/json) or media (a media item's id).
  response({ status, contentType, headers, body, json, media } = {}) {
    const r = { moat: "http.response" };
    if (status !== undefined) r.status = status;
    if (headers !== undefined && headers !== null) {
      plainObject("http.response", "headers", headers);
      r.headers = headers;
    }
    if (json !== undefined) {
      r.content_type = contentType ?? "application/json";
      r.body = JSON.stringify(json);
    } else if (body !== undefined && body !== null) {
      if (typeof body === "string") r.body = body;
      else r.body_base64 = b64Encode(toBytes(body, "a response body"));
    }
    if (contentType !== undefined && r.content_type === undefined) r.content_type = contentType;
    if (media !== undefined) r.media = String(media);
    return JSON.stringify(r);
  },
};

// RouteRequest is the HTTP request of a route, as http.request reads it:
// route, auth (key, public or webhook), method, path, params, query (each
// name's values in a list), headers (lower-case names; never
// Authorization or Cookie), remote (a public or webhook caller's address)
// and body (a Uint8Array).
export class RouteRequest {
  constructor(r) {
    this.route = r.route;
    this.auth = r.auth;
    this.method = r.method;
    this.path = r.path;
    this.params = r.params ?? {};
    this.query = r.query ?? {};
    this.headers = r.headers ?? {};
    this.remote = r.remote ?? "";
    this.body = r.body_base64 ? b64Decode(r.body_base64) : utf8Encode(r.body ?? "");
  }
  // header returns the value of header name (any case), or null.
  header(name) {
    return this.headers[String(name).toLowerCase()] ?? null;
  }
  // param returns the path parameter name, or null.
  param(name) {
    return this.params[name] ?? null;
  }
  // queryValue returns the first value of the query parameter name, or null.
  queryValue(name) {
    return this.query[name]?.[0] ?? null;
  }
  // text returns the body decoded as UTF-8.
  text() {
    return utf8Decode(this.body);
  }
  // json parses the body as JSON.
  json() {
    return JSON.parse(this.text());
  }
}

function mediaInfo(r) {
  return { id: r.id, type: r.type, size: r.size ?? 0, width: r.width ?? 0, height: r.height ?? 0 };
}

// media is the organization's media: images, audio, video and PDF
// documents that the host fetches, checks and keeps, and that clients
// receive only from moat (GET /v1/media/{id} or a signed URL), never from
// where they came from (capabilities: {media: true}; fetch needs an http
// grant covering the URL as well). An item is {id, type, size, width,
// height}; width and height are 0 for what is not an image. The host
// decides what an item is from its bytes: bytes of no allowed type, or of
// another type than the one given, throw code invalid_argument. JPEG and
// PNG images are kept without their metadata (EXIF, GPS).
export const media = {
  // fetch has the host download url (under the module's http grants) and
  // keep it; get reads its bytes.
  fetch(url) {
    return mediaInfo(call("media.fetch", { url: String(url) }));
  },
  // put keeps data (a Uint8Array or ArrayBuffer; at most 2 MiB); type,
  // when given, must be what the bytes are ("image/png").
  put(data, type) {
    const req = { data: b64Encode(toBytes(data, "media data")) };
    if (type) req.type = String(type);
    return mediaInfo(call("media.put", req));
  },
  // get returns an item of the caller's organization with its bytes:
  // {id, type, size, width, height, data (a Uint8Array)}. An item over
  // 2 MiB throws too_large (clients read it from /v1/media/{id}); an id of
  // no item of the organization not_found.
  get(id) {
    const r = call("media.get", { id: String(id) });
    return { ...mediaInfo(r), data: r.data ? b64Decode(r.data) : new Uint8Array(0) };
  },
  // info describes an item of the caller's organization.
  info(id) {
    return mediaInfo(call("media.info", { id: String(id) }));
  },
  // thumbnail makes (and keeps) a thumbnail of the image item id, at most
  // width x height (each 1 to 2048), fitted by fit: "contain" (the
  // default: the whole image, aspect kept), "cover" (the box filled, the
  // overflow cut) or "fill" (stretched).
  thumbnail(id, width, height, fit) {
    const req = { id: String(id), width, height };
    if (fit) req.fit = String(fit);
    return mediaInfo(call("media.thumbnail", req));
  },
};

function usageOf(r) {
  const u = r.usage ?? {};
  return { inputTokens: u.input_tokens ?? 0, outputTokens: u.output_tokens ?? 0 };
}

// Completion is what ai.complete returns: text, usage {inputTokens,
// outputTokens} and modelCallId (the model call's id in the audit trail).
export class Completion {
  constructor(r) {
    this.text = r.text ?? "";
    this.usage = usageOf(r);
    this.modelCallId = r.model_call_id ?? "";
  }
  // json parses the text: the reply of a call with a jsonSchema.
  json() {
    return JSON.parse(this.text);
  }
}

function messagesOf(messages) {
  if (typeof messages === "string") return [{ role: "user", content: messages }];
  if (!Array.isArray(messages)) {
    throw new MoatError("invalid_argument", "op ai.complete: messages is an array of {role, content}, or a string (one user message)");
  }
  return messages.map((m, i) => {
    if (m === null || typeof m !== "object" || typeof m.role !== "string" || typeof m.content !== "string") {
      throw new MoatError("invalid_argument", `op ai.complete: message ${i} is not {role, content} of strings`);
    }
    return { role: m.role, content: m.content };
  });
}

// ai calls models through the providers the operator configured
// (OpenAI-compatible APIs), by the operator's aliases, each granted by
// name (capabilities: {ai: [small-chat]}). Token budgets per organization
// and per module per day are checked before each call: one over a budget
// throws code denied, naming it. Every call is audited as a model call.
export const ai = {
  // complete asks model to continue messages ([{role: "system" | "user" |
  // "assistant", content}], or a string: one user message) and returns a
  // Completion. maxTokens is 1 to 32768 (default: the provider's);
  // temperature 0 to 2; jsonSchema a JSON Schema object the reply must
  // match (read it with .json()).
  complete(model, messages, { maxTokens, temperature, jsonSchema } = {}) {
    const req = { model: String(model), messages: messagesOf(messages) };
    if (maxTokens) req.max_tokens = maxTokens;
    if (temperature !== undefined && temperature !== null) {
      if (typeof temperature !== "number" || !Number.isFinite(temperature)) {
        throw new MoatError("invalid_argument", `op ai.complete: the temperature is ${temperature}; use a number from 0 to 2`);
      }
      req.temperature = temperature;
    }
    if (jsonSchema !== undefined && jsonSchema !== null) {
      plainObject("ai.complete", "jsonSchema", jsonSchema);
      req.json_schema = jsonSchema;
    }
    return new Completion(call("ai.complete", req));
  },
  // embed asks model for one vector per input (an array of strings, or a
  // string): {vectors, usage, modelCallId}.
  embed(model, input) {
    const inputs = typeof input === "string" ? [input] : input;
    if (!Array.isArray(inputs) || inputs.some((s) => typeof s !== "string")) {
      throw new MoatError("invalid_argument", "op ai.embed: input is an array of strings, or a string");
    }
    const r = call("ai.embed", { model: String(model), input: inputs });
    const vectors = r.vectors ?? [];
    if (vectors.length !== inputs.length) {
      throw new MoatError("internal", `op ai.embed: ${inputs.length} inputs but the host returned ${vectors.length} vectors`);
    }
    return { vectors, usage: usageOf(r), modelCallId: r.model_call_id ?? "" };
  },
};

// --- handlers ------------------------------------------------------------
//
//   moat.action("greet", (name, call) => `Hello, ${name}!`);
//
// A script that registers its actions with moat.action is resident: moat
// runs its top-level code once, when an instance starts, and the instance
// then serves many calls, each calling the handler of its action (the
// globals a call changes stay for the next call on the same instance;
// isolation: fresh in the profile gives each call a new one). A handler
// gets the input as a string (UTF-8) and a call object ({action,
// correlationId, bytes: the input as a Uint8Array}); it returns a string,
// a Uint8Array, null or undefined (empty), or a value sent as JSON. It runs
// synchronously: a Promise is refused. A MoatError it throws fails the call
// with its code (throw new MoatError("invalid_argument", "...") is a 400);
// anything else is a guest_error. Ops work only inside a handler:
// top-level code runs for no caller.

const handlers = new Map();
let served = false;

// action registers fn as the handler of the action name.
export function action(name, fn) {
  if (typeof name !== "string" || name === "") {
    throw new TypeError("moat.action: the action name must be a non-empty string");
  }
  if (typeof fn !== "function") {
    throw new TypeError(`moat.action(${JSON.stringify(name)}): the handler must be a function`);
  }
  if (handlers.has(name)) {
    throw new TypeError(`moat.action: action ${JSON.stringify(name)} is registered twice`);
  }
  handlers.set(name, fn);
}

function outputBytes(v) {
  if (v === undefined || v === null) return new Uint8Array(0);
  if (typeof v === "string") return utf8Encode(v);
  if (v instanceof Uint8Array) return v;
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  return utf8Encode(JSON.stringify(v));
}

// failure is the {code, message} a thrown value fails its call with; the
// stack goes to stderr, the host's log.
export function failure(e) {
  const isMoat = e !== null && typeof e === "object" && e.name === "MoatError" && typeof e.code === "string" && e.code !== "";
  let message;
  if (isMoat) {
    message = String(e.message ?? "");
    if (message.startsWith(e.code + ": ")) message = message.slice(e.code.length + 2);
    else if (message === e.code) message = "";
  } else if (e !== null && typeof e === "object" && "message" in e) {
    message = (e.name ? e.name + ": " : "") + String(e.message);
    const frame = String(e.stack ?? "").split("\n").map((l) => l.trim()).find((l) => l.startsWith("at "));
    if (frame) message += " (" + frame + ")";
  } else {
    message = "uncaught " + String(e);
  }
  const stack = e !== null && typeof e === "object" && e.stack ? String(e.stack) : "";
  std.err.puts(stack + (stack === "" || stack.endsWith("\n") ? "" : "\n") + String(e) + "\n"); // the message last, as Python ends a traceback: the line a log or an error shows
  std.err.flush();
  return { code: isMoat ? e.code : "guest_error", message };
}

function runHandler(name, text, bytes, correlationId) {
  const fn = handlers.get(name);
  if (!fn) {
    return { error: { code: "no_such_action", message: `no action ${JSON.stringify(name)} is registered (moat.action); registered: ${[...handlers.keys()].join(", ")}` } };
  }
  try {
    const call = {
      action: name,
      correlationId,
      get bytes() { return bytes ?? (bytes = utf8Encode(text)); },
    };
    const v = fn(text ?? utf8Decode(bytes), call);
    if (v instanceof Promise) {
      return { error: { code: "guest_error", message: `the handler of ${name} returned a Promise: handlers run synchronously (make it a plain function)` } };
    }
    if (typeof v === "string") return { text: v };
    if (v !== undefined && v !== null && !(v instanceof Uint8Array) && !(v instanceof ArrayBuffer)) return { text: JSON.stringify(v) };
    return { output: outputBytes(v) };
  } catch (e) {
    return { error: failure(e) };
  } finally {
    std.out.flush();
  }
}

function readAll(f) {
  const chunks = [];
  let total = 0;
  for (;;) {
    const buf = new ArrayBuffer(65536);
    const n = f.read(buf, 0, buf.byteLength);
    if (n <= 0) break;
    chunks.push(new Uint8Array(buf, 0, n));
    total += n;
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

// serve answers the registered actions' calls: for as long as the instance
// lives when it is resident ($MOAT_RESIDENT), else the one action of this
// run ($MOAT_ACTION, the input on stdin, the output on stdout). moat's
// bootstrap calls it after the script's top-level code when the script
// registered actions and did not call it itself.
export function serve() {
  if (served) return;
  served = true;
  if (handlers.size === 0) {
    throw new MoatError("invalid_argument", "moat.serve(): no actions registered; register them with moat.action first");
  }
  if (std.getenv("MOAT_RESIDENT") === "1") {
    let req = { ready: { actions: [...handlers.keys()] } };
    for (;;) {
      const next = call("moat.next", req);
      if (next.stop) return;
      const text = next.input === undefined ? (next.text ?? "") : undefined;
      const r = runHandler(next.action ?? "", text, text === undefined ? b64Decode(next.input) : undefined, next.correlation_id ?? "");
      req = r.error ? { error: r.error } : r.text !== undefined ? { output_text: r.text } : { output: b64Encode(r.output) };
    }
  }
  const r = runHandler(std.getenv("MOAT_ACTION") ?? "", undefined, readAll(std.in), "");
  if (r.error) {
    throw new MoatError(r.error.code, r.error.message);
  }
  const out = r.text !== undefined ? utf8Encode(r.text) : r.output;
  std.out.write(out.buffer, out.byteOffset, out.length);
  std.out.puts("\n"); // the host drops one trailing newline
  std.out.flush();
}

// _resumeCopy serves in an instance started from a copy of a live one (a
// session's fork or pause: languages/javascript/capture.go), entered on
// top of the copy's frames, which never run again. The device the copy
// holds is the original's: kept, never closed (its descriptor number may
// be this instance's own device, and a collected file closes its
// descriptor), and a new one opened.
const staleDevices = [];
export function _resumeCopy() {
  if (dev !== null) staleDevices.push(dev);
  dev = null;
  served = false;
  serve();
}

// registered reports whether the script registered actions (the bootstrap
// asks, after its top-level code).
export function registered() {
  return handlers.size > 0;
}
