// A session's code context (package server/sessions): one resident
// QuickJS instance whose global scope persists between runs. Each run is
// an indirect (global) eval: var and function declarations and
// assignments to undeclared names stay for the next run; let and const
// are the run's own. console.log/info/debug go to stdout,
// console.error/warn to stderr, and the completion value of the code (its
// final expression) is the result. A run whose caller streams it
// ("stream": true) writes its lines to the real stdout and stderr as they
// are logged instead of returning them.
import * as moat from "./moat.js";
import * as std from "qjs:std";

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
  // Streamed (the caller asked for it): each line goes to the real
  // stdout or stderr as it is logged, where the host hands it on, and is
  // not kept; past the run's output limit the write fails and this log
  // and every later one of the run throw.
  let cut = false;
  const emit = (f, s) => {
    if (cut) throw new Error("moat: this run's output passed its limit; nothing more is printed");
    f.puts(s);
    f.flush();
    if (f.error()) {
      cut = true;
      f.clearerr();
      throw new Error("moat: this run's output passed its limit; nothing more is printed");
    }
  };
  const toOut = req.stream ? (a) => emit(std.out, line(a)) : (a) => { out += line(a); };
  const toErr = req.stream ? (a) => emit(std.err, line(a)) : (a) => { err += line(a); };
  globalThis.console = {
    log: (...a) => toOut(a),
    info: (...a) => toOut(a),
    debug: (...a) => toOut(a),
    error: (...a) => toErr(a),
    warn: (...a) => toErr(a),
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

// Be captured for a fork or a pause (fork.go): between runs. The token
// goes on stdout, then a clock read, where the host copies this instance
// and lets the call go on; a copy is entered by moat._resumeCopy (through
// qjs's eval_buf), on top of these frames, which never run again there.
// A file the code holds open (std.open, os.open) is not in the copy: its
// descriptor is this instance's, so the copy's reads and writes of it
// fail.
moat.action("park", (tok) => {
  std.out.puts(tok + "\n");
  std.out.flush();
  Date.now();
  return "parked";
});
