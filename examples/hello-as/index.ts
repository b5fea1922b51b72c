// hello-as is a minimal moat plugin in AssemblyScript, using the guest SDK
// in guests/assemblyscript. Its one action, greet, greets the input (or
// "world"), counts its calls in the key-value store and logs who it
// greeted: the same plugin as examples/hello-go. See README.md to build
// and run it.
import * as moat from "../../guests/assemblyscript/moat";

// AssemblyScript exports only what the entry file exports.
export { moat_abi_version, moat_actions, moat_alloc, moat_invoke } from "../../guests/assemblyscript/moat";

function greet(input: Uint8Array): moat.Output {
  const cfg = moat.config.get("greeting");
  if (!cfg.ok) return moat.Output.fail(cfg.error!);
  const greeting = cfg.value !== null ? cfg.value! : "Hello";
  const name = input.length > 0 ? moat.text(input) : "world";
  moat.log.info("greeting", ["name", name]);

  const stored = moat.kv.getString("count");
  if (!stored.ok) return moat.Output.fail(stored.error!);
  let count: i64 = 0;
  const v = stored.value;
  if (v !== null) {
    if (!isDecimal(v)) return moat.Output.error(moat.Code.GUEST_ERROR, 'kv key count holds "' + v + '", not a number');
    count = I64.parseInt(v);
  }
  count++;
  const err = moat.kv.putString("count", count.toString());
  if (err !== null) return moat.Output.fail(err);
  return moat.Output.text(greeting + ", " + name + "! (call #" + count.toString() + ")");
}

// isDecimal: I64.parseInt accepts "12abc" (it stops at the first non-digit),
// so check the whole string first.
function isDecimal(s: string): bool {
  if (s.length == 0 || s.length > 18) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

moat.action("greet", greet);
