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

moat.action("kv", kv);
moat.action("log", log);
moat.action("config", config);
moat.action("call", call);
moat.action("fail", fail);
moat.action("echo", echo);
moat.action("trap", trap);
