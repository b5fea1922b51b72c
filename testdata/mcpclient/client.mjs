// An MCP client for moat's tests: the TypeScript SDK, as an agent's host
// would use it. Reads a plan as JSON from argv[2]:
//   {"transport": "http", "url": ".../mcp", "key": "..."}
//   {"transport": "stdio", "command": "moat", "args": ["mcp", ...], "env": {...}}
// with "elicit": "accept" | "decline" | null (null: no elicitation
// capability), "calls": [{"name": ..., "arguments": {...}}], and
// "resources": true to list the resources (every page of the list) and
// "reads": [uri, ...] to read some. Prints {"tools": [...], "toolMeta":
// {name: _meta}, "results": [{"isError", "text"}], "elicited": [...],
// "resources": [{"uri", "mimeType", "title"}], "reads": [{"uri",
// "mimeType", "text", "meta", "error"}]}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const plan = JSON.parse(process.argv[2]);
const capabilities = plan.elicit ? { elicitation: { form: {} } } : {};
const client = new Client({ name: "node-test-agent", version: "0.1.0" }, { capabilities });
const elicited = [];
if (plan.elicit) {
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    elicited.push(req.params.message);
    return plan.elicit === "accept" ? { action: "accept", content: {} } : { action: plan.elicit };
  });
}
let transport;
if (plan.transport === "http") {
  transport = new StreamableHTTPClientTransport(new URL(plan.url), {
    requestInit: { headers: { Authorization: `Bearer ${plan.key}` } },
  });
} else {
  transport = new StdioClientTransport({ command: plan.command, args: plan.args, env: plan.env, stderr: "inherit" });
}
await client.connect(transport);
const { tools } = await client.listTools();
const results = [];
for (const call of plan.calls || []) {
  try {
    const r = await client.callTool({ name: call.name, arguments: call.arguments });
    results.push({ isError: !!r.isError, text: (r.content || []).map((c) => c.text || "").join("") });
  } catch (e) {
    results.push({ isError: true, text: "protocol error: " + e.message });
  }
}
const resources = [];
if (plan.resources) {
  let cursor;
  do {
    const r = await client.listResources(cursor ? { cursor } : {});
    for (const x of r.resources) resources.push({ uri: x.uri, mimeType: x.mimeType, title: x.title });
    cursor = r.nextCursor;
  } while (cursor);
}
const reads = [];
for (const uri of plan.reads || []) {
  try {
    const r = await client.readResource({ uri });
    const c = r.contents[0] || {};
    reads.push({ uri, mimeType: c.mimeType, text: c.text || "", meta: c._meta || null });
  } catch (e) {
    reads.push({ uri, error: e.message });
  }
}
await client.close();
const toolMeta = Object.fromEntries(tools.map((t) => [t.name, t._meta || null]));
console.log(JSON.stringify({ tools: tools.map((t) => t.name), toolMeta, results, elicited, resources, reads }));
