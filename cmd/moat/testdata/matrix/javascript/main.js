// The acceptance matrix's JavaScript plugin (see ../README.md).
import * as std from "qjs:std";
import * as moat from "./moat.js";

function attempt(lines, family, fn) {
  try {
    lines.push(`${family} ok ${fn()}`.trimEnd());
  } catch (e) {
    lines.push(`${family} err ${e.message}`);
  }
}

moat.action("all", (input) => {
  const lines = [];
  attempt(lines, "log", () => {
    moat.log.info("matrix", { input });
    return "";
  });
  attempt(lines, "config", () => moat.config("greeting") ?? "-");
  attempt(lines, "kv", () => {
    const old = moat.kv.get("matrix");
    moat.kv.put("matrix", input);
    return old ?? "-";
  });
  attempt(lines, "db", () => {
    const n = moat.db.count("notes");
    moat.db.insert("notes", { title: input });
    return n;
  });
  attempt(lines, "knowledge", () => {
    const hits = moat.knowledge.search("docs", "matrix");
    moat.knowledge.add("docs", input, `matrix ${input}`);
    return hits.length;
  });
  attempt(lines, "tasks", () => {
    const t = moat.tasks.enqueue("noop", input, { delay: "1h" });
    return moat.tasks.status(t.id).state;
  });
  attempt(lines, "http", () => {
    const r = moat.http.fetch(moat.config("url"), { timeoutMs: 5000 });
    return `${r.status} ${r.text()}`;
  });
  attempt(lines, "media", () => {
    const item = moat.media.put(moat.config("pdf"), "application/pdf");
    const info = moat.media.info(item.id);
    return `${info.type} ${info.size}`;
  });
  attempt(lines, "ai", () => moat.ai.complete("small-chat", "say matrix").text);
  attempt(lines, "files", () => {
    const f = std.open(moat.config("file"), "r");
    if (!f) throw new Error(`io: cannot open ${moat.config("file")}`);
    const s = f.readAsString();
    f.close();
    return s.trim();
  });
  return lines.join("\n") + "\n";
});

moat.action("noop", (input) => input);
