// hello-js is a minimal moat plugin in JavaScript. Its one action, greet,
// takes a name (default "world"), logs it, counts its calls in the
// key-value store and returns the greeting. The script runs once per
// instance; the instance serves many calls (moat.action registers the
// handler).
import * as moat from "./moat.js";

moat.action("greet", (input) => {
  const name = input.trim() || "world";
  const greeting = moat.config("greeting") ?? "Hello";
  moat.log.info("greeting", { name });
  const count = Number(moat.kv.get("count") ?? "0") + 1;
  moat.kv.put("count", String(count));
  return `${greeting}, ${name}! (call #${count})`;
});
