// The JavaScript SDK's fixture of the http, media and ai wrappers, with
// the same commands as every language's outside-* fixture, driven by
// examples/polyglot's TestSDKOutside. The action is $MOAT_ACTION, the
// input stdin (bytes: media's is an image); the output is JSON on stdout.
// A failed op's MoatError ends the script with its message ("code:
// reason") as the last line of stderr.
import * as std from "qjs:std";
import * as moat from "./moat.js";

function readAll() {
  const chunks = [];
  let total = 0;
  for (;;) {
    const buf = new ArrayBuffer(65536);
    const n = std.in.read(buf, 0, buf.byteLength);
    if (n <= 0) break;
    chunks.push(new Uint8Array(buf, 0, n));
    total += n;
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

function text(b) {
  let s = "";
  for (const c of b) s += String.fromCharCode(c);
  return decodeURIComponent(escape(s)); // UTF-8 bytes to a string
}

const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

// http: POST the URL in the input with a header and a binary body.
function http(input) {
  const resp = moat.http.fetch(text(input), {
    method: "POST", headers: { "X-Test": "sdk" }, body: new Uint8Array([0, 0xff, 0x68, 0x69]), timeoutMs: 5000, maxBytes: 65536,
  });
  return { status: resp.status, url: resp.url, echo: resp.header("X-Echo") ?? "", body: hex(resp.body) };
}

// media: keep the input (or fetch "fetch URL"), thumbnail it, describe the
// thumbnail, read the item back.
function media(input) {
  const prefix = [..."fetch "].map((c) => c.charCodeAt(0));
  const isFetch = input.length > prefix.length && prefix.every((c, i) => input[i] === c);
  const item = isFetch ? moat.media.fetch(text(input.subarray(prefix.length))) : moat.media.put(input, "image/png");
  const thumb = moat.media.thumbnail(item.id, 16, 16, "cover");
  const info = moat.media.info(thumb.id);
  const got = moat.media.get(item.id);
  return { item, thumb, info, got: { id: got.id, len: got.data.length, head: hex(got.data.subarray(0, 8)) } };
}

// ai: "complete MODEL PROMPT", "json MODEL PROMPT", "embed MODEL TEXT".
function ai(input) {
  const s = text(input);
  const i = s.indexOf(" ");
  const j = s.indexOf(" ", i + 1);
  if (i < 0 || j < 0) throw new moat.MoatError("invalid_argument", "want CMD MODEL TEXT");
  const [cmd, model, prompt] = [s.slice(0, i), s.slice(i + 1, j), s.slice(j + 1)];
  const usage = (r) => ({ input_tokens: r.usage.inputTokens, output_tokens: r.usage.outputTokens, model_call_id: r.modelCallId });
  switch (cmd) {
    case "complete": {
      const c = moat.ai.complete(model, [{ role: "system", content: "Answer briefly." }, { role: "user", content: prompt }], { maxTokens: 64, temperature: 0.25 });
      return { text: c.text, ...usage(c) };
    }
    case "json": {
      const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };
      const c = moat.ai.complete(model, [{ role: "user", content: prompt }], { jsonSchema: schema });
      return { text: c.text, ...usage(c) };
    }
    case "embed": {
      const e = moat.ai.embed(model, [prompt, "moat"]);
      return { vectors: e.vectors, ...usage(e) };
    }
  }
  throw new moat.MoatError("invalid_argument", `unknown ai command ${cmd}`);
}

// caller: who the invocation runs for (moat.caller), whatever the input says.
function caller() {
  const p = moat.caller();
  return { user: p.user, org: p.org, roles: p.roles, correlation_id: p.correlationId, admin: p.hasRole("admin") };
}

const actions = { http, media, ai, caller };
const action = std.getenv("MOAT_ACTION");
try {
  if (!actions[action]) throw new moat.MoatError("no_such_action", `no action ${action}`);
  std.out.puts(JSON.stringify(actions[action](readAll())));
} catch (e) {
  std.err.puts(`${e.message}\n`);
  std.exit(1);
}
