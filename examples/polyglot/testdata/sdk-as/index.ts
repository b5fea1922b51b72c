// The AssemblyScript SDK's conformance fixture: one action per part of the
// SDK, driven by examples/polyglot's TestSDK with the same table as the C
// and Rust fixtures.
import * as moat from "../../../../guests/assemblyscript/moat";
export { moat_abi_version, moat_actions, moat_alloc, moat_invoke } from "../../../../guests/assemblyscript/moat";

// split returns [first word, rest].
function split(s: string): string[] {
  const i = s.indexOf(" ");
  return i < 0 ? [s, ""] : [s.substring(0, i), s.substring(i + 1)];
}

// kv: "put KEY VALUE", "get KEY", "del KEY", "list PREFIX".
function kv(input: Uint8Array): moat.Output {
  const a = split(moat.text(input));
  const b = split(a[1]);
  const cmd = a[0], key = b[0], value = b[1];
  if (cmd == "put") {
    const err = moat.kv.putString(key, value);
    return err !== null ? moat.Output.fail(err) : moat.Output.text("ok");
  }
  if (cmd == "get") {
    const r = moat.kv.get(key);
    if (!r.ok) return moat.Output.fail(r.error!);
    const v = r.value;
    return v !== null ? moat.Output.bytes(v) : moat.Output.text("<not found>");
  }
  if (cmd == "del") {
    const r = moat.kv.remove(key);
    if (!r.ok) return moat.Output.fail(r.error!);
    return moat.Output.text(r.value ? "deleted" : "<not found>");
  }
  if (cmd == "list") {
    const r = moat.kv.list(a[1]);
    if (!r.ok) return moat.Output.fail(r.error!);
    return moat.Output.text(r.value.join("\n"));
  }
  return moat.Output.error(moat.Code.INVALID_ARGUMENT, "unknown kv command " + cmd);
}

// log: "LEVEL message" logs with the field k=v.
function log(input: Uint8Array): moat.Output {
  const a = split(moat.text(input));
  const err = moat.log.write(a[0], a[1], ["k", "v"]);
  return err !== null ? moat.Output.fail(err) : moat.Output.text("ok");
}

// config: the value of the key in the input, or not_found.
function config(input: Uint8Array): moat.Output {
  const key = moat.text(input);
  const r = moat.config.get(key);
  if (!r.ok) return moat.Output.fail(r.error!);
  const v = r.value;
  return v !== null ? moat.Output.text(v) : moat.Output.error(moat.Code.NOT_FOUND, "no config key " + key);
}

// call: "OP JSON" runs any op and returns its raw reply.
function call(input: Uint8Array): moat.Output {
  const a = split(moat.text(input));
  const r = moat.call(a[0], a[1]);
  return r.ok ? moat.Output.text(r.value) : moat.Output.fail(r.error!);
}

// fail: "CODE message" fails with that code.
function fail(input: Uint8Array): moat.Output {
  const a = split(moat.text(input));
  return moat.Output.error(a[0], a[1]);
}

function echo(input: Uint8Array): moat.Output {
  return moat.Output.bytes(input.slice(0));
}

// trap: a failed assertion aborts the instance through the SDK's abort.
function trap(input: Uint8Array): moat.Output {
  assert(false, moat.text(input));
  return moat.Output.text("unreachable");
}

// ---- db, knowledge, task: the same commands in every fixture -------------

// words splits s into at most n words at spaces, the last taking the rest.
function words(s: string, n: i32): string[] {
  const out = new Array<string>();
  let rest = s;
  while (out.length < n - 1) {
    const i = rest.indexOf(" ");
    if (i < 0) break;
    out.push(rest.substring(0, i));
    rest = rest.substring(i + 1);
  }
  out.push(rest);
  return out;
}

function title(d: moat.db.Doc): string {
  const t = d.reader().getString("title");
  return t !== null ? t : "";
}

function stringsJSON(a: string[]): string {
  return moat.Value.strs(a).json;
}

