// The JavaScript SDK's fixture of the db, knowledge and task ops, with the
// same commands as the C, Rust and AssemblyScript fixtures, driven by
// examples/polyglot's TestSDKData. The action is $MOAT_ACTION, the input
// stdin; the output is JSON on stdout. A failed op's MoatError ends the
// script with its message ("code: reason") as the last line of stderr.
import * as std from "qjs:std";
import * as moat from "./moat.js";

// words splits s into at most n words at spaces, the last taking the rest.
function words(s, n) {
  const out = [];
  let rest = s;
  while (out.length < n - 1) {
    const i = rest.indexOf(" ");
    if (i < 0) break;
    out.push(rest.slice(0, i));
    rest = rest.slice(i + 1);
  }
  out.push(rest);
  return out;
}

const utf8Length = (s) => [...s].reduce((n, ch) => {
  const c = ch.codePointAt(0);
  return n + (c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4);
}, 0);

// db: "insert MODEL N TAGS TITLE", "get MODEL ID", "query MODEL TAG",
// "update MODEL ID VERSION TITLE", "stale MODEL ID", "hostile MODEL",
// "delete MODEL ID VERSION".
function db(input) {
  const a = words(input, 5);
  switch (`${a[0]}/${a.length}`) {
    case "insert/5":
      return moat.db.insert(a[1], { title: a[4], n: Number(a[2]), tags: a[3].split(","), done: false, body: "b" });
    case "get/3": {
      const d = moat.db.get(a[1], a[2]);
      if (d === null) return { found: false };
      return { found: true, id: d.id, version: d.version, owner: d.owner, created: d.created, updated: d.updated, title: d.doc.title, doc: d.doc };
    }
    case "query/3": {
      const where = [moat.where("tags", "contains", a[2]), moat.where("done", "=", false), moat.where("n", "in", [1, 2, 3, 5, 8])];
      const titles = [];
      let pages = 0;
      let after = "";
      do {
        const page = moat.db.query(a[1], { where, order: ["-n"], limit: 2, after });
        pages++;
        titles.push(...page.docs.map((d) => d.doc.title));
        after = page.next;
      } while (after);
      return { titles, pages, count: moat.db.count(a[1], where) };
    }
    case "update/5":
      return { version: moat.db.update(a[1], a[2], { set: { title: a[4], done: true }, unset: ["body"], version: Number(a[3]) }) };
    case "stale/3": {
      // Read, write back with the version read, then write again with that
      // (now stale) version: the conflict reaches this code as e.code.
      const d = moat.db.get(a[1], a[2]);
      if (d === null) throw new moat.MoatError("not_found", `no document ${a[2]}`);
      const change = { set: { n: d.doc.n + 1 }, version: d.version };
      const v1 = moat.db.update(a[1], a[2], change);
      try {
        moat.db.update(a[1], a[2], change);
      } catch (e) {
        if (e instanceof moat.MoatError && e.code === "conflict") return { code: e.code, version: v1 };
        throw e;
      }
      throw new moat.MoatError("guest_error", `an update at stale version ${d.version} was accepted`);
    }
    case "hostile/2": {
      // Documents the SDK must refuse before anything is sent: a number
      // with no JSON form, and a string (JSON text that would add members
      // to the request around it) where an object belongs.
      const code = (f) => {
        try {
          f();
          return "accepted";
        } catch (e) {
          return e.code ?? `not a MoatError: ${e}`;
        }
      };
      return {
        nan: code(() => moat.db.insert(a[1], { n: NaN })),
        smuggled: code(() => moat.db.insert(a[1], '{"title":"x"}, "model": "secrets"')),
      };
    }
    case "delete/4":
      return { deleted: moat.db.delete(a[1], a[2], Number(a[3])) };
  }
  throw new moat.MoatError("invalid_argument", `unknown db command ${input}`);
}

// knowledge: "add COLL ID LANG TEXT", "search COLL LANG QUERY" (LANG - for
// no filter), "delete COLL ID".
function knowledge(input) {
  const a = words(input, input.startsWith("search ") ? 4 : 5);
  switch (`${a[0]}/${a.length}`) {
    case "add/5":
      return { replaced: moat.knowledge.add(a[1], a[2], a[4], { lang: a[3], len: utf8Length(a[4]) }) };
    case "search/4": {
      const opts = { limit: 5 };
      if (a[2] !== "-") opts.filter = { lang: a[2] };
      const hits = moat.knowledge.search(a[1], a[3], opts);
      return { hits: hits.map((h) => ({ id: h.id, lang: h.meta.lang ?? "", snippet: h.snippet, scored: h.score > 0 })) };
    }
    case "delete/3":
      return { deleted: moat.knowledge.delete(a[1], a[2]) };
  }
  throw new moat.MoatError("invalid_argument", `unknown knowledge command ${input}`);
}

// task: "enqueue ACTION KEY DELAY INPUT" (KEY, DELAY - for none; two
// attempts), "status ID", "cancel ID".
function task(input) {
  const a = words(input, 5);
  switch (`${a[0]}/${a.length}`) {
    case "enqueue/4":
    case "enqueue/5": {
      const opts = { maxAttempts: 2 };
      if (a[2] !== "-") opts.key = a[2];
      if (a[3] !== "-") opts.delay = a[3];
      return moat.tasks.enqueue(a[1], a[4] ?? "", opts);
    }
    case "status/2": {
      const st = moat.tasks.status(a[1]);
      return { state: st.state, attempts: st.attempts, max_attempts: st.maxAttempts, result: st.resultText, error: st.error, code: st.code, run_at: st.runAt };
    }
    case "cancel/2":
      return moat.tasks.cancel(a[1]);
  }
  throw new moat.MoatError("invalid_argument", `unknown task command ${input}`);
}

const actions = { db, knowledge, task };
const action = std.getenv("MOAT_ACTION");
const input = std.in.readAsString() ?? "";
try {
  if (action === "echo") {
    std.out.puts(input);
  } else if (actions[action]) {
    std.out.puts(JSON.stringify(actions[action](input)));
  } else {
    throw new moat.MoatError("no_such_action", `no action ${action}`);
  }
} catch (e) {
  std.err.puts(`${e.message}\n`);
  std.exit(1);
}
