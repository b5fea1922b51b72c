package javascript_test

import (
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages/internal/interptest"
)

func TestResident(t *testing.T) {
	suite.TestResident(t, interptest.ResidentScripts{
		File: "main.js",
		Main: `import * as moat from "./moat.js";
let calls = 0;
moat.action("echo", (s, call) => call.bytes);
moat.action("count", () => String(++calls));
moat.action("fail", () => { throw new moat.MoatError("invalid_argument", "no thanks"); });
moat.action("put", (s) => { moat.kv.put("k", s); return moat.kv.get("k"); });
moat.action("spin", () => { for (;;) {} });
moat.action("nap", () => { os.sleep(60000); });
moat.action("balloon", () => { const a = []; for (;;) a.push(new Array(1 << 16).fill(1)); });
`,
		TopLevelOp: `import * as moat from "./moat.js";
moat.kv.get("k");
moat.action("echo", (s) => s);
`,
		Wrong: `import * as moat from "./moat.js";
moat.action("other", (s) => s);
`,
		Classic: `std.out.puts(std.in.readAsString());`,
	})
}

func TestResidentBulkPastDeadline(t *testing.T) {
	testenv.Timing(t)
	suite.TestResidentBulkPastDeadline(t, "main.js", `import * as moat from "./moat.js";
moat.action("fill", () => { const a = new Uint8Array(32 << 20); for (let i = 0; ; i++) a.fill(i & 255); });
moat.action("echo", (s) => s);
`)
}