// db: "insert MODEL N TAGS TITLE", "get MODEL ID", "query MODEL TAG",
// "update MODEL ID VERSION TITLE", "stale MODEL ID", "hostile MODEL",
// "delete MODEL ID VERSION".
function db(input: Uint8Array): moat.Output {
  const a = words(moat.text(input), 5);
  const cmd = a[0];
  if (cmd == "insert" && a.length == 5) {
    const doc = new moat.Obj().str("title", a[4]).int("n", I64.parseInt(a[2])).strs("tags", a[3].split(",")).bool("done", false).str("body", "b");
    const r = moat.db.insert(a[1], doc);
    if (!r.ok) return moat.Output.fail(r.error!);
    return moat.Output.text(new moat.Obj().str("id", r.value.id).int("version", r.value.version).json());
  }
  if (cmd == "get" && a.length == 3) {
    const r = moat.db.get(a[1], a[2]);
    if (!r.ok) return moat.Output.fail(r.error!);
    const d = r.value;
    if (d === null) return moat.Output.text(new moat.Obj().bool("found", false).json());
    const raw = moat.Value.raw(d.json);
    if (raw === null) return moat.Output.error(moat.Code.INTERNAL, "the document is not JSON");
    const o = new moat.Obj().bool("found", true).str("id", d.id).int("version", d.version).str("owner", d.owner);
    return moat.Output.text(o.str("created", d.created).str("updated", d.updated).str("title", title(d)).set("doc", raw).json());
  }
  if (cmd == "query" && a.length == 3) {
    const q = new moat.db.Query();
    q.where = [
      moat.db.cond("tags", moat.db.CONTAINS, moat.Value.str(a[2])),
      moat.db.cond("done", moat.db.EQ, moat.Value.bool(false)),
      moat.db.cond("n", moat.db.IN, moat.Value.ints([1, 2, 3, 5, 8])),
    ];
    q.order = ["-n"];
    q.limit = 2;
    const titles = new Array<string>();
    let pages = 0;
    do {
      const r = moat.db.query(a[1], q);
      if (!r.ok) return moat.Output.fail(r.error!);
      pages++;
      for (let i = 0; i < r.value.docs.length; i++) titles.push(title(r.value.docs[i]));
      q.after = r.value.next;
    } while (q.after.length > 0);
    const n = moat.db.count(a[1], q.where);
    if (!n.ok) return moat.Output.fail(n.error!);
    return moat.Output.text(new moat.Obj().set("titles", moat.Value.strs(titles)).int("pages", pages).int("count", n.value).json());
  }
  if (cmd == "update" && a.length == 5) {
    const c = new moat.db.Change();
    c.set = new moat.Obj().str("title", a[4]).bool("done", true);
    c.unset = ["body"];
    c.version = I64.parseInt(a[3]);
    const r = moat.db.update(a[1], a[2], c);
    if (!r.ok) return moat.Output.fail(r.error!);
    return moat.Output.text(new moat.Obj().int("version", r.value).json());
  }
  if (cmd == "stale" && a.length == 3) {
    // Read, write back with the version read, then write again with that
    // (now stale) version: the conflict reaches this code as its code.
    const g = moat.db.get(a[1], a[2]);
    if (!g.ok) return moat.Output.fail(g.error!);
    const d = g.value;
    if (d === null) return moat.Output.error(moat.Code.NOT_FOUND, "no document " + a[2]);
    const n = d.reader().getInt("n");
    if (!n.ok) return moat.Output.fail(n.error!);
    const c = new moat.db.Change();
    c.set = new moat.Obj().int("n", n.value + 1);
    c.version = d.version;
    const v1 = moat.db.update(a[1], a[2], c);
    if (!v1.ok) return moat.Output.fail(v1.error!);
    const stale = moat.db.update(a[1], a[2], c);
    if (stale.ok) return moat.Output.error(moat.Code.GUEST_ERROR, "an update at stale version " + d.version.toString() + " was accepted");
    const e = stale.error!;
    if (!e.is(moat.Code.CONFLICT)) return moat.Output.fail(e);
    return moat.Output.text(new moat.Obj().str("code", e.code).int("version", v1.value).json());
  }
  if (cmd == "hostile" && a.length == 2) {
    // JSON the SDK must refuse before anything is sent: a number with no
    // JSON form, and text that would add members to the request around
    // the document (Value.raw is null for it: it never becomes a value).
    const nan = moat.db.insert(a[1], new moat.Obj().num("n", NaN));
    const raw = moat.Value.raw('{"title":"x"}, "model": "secrets"');
    const o = new moat.Obj().str("nan", nan.ok ? "accepted" : nan.error!.code);
    return moat.Output.text(o.str("smuggled", raw === null ? moat.Code.INVALID_ARGUMENT : "accepted").json());
  }
  if (cmd == "delete" && a.length == 4) {
    const r = moat.db.remove(a[1], a[2], I64.parseInt(a[3]));
    if (!r.ok) return moat.Output.fail(r.error!);
    return moat.Output.text(new moat.Obj().bool("deleted", r.value).json());
  }
  return moat.Output.error(moat.Code.INVALID_ARGUMENT, "unknown db command " + cmd);
}

