// hello-js is a minimal moat plugin in JavaScript. Its one action, greet,
// reads a name on stdin (default "world"), logs it, counts its calls in the
// key-value store and prints the greeting.
import * as moat from "./moat.js";

const name = (std.in.readAsString() ?? "").trim() || "world";
const greeting = moat.config("greeting") ?? "Hello";
moat.log.info("greeting", { name });

const count = Number(moat.kv.get("count") ?? "0") + 1;
moat.kv.put("count", String(count));
print(`${greeting}, ${name}! (call #${count})`);
