// Unit tests of moat.js's http, media, ai and caller wrappers against a fake host
// (qjs_std.mjs): the requests they write on the device file, the replies
// they read, and what they refuse before anything is sent. Run by
// guests/js's TestSDKWire under node, as moat.js runs under QuickJS-NG.
import assert from "node:assert/strict";
import * as moat from "./moat.js";

const bytes = (...b) => new Uint8Array(b);
const last = () => JSON.parse(globalThis.sent.at(-1));
const refused = (f, code) => {
  const n = globalThis.sent.length;
  assert.throws(f, (e) => e instanceof moat.MoatError && e.code === code);
  return globalThis.sent.length - n;
};

// http
globalThis.fakeHost = (op, req) => {
  if (req.url === "https://api.example.com/private") return { error: { code: "denied", message: "no http grant covers it" } };
  if (req.url === "https://api.example.com/empty") return { resp: { status: 500, url: req.url } };
  return {
    resp: {
      status: 201,
      headers: { "content-type": "application/octet-stream", body: "Zm9v" },
      body: Buffer.concat([Buffer.from("got:"), Buffer.from(req.body ?? "", "base64")]).toString("base64"),
      url: req.url + "?final",
    },
  };
};
let resp = moat.http.fetch("https://api.example.com/echo", {
  method: "POST", headers: { "X-Test": "sdk" }, body: bytes(0, 0xff, 0x68, 0x69), timeoutMs: 1.5, maxBytes: 4096,
});
assert.deepEqual(last(), {
  op: "http.fetch",
  req: { url: "https://api.example.com/echo", method: "POST", headers: { "X-Test": "sdk" }, body: "AP9oaQ==", timeout_ms: 2, max_bytes: 4096 },
});
assert.equal(resp.status, 201);
assert.deepEqual(resp.body, bytes(0x67, 0x6f, 0x74, 0x3a, 0, 0xff, 0x68, 0x69));
assert.equal(resp.url, "https://api.example.com/echo?final");
assert.equal(resp.header("Content-Type"), "application/octet-stream");
assert.equal(resp.header("X-None"), null);
resp = moat.http.fetch("https://api.example.com/echo", { body: "ü" });
assert.equal(last().req.body, "w7w=", "a string body is sent as UTF-8");
assert.equal(resp.text(), "got:ü");
resp = moat.http.get("https://api.example.com/empty");
assert.deepEqual(last().req, { url: "https://api.example.com/empty" });
assert.equal(resp.status, 500, "a 500 is a response");
assert.equal(resp.body.length, 0);
refused(() => moat.http.get("https://api.example.com/private"), "denied");
assert.equal(refused(() => moat.http.fetch("https://x/", { headers: { n: 1 } }), "invalid_argument"), 0);
assert.equal(refused(() => moat.http.fetch("https://x/", { headers: "X: y" }), "invalid_argument"), 0);
assert.equal(refused(() => moat.http.fetch("https://x/", { timeoutMs: -1 }), "invalid_argument"), 0);
assert.equal(refused(() => moat.http.fetch("https://x/", { timeoutMs: NaN }), "invalid_argument"), 0);
assert.equal(refused(() => moat.http.fetch("https://x/", { body: 42 }), "invalid_argument"), 0);

// http.request and http.response: a route's action
{
  const req = moat.http.request(JSON.stringify({
    moat: "http.request", route: "GET /items/{id}", auth: "public", method: "GET", path: "/items/7",
    params: { id: "7" }, query: { q: ["a", "b"] }, headers: { accept: "text/html" }, body_base64: "AP8=", remote: "192.0.2.1",
  }));
  assert.equal(req.param("id"), "7");
  assert.equal(req.queryValue("q"), "a");
  assert.equal(req.queryValue("none"), null);
  assert.equal(req.header("Accept"), "text/html");
  assert.deepEqual(req.body, bytes(0, 0xff));
  assert.equal(req.remote, "192.0.2.1");
  assert.equal(moat.http.request(bytes(...Buffer.from('{"moat":"http.request","body":"hé"}'))).text(), "hé");
  assert.equal(refused(() => moat.http.request("plain input"), "invalid_argument"), 0);
  assert.equal(refused(() => moat.http.request('{"moat":"http.response"}'), "invalid_argument"), 0);
  assert.deepEqual(JSON.parse(moat.http.response({ status: 201, headers: { Location: "items/7" }, json: { id: "7" } })),
    { moat: "http.response", status: 201, headers: { Location: "items/7" }, content_type: "application/json", body: '{"id":"7"}' });
  assert.deepEqual(JSON.parse(moat.http.response({ contentType: "image/png", body: bytes(0x89, 0xff) })),
    { moat: "http.response", content_type: "image/png", body_base64: "if8=" });
  assert.deepEqual(JSON.parse(moat.http.response({ media: "abc" })), { moat: "http.response", media: "abc" });
  assert.deepEqual(JSON.parse(moat.http.response({ body: "hi" })), { moat: "http.response", body: "hi" });
}

