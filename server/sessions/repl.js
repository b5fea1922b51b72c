// A session's code context (package server/sessions): one resident
// QuickJS instance whose global scope persists between runs. Each run is
// an indirect (global) eval: var and function declarations and
// assignments to undeclared names stay for the next run; let and const
// are the run's own. console.log/info/debug go to stdout,
// console.error/warn to stderr, and the completion value of the code (its
// final expression) is the result.
import * as moat from "./moat.js";

let count = 0;
const show = (v) => {
  if (typeof v === "string") return v;
  try {
    const j = JSON.stringify(v);
    if (j !== undefined) return j;
  } catch (e) {}
  return String(v);
};
const line = (args) => args.map(show).join(" ") + "\n";

moat.action("run", (s) => {
  count++;
  const req = JSON.parse(s);
  let out = "", err = "", result = null, error = null;
  const saved = globalThis.console;
  globalThis.console = {
    log: (...a) => { out += line(a); },
    info: (...a) => { out += line(a); },
    debug: (...a) => { out += line(a); },
    error: (...a) => { err += line(a); },
    warn: (...a) => { err += line(a); },
  };
  try {
    const v = (0, eval)(req.code || "");
    if (v !== undefined) result = show(v);
  } catch (e) {
    error = {
      name: (e && e.name) || "Error",
      value: (e && e.message !== undefined) ? String(e.message) : String(e),
      traceback: (e && e.stack) ? String(e.stack) : "",
    };
  } finally {
    globalThis.console = saved;
  }
  return JSON.stringify({ stdout: out, stderr: err, result, error, execution_count: count });
});
