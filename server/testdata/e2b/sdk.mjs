// Drives moat's E2B-compatible API with the stock SDKs (e2b,
// @e2b/code-interpreter), as an agent would: server/e2b_test.go runs it
// with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set to a moat server
// on loopback, and OTHER_KEY to a key of another organization. Each step
// prints "ok <step>"; the first that fails throws, and node exits 1.
import { Sandbox as CodeSandbox } from "@e2b/code-interpreter";
import { Sandbox, NotFoundError, AuthenticationError, SandboxError } from "e2b";

const other = process.env.OTHER_KEY;
let last = performance.now();
const ok = (step) => {
  const now = performance.now();
  console.log(`ok ${step} (${(now - last).toFixed(0)} ms)`);
  last = now;
};
const eq = (step, got, want) => {
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    throw new Error(`${step}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }
};
const rejects = async (step, p, check) => {
  try {
    await p;
  } catch (e) {
    if (check && !check(e)) throw new Error(`${step}: the wrong error: ${e?.constructor?.name}: ${e?.message}`);
    return ok(step);
  }
  throw new Error(`${step}: did not fail`);
};

const sbx = await CodeSandbox.create({ timeoutMs: 120_000, metadata: { purpose: "moat-e2b-test" }, envs: { GREETING: "hi" } });
ok("create " + sbx.sandboxId);

// runCode keeps a context's state between calls.
let ex = await sbx.runCode("x = 1");
ex = await sbx.runCode("x + 1");
eq("python x + 1", ex.text, "2");
const seen = [];
ex = await sbx.runCode("import os\nprint(os.environ['GREETING'])", { onStdout: (m) => seen.push(m.line) });
eq("stdout", ex.logs.stdout, ["hi\n"]);
eq("onStdout", seen, ["hi\n"]);
ex = await sbx.runCode("1/0");
eq("error", ex.error?.name, "ZeroDivisionError");
ok("runCode python");
// runCode's output as it is produced: the first line reaches onStdout
// while the code still sleeps, a second before the run ends.
const lines = [];
const runBegan = performance.now();
ex = await sbx.runCode("import time\nprint('one')\ntime.sleep(1)\nprint('two')", {
  onStdout: (m) => lines.push([m.line, performance.now()]),
});
const runEnded = performance.now();
eq("runCode streamed", lines.map((l) => l[0]), ["one\n", "two\n"]);
eq("runCode stdout", ex.logs.stdout, ["one\n", "two\n"]);
if (runEnded - lines[0][1] < 700) {
  throw new Error(`runCode onStdout: the first line came ${(runEnded - lines[0][1]).toFixed(0)} ms before the end, not as produced`);
}
console.log(`runCode: first line after ${(lines[0][1] - runBegan).toFixed(0)} ms, end after ${(runEnded - runBegan).toFixed(0)} ms`);
ok("runCode streams");
const t0 = performance.now();
for (let i = 0; i < 20; i++) await sbx.runCode("x");
console.log(`runCode round trip on a live context: ${((performance.now() - t0) / 20).toFixed(1)} ms mean of 20`);
last = performance.now();

await sbx.runCode("var y = 40", { language: "js" });
ex = await sbx.runCode("y + 2", { language: "js" });
eq("js y + 2", ex.text, "42");
ok("runCode js");

const ctx = await sbx.createCodeContext({ language: "python" });
await sbx.runCode("z = 5", { context: ctx });
eq("context z", (await sbx.runCode("z", { context: ctx })).text, "5");
eq("context apart", (await sbx.runCode("'z' in globals()")).text, "False");
const ctxs = await sbx.listCodeContexts();
if (!ctxs.some((c) => c.id === ctx.id)) throw new Error("listCodeContexts: no " + ctx.id);
await sbx.restartCodeContext(ctx);
eq("restarted", (await sbx.runCode("'z' in globals()", { context: ctx })).text, "False");
await sbx.removeCodeContext(ctx);
ok("contexts");

// Files: written through the API, read by code; written by code, read
// through the API.
await sbx.files.write("/home/user/a.txt", "hello file");
eq("read", await sbx.files.read("/home/user/a.txt"), "hello file");
eq("code reads", (await sbx.runCode("open('/home/user/a.txt').read()")).text, "'hello file'");
await sbx.runCode("open('from_code.txt', 'w').write('made by code')");
eq("read what code wrote", await sbx.files.read("from_code.txt"), "made by code");
await sbx.files.write([{ path: "dir/b.txt", data: "b" }, { path: "dir/c.txt", data: "c" }]);
const names = (await sbx.files.list("/home/user")).map((e) => e.name + ":" + e.type).sort();
eq("list", names, ["a.txt:file", "dir:dir", "from_code.txt:file"]);
eq("list depth 2", (await sbx.files.list(".", { depth: 2 })).length, 5);
eq("makeDir", await sbx.files.makeDir("made/deep"), true);
eq("makeDir again", await sbx.files.makeDir("made/deep"), false);
eq("rename", (await sbx.files.rename("a.txt", "made/a2.txt")).path, "/home/user/made/a2.txt");
eq("getInfo", (await sbx.files.getInfo("made/a2.txt")).size, 10);
await sbx.files.remove("made");
eq("exists", await sbx.files.exists("made/a2.txt"), false);
await rejects("read outside", sbx.files.read("/etc/passwd"));
await rejects("read ..", sbx.files.read("../../etc/passwd"));
ok("files");

await sbx.files.write("streamed.txt", "one body", { useOctetStream: true });
eq("octet-stream upload", await sbx.files.read("streamed.txt"), "one body");
const events = [];
const watch = await sbx.files.watchDir("/home/user", (e) => events.push(e.type + ":" + e.name));
await sbx.files.write("watched.txt", "w");
for (let i = 0; i < 50 && !events.includes("create:watched.txt"); i++) await new Promise((r) => setTimeout(r, 100));
await watch.stop();
if (!events.includes("create:watched.txt")) throw new Error("watchDir: " + JSON.stringify(events));
ok("watchDir");

// The code is held by the workspace's grant: nothing of the host's file
// system, no symbolic link out, no way up from /home/user.
for (const code of [
  "open('/etc/passwd').read()",
  "open('/home/user/../../etc/passwd').read()",
  "import os\nos.symlink('/etc', '/home/user/etc')",
]) {
  const ex = await sbx.runCode(code);
  if (!ex.error) throw new Error(`hostile code ran: ${code}: ${ex.text}`);
}
await rejects("read a link the code tried", sbx.files.read("etc/passwd"));
ok("hostile code held");

// Commands: bash in the workspace as a native job, its output as it is
// produced (the first line arrives while the command still sleeps), a
// file code wrote read by a command, a background process listed and
// killed, stdin.
const chunks = [];
const began = performance.now();
let res = await sbx.commands.run("echo one; sleep 1; echo two; cat from_code.txt; pwd", {
  onStdout: (d) => chunks.push([d, performance.now()]),
});
const ended = performance.now();
eq("command stdout", res.stdout, "one\ntwo\nmade by code/home/user\n");
eq("command exit", res.exitCode, 0);
if (!chunks.length || ended - chunks[0][1] < 700) {
  throw new Error(`onStdout: the first chunk came ${chunks.length ? (ended - chunks[0][1]).toFixed(0) : "never"} ms before the end, not as produced`);
}
console.log(`command: first chunk after ${(chunks[0][1] - began).toFixed(0)} ms, end after ${(ended - began).toFixed(0)} ms`);
await rejects("a failing command", sbx.commands.run("echo no >&2; exit 3"), (e) => e.exitCode === 3 && /no/.test(e.stderr));
const bg = await sbx.commands.run("sleep 60", { background: true });
if (!(await sbx.commands.list()).some((p) => p.pid === bg.pid)) throw new Error("commands.list: no background pid " + bg.pid);
eq("kill a background command", await sbx.commands.kill(bg.pid), true);
const fed = await sbx.commands.run("read line; echo got $line", { background: true, stdin: true });
await sbx.commands.sendStdin(fed.pid, "fed\n");
res = await fed.wait();
eq("stdin", res.stdout, "got fed\n");
ok("commands");

await sbx.setTimeout(600_000);
const info = await sbx.getInfo();
if (info.endAt.getTime() < Date.now() + 500_000) throw new Error("setTimeout: ends " + info.endAt.toISOString());
eq("metadata", info.metadata, { purpose: "moat-e2b-test" });
ok("setTimeout");

const again = await CodeSandbox.connect(sbx.sandboxId);
eq("connect keeps x", (await again.runCode("x")).text, "1");
ok("connect");

const page = await Sandbox.list({ query: { metadata: { purpose: "moat-e2b-test" } } }).nextItems();
eq("list", page.map((s) => s.sandboxId), [sbx.sandboxId]);
eq("list by other metadata", (await Sandbox.list({ query: { metadata: { purpose: "else" } } }).nextItems()).length, 0);
eq("list paused", (await Sandbox.list({ query: { state: ["paused"] } }).nextItems()).length, 0);
ok("list");

// Another organization's key: the sandbox is not there.
await rejects("other org connect", CodeSandbox.connect(sbx.sandboxId, { apiKey: other }), (e) => e instanceof NotFoundError || e instanceof SandboxError);
await rejects("other org getInfo", Sandbox.getInfo(sbx.sandboxId, { apiKey: other }), (e) => e instanceof NotFoundError);
eq("other org kill", await Sandbox.kill(sbx.sandboxId, { apiKey: other }), false);
eq("other org list", (await Sandbox.list({ apiKey: other }).nextItems()).length, 0);
await rejects("a wrong key", Sandbox.list({ apiKey: "moat_not_a_key" }).nextItems(), (e) => e instanceof AuthenticationError);
ok("other org refused");

// Fork and pause of a sandbox holding a JavaScript context (and its
// Python one): the copy has both contexts' variables and goes on apart.
const [jsCopyInfo] = await Sandbox.fork(sbx.sandboxId, { count: 1 });
const jsCopy = await CodeSandbox.connect(jsCopyInfo.sandboxId);
eq("the js copy has y", (await jsCopy.runCode("y += 1; y", { language: "js" })).text, "41");
eq("the js parent keeps y", (await sbx.runCode("y", { language: "js" })).text, "40");
eq("the js copy pauses", await jsCopy.pause(), true);
const jsResumed = await CodeSandbox.connect(jsCopyInfo.sandboxId);
eq("the js copy resumed has y", (await jsResumed.runCode("y * 2", { language: "js" })).text, "82");
await jsResumed.kill();
ok("fork and pause with a js context");
const base = await CodeSandbox.create({ timeoutMs: 120_000 });
await base.runCode("x = 7");
await base.files.write("note.txt", "kept");
const copies = await Sandbox.fork(base.sandboxId, { count: 2 });
eq("fork count", copies.length, 2);
for (const c of copies) if (!(c instanceof Sandbox)) throw new Error("fork: " + c);
const copy = await CodeSandbox.connect(copies[0].sandboxId);
eq("copy has x", (await copy.runCode("x")).text, "7");
await copy.runCode("x = 8");
eq("parent keeps x", (await base.runCode("x")).text, "7");
eq("copy has files", await copy.files.read("note.txt"), "kept");
ok("fork");
eq("pause", await base.pause(), true);
eq("isRunning when paused", await base.isRunning(), false);
eq("list paused", (await Sandbox.list({ query: { state: ["paused"] } }).nextItems()).map((s) => [s.sandboxId, s.state]), [[base.sandboxId, "paused"]]);
eq("list running leaves it out", (await Sandbox.list({ query: { state: ["running"] } }).nextItems()).some((s) => s.sandboxId === base.sandboxId), false);
eq("other org list paused", (await Sandbox.list({ apiKey: other, query: { state: ["paused"] } }).nextItems()).length, 0);
const resumed = await CodeSandbox.connect(base.sandboxId);
eq("resumed x", (await resumed.runCode("x")).text, "7");
eq("resumed files", await resumed.files.read("note.txt"), "kept");
ok("pause and resume");
for (const c of copies) await c.kill();
await resumed.kill();

await sbx.kill();
eq("isRunning after kill", await sbx.isRunning(), false);
await rejects("getInfo after kill", Sandbox.getInfo(sbx.sandboxId), (e) => e instanceof NotFoundError);
ok("kill");