// knowledge: "add COLL ID LANG TEXT", "search COLL LANG QUERY" (LANG - for
// no filter), "delete COLL ID".
function knowledge(input: Uint8Array): moat.Output {
  const text = moat.text(input);
  const a = words(text, text.startsWith("search ") ? 4 : 5);
  const cmd = a[0];
  if (cmd == "add" && a.length == 5) {
    const meta = new moat.Obj().str("lang", a[3]).int("len", String.UTF8.byteLength(a[4]));
    const r = moat.knowledge.add(a[1], a[2], a[4], meta);
    if (!r.ok) return moat.Output.fail(r.error!);
    return moat.Output.text(new moat.Obj().bool("replaced", r.value).json());
  }
  if (cmd == "search" && a.length == 4) {
    const opts = new moat.knowledge.SearchOptions();
    opts.limit = 5;
    if (a[2] != "-") opts.filter = new moat.Obj().str("lang", a[2]);
    const r = moat.knowledge.search(a[1], a[3], opts);
    if (!r.ok) return moat.Output.fail(r.error!);
    const hits = new Array<moat.Value>();
    for (let i = 0; i < r.value.length; i++) {
      const h = r.value[i];
      const lang = h.reader().getString("lang");
      hits.push(moat.Value.object(new moat.Obj().str("id", h.id).str("lang", lang !== null ? lang : "").str("snippet", h.snippet).bool("scored", h.score > 0)));
    }
    return moat.Output.text(new moat.Obj().set("hits", moat.Value.array(hits)).json());
  }
  if (cmd == "delete" && a.length >= 3) {
    const r = moat.knowledge.remove(a[1], a[2]);
    if (!r.ok) return moat.Output.fail(r.error!);
    return moat.Output.text(new moat.Obj().bool("deleted", r.value).json());
  }
  return moat.Output.error(moat.Code.INVALID_ARGUMENT, "unknown knowledge command " + cmd);
}

// task: "enqueue ACTION KEY DELAY INPUT" (KEY, DELAY - for none; two
// attempts), "status ID", "cancel ID".
function task(input: Uint8Array): moat.Output {
  const a = words(moat.text(input), 5);
  const cmd = a[0];
  if (cmd == "enqueue" && a.length >= 4) {
    const opts = new moat.tasks.Options();
    if (a[2] != "-") opts.key = a[2];
    if (a[3] != "-") opts.delay = a[3];
    opts.maxAttempts = 2;
    const r = moat.tasks.enqueue(a[1], Uint8Array.wrap(String.UTF8.encode(a.length == 5 ? a[4] : "")), opts);
    if (!r.ok) return moat.Output.fail(r.error!);
    return moat.Output.text(new moat.Obj().str("id", r.value.id).bool("existing", r.value.existing).json());
  }
  if (cmd == "status" && a.length == 2) {
    const r = moat.tasks.status(a[1]);
    if (!r.ok) return moat.Output.fail(r.error!);
    const st = r.value;
    const o = new moat.Obj().str("state", st.state).int("attempts", st.attempts).int("max_attempts", st.maxAttempts).str("result", moat.text(st.result));
    return moat.Output.text(o.str("error", st.error).str("code", st.code).str("run_at", st.runAt).json());
  }
  if (cmd == "cancel" && a.length == 2) {
    const r = moat.tasks.cancel(a[1]);
    if (!r.ok) return moat.Output.fail(r.error!);
    return moat.Output.text(new moat.Obj().bool("cancelled", r.value.cancelled).str("state", r.value.state).json());
  }
  return moat.Output.error(moat.Code.INVALID_ARGUMENT, "unknown task command " + cmd);
}

moat.action("kv", kv);
moat.action("log", log);
moat.action("config", config);
moat.action("call", call);
moat.action("fail", fail);
moat.action("echo", echo);
moat.action("trap", trap);
moat.action("db", db);
moat.action("knowledge", knowledge);
moat.action("task", task);
