// The AssemblyScript SDK's fixture of the http, media and ai wrappers,
// with the same commands as every language's outside-* fixture, driven by
// examples/polyglot's TestSDKOutside. Each action answers what the SDK
// read back as JSON, built with the SDK's own Obj and Value.
import * as moat from "../../../../guests/assemblyscript/moat";
export { moat_abi_version, moat_actions, moat_alloc, moat_invoke } from "../../../../guests/assemblyscript/moat";

const HEX = "0123456789abcdef";

function hex(b: Uint8Array, n: i32): string {
  let s = "";
  for (let i = 0; i < b.length && i < n; i++) s += HEX.charAt(b[i] >> 4) + HEX.charAt(b[i] & 15);
  return s;
}

// http: POST the URL in the input with a header and a binary body; answer
// the status, the final URL, the X-Echo header and the body in hex.
function http(input: Uint8Array): moat.Output {
  const req = new moat.http.Request("POST", moat.text(input));
  req.headers.set("X-Test", "sdk");
  const body = new Uint8Array(4);
  body[0] = 0;
  body[1] = 0xff;
  body[2] = 0x68;
  body[3] = 0x69;
  req.body = body;
  req.timeoutMs = 5000;
  req.maxBytes = 65536;
  const r = moat.http.fetch(req);
  if (!r.ok) return moat.Output.fail(r.error!);
  const echo = r.value.header("X-Echo");
  const out = new moat.Obj().int("status", r.value.status).str("url", r.value.url).str("echo", echo !== null ? echo : "").str("body", hex(r.value.body, 1 << 20));
  return moat.Output.text(out.json());
}

function info(i: moat.media.Info): moat.Value {
  return moat.Value.object(new moat.Obj().str("id", i.id).str("type", i.type).int("size", i.size).int("width", i.width).int("height", i.height));
}

// media: keep the input's bytes as image/png (or, for "fetch URL", have
// the host fetch the URL), thumbnail it, describe the thumbnail, read the
// item back.
function media(input: Uint8Array): moat.Output {
  const text = moat.text(input);
  const item = text.startsWith("fetch ") ? moat.media.fetch(text.substring(6)) : moat.media.put(input, "image/png");
  if (!item.ok) return moat.Output.fail(item.error!);
  const thumb = moat.media.thumbnail(item.value.id, 16, 16, moat.media.COVER);
  if (!thumb.ok) return moat.Output.fail(thumb.error!);
  const described = moat.media.info(thumb.value.id);
  if (!described.ok) return moat.Output.fail(described.error!);
  const got = moat.media.get(item.value.id);
  if (!got.ok) return moat.Output.fail(got.error!);
  const g = new moat.Obj().str("id", got.value.info.id).int("len", got.value.data.length).str("head", hex(got.value.data, 8));
  const out = new moat.Obj().set("item", info(item.value)).set("thumb", info(thumb.value)).set("info", info(described.value)).set("got", moat.Value.object(g));
  return moat.Output.text(out.json());
}

function usage(o: moat.Obj, u: moat.ai.Usage, id: string): moat.Output {
  return moat.Output.text(o.int("input_tokens", u.inputTokens).int("output_tokens", u.outputTokens).str("model_call_id", id).json());
}

// caller: who the invocation runs for (moat.caller), whatever the input says.
function caller(input: Uint8Array): moat.Output {
  const p = moat.caller();
  if (!p.ok) return moat.Output.fail(p.error!);
  const o = new moat.Obj().str("user", p.value.user).str("org", p.value.org).strs("roles", p.value.roles)
    .str("correlation_id", p.value.correlationId).bool("admin", p.value.hasRole("admin"));
  return moat.Output.text(o.json());
}

// ai: "complete MODEL PROMPT", "json MODEL PROMPT", "embed MODEL TEXT".
function ai(input: Uint8Array): moat.Output {
  const s = moat.text(input);
  const i = s.indexOf(" ");
  const j = s.indexOf(" ", i + 1);
  if (i < 0 || j < 0) return moat.Output.error(moat.Code.INVALID_ARGUMENT, "want CMD MODEL TEXT");
  const cmd = s.substring(0, i), model = s.substring(i + 1, j), text = s.substring(j + 1);
  if (cmd == "complete" || cmd == "json") {
    const opts = new moat.ai.Options();
    let msgs: moat.ai.Message[] = [moat.ai.user(text)];
    if (cmd == "complete") {
      msgs = [moat.ai.system("Answer briefly."), moat.ai.user(text)];
      opts.maxTokens = 64;
      opts.temperature = 0.25;
    } else {
      const props = new moat.Obj().set("answer", moat.Value.object(new moat.Obj().str("type", "string")));
      opts.jsonSchema = moat.Value.object(new moat.Obj().str("type", "object").set("properties", moat.Value.object(props)).strs("required", ["answer"]));
    }
    const c = moat.ai.complete(model, msgs, opts);
    if (!c.ok) return moat.Output.fail(c.error!);
    return usage(new moat.Obj().str("text", c.value.text), c.value.usage, c.value.modelCallId);
  }
  if (cmd == "embed") {
    const e = moat.ai.embed(model, [text, "moat"]);
    if (!e.ok) return moat.Output.fail(e.error!);
    const vectors = new Array<moat.Value>();
    for (let k = 0; k < e.value.vectors.length; k++) {
      const nums = new Array<moat.Value>();
      for (let n = 0; n < e.value.vectors[k].length; n++) nums.push(moat.Value.num(e.value.vectors[k][n]));
      vectors.push(moat.Value.array(nums));
    }
    return usage(new moat.Obj().set("vectors", moat.Value.array(vectors)), e.value.usage, e.value.modelCallId);
  }
  return moat.Output.error(moat.Code.INVALID_ARGUMENT, "unknown ai command " + cmd);
}

moat.action("http", http);
moat.action("media", media);
moat.action("ai", ai);
moat.action("caller", caller);