// media
const info = { id: "ab12", type: "image/png", size: 3, width: 64, height: 48 };
globalThis.fakeHost = (op, req) => {
  if (req.id === "gone") return { error: { code: "not_found", message: "no media item gone" } };
  if (op === "media.get") return { resp: { ...info, data: "AQL/" } };
  if (op === "media.thumbnail") return { resp: { id: "cd34", type: "application/pdf", size: 9 } };
  return { resp: info };
};
assert.deepEqual(moat.media.put(bytes(1, 2, 0xff), "image/png"), info);
assert.deepEqual(last(), { op: "media.put", req: { data: "AQL/", type: "image/png" } });
assert.deepEqual(moat.media.put(bytes().buffer), info);
assert.deepEqual(last().req, { data: "" });
assert.deepEqual(moat.media.fetch("https://img.example.com/a.png"), info);
assert.deepEqual(last(), { op: "media.fetch", req: { url: "https://img.example.com/a.png" } });
assert.deepEqual(moat.media.get("ab12"), { ...info, data: bytes(1, 2, 0xff) });
assert.deepEqual(moat.media.info("ab12"), info);
assert.deepEqual(last(), { op: "media.info", req: { id: "ab12" } });
assert.deepEqual(moat.media.thumbnail("ab12", 16, 12, "cover"), { id: "cd34", type: "application/pdf", size: 9, width: 0, height: 0 });
assert.deepEqual(last(), { op: "media.thumbnail", req: { id: "ab12", width: 16, height: 12, fit: "cover" } });
refused(() => moat.media.get("gone"), "not_found");
assert.equal(refused(() => moat.media.put({ not: "bytes" }), "invalid_argument"), 0);

// ai
globalThis.fakeHost = (op, req) => {
  if (req.model === "big-chat") return { error: { code: "denied", message: "the token budget of organization acme for today is spent" } };
  if (op === "ai.embed") {
    return { resp: { vectors: req.input.map((s) => [s.length, 0.5]), usage: { input_tokens: 4 }, model_call_id: "mc-2" } };
  }
  const text = req.json_schema ? '{"answer":"forty-two"}' : "hello";
  return { resp: { text, usage: { input_tokens: 12, output_tokens: 3 }, model_call_id: "mc-1" } };
};
let c = moat.ai.complete("small-chat", [{ role: "system", content: "Be brief." }, { role: "user", content: 'hi "there"' }], { maxTokens: 64, temperature: 0.25 });
assert.deepEqual(last().req, {
  model: "small-chat", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: 'hi "there"' }], max_tokens: 64, temperature: 0.25,
});
assert.equal(c.text, "hello");
assert.deepEqual(c.usage, { inputTokens: 12, outputTokens: 3 });
assert.equal(c.modelCallId, "mc-1");
c = moat.ai.complete("small-chat", "answer?", { temperature: 0, jsonSchema: { type: "object" } });
assert.deepEqual(last().req, { model: "small-chat", messages: [{ role: "user", content: "answer?" }], temperature: 0, json_schema: { type: "object" } },
  "a string is one user message; a zero temperature is sent");
assert.deepEqual(c.json(), { answer: "forty-two" });
refused(() => moat.ai.complete("big-chat", "hi"), "denied");
assert.equal(refused(() => moat.ai.complete("small-chat", "hi", { temperature: NaN }), "invalid_argument"), 0);
assert.equal(refused(() => moat.ai.complete("small-chat", "hi", { jsonSchema: '{"type":"object"}, "model": "big-chat"' }), "invalid_argument"), 0);
assert.equal(refused(() => moat.ai.complete("small-chat", [{ role: "user" }]), "invalid_argument"), 0);
const e = moat.ai.embed("small-embed", ["a", "bcd"]);
assert.deepEqual(last().req, { model: "small-embed", input: ["a", "bcd"] });
assert.deepEqual(e, { vectors: [[1, 0.5], [3, 0.5]], usage: { inputTokens: 4, outputTokens: 0 }, modelCallId: "mc-2" });
assert.deepEqual(moat.ai.embed("small-embed", "one").vectors, [[3, 0.5]]);
assert.equal(refused(() => moat.ai.embed("small-embed", [1]), "invalid_argument"), 0);
globalThis.fakeHost = () => ({ resp: { vectors: [[1]], model_call_id: "m" } });
refused(() => moat.ai.embed("small-embed", ["a", "b"]), "internal");

// caller: asked anew on every call, never cached; a reply without a user
// is an error, never an empty principal to key data by.
let who = { user: "ann", org: "acme", roles: ["admin"], correlation_id: "c-1" };
globalThis.fakeHost = (op, req) => (op === "moat.caller" ? { resp: who } : { error: { code: "unknown_op", message: op } });
let p = moat.caller();
assert.deepEqual(last(), { op: "moat.caller", req: {} });
assert.deepEqual([p.user, p.org, p.roles, p.correlationId, p.hasRole("admin"), p.hasRole("adm")], ["ann", "acme", ["admin"], "c-1", true, false]);
who = { user: "bob", org: "acme", correlation_id: "c-2" };
p = moat.caller();
assert.deepEqual([p.user, p.roles, p.correlationId], ["bob", [], "c-2"], "not the last caller's, and no roles is []");
who = { org: "acme" };
refused(() => moat.caller(), "internal");

console.log("ok");
