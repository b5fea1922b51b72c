package javascript

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	jssdk "github.com/moat-sandbox/moat/guests/js"
)

// A script's uncaught exception is QuickJS's to report, and QuickJS
// reports it as exit status 1 with the message and the stack on stderr:
// the host then knows only that the script failed, and the last line of
// stderr, a stack frame, is all an HTTP client would read. So that
// `throw new MoatError("invalid_argument", "...")` reaches the client as
// a compiled plugin's invalid_argument does (400, with its message), the
// script runs under a bootstrap given with -e: it evaluates the entry file
// (import() for an ES module, std.loadScript for a classic script, the
// choice qjs itself would make), catches what escapes, and when the run is
// a plugin's action ($MOAT_ACTION set) ends it as abi/script.go says, the
// error as the last line of stdout and exit status abi.ScriptErrorExit: a
// MoatError with its code and message, anything else as guest_error with
// its name, message and first stack frame. The stack goes to stderr, for
// the log. Outside an action (moat exec) the bootstrap prints what qjs
// would and exits 1.
//
// The trailing file argument keeps scriptArgs what it was
// (["/src/main.js", ARGS...]): qjs hands the arguments after its options to
// the script whether it runs a file or -e.
//
// The bootstrap grants nothing: a script could print the same line and
// call std.exit itself. The host still refuses a code only it gives and
// takes the line only with the status (host/script.go).
const bootstrapTemplate = `(function () {
  const path = scriptArgs[0];
  function fail(e) {
    const isMoat = e !== null && typeof e === "object" && e.name === "MoatError" && typeof e.code === "string" && e.code !== "";
    let summary;
    if (isMoat) {
      summary = String(e.message ?? "");
      if (summary.startsWith(e.code + ": ")) summary = summary.slice(e.code.length + 2);
      else if (summary === e.code) summary = "";
    } else if (e !== null && typeof e === "object" && "message" in e) {
      summary = (e.name ? e.name + ": " : "") + String(e.message);
      const frame = String(e.stack ?? "").split("\n").map((l) => l.trim()).find((l) => l.startsWith("at "));
      if (frame) summary += " (" + frame + ")";
    } else {
      summary = "uncaught " + String(e);
    }
    const stack = e !== null && typeof e === "object" && e.stack ? String(e.stack) : "";
    std.err.puts(stack + (stack === "" || stack.endsWith("\n") ? "" : "\n") + String(e) + "\n"); // the message last, as Python ends a traceback: the line a log or an error shows
    std.err.flush();
    if (!std.getenv("MOAT_ACTION")) std.exit(1);
    std.out.flush();
    std.out.puts("\n" + JSON.stringify({ code: isMoat ? e.code : "CODE_GUEST_ERROR", message: summary }) + "\n");
    std.out.flush();
    std.exit(EXIT_STATUS);
  }
  // A script that registered handlers (moat.action) serves them once its
  // top-level code is done: resident, or the one action of this run.
  function serveHandlers() {
    if (!std.getenv("MOAT_RESIDENT") && !std.getenv("MOAT_ACTION")) return;
    const sdk = path.slice(0, path.lastIndexOf("/") + 1) + "SDK_FILE";
    return import(sdk).then((m) => { if (m.registered()) m.serve(); });
  }
  if (MODULE) {
    import(path).then(serveHandlers).catch(fail);
  } else {
    try { std.loadScript(path); } catch (e) { fail(e); }
    Promise.resolve().then(serveHandlers).catch(fail);
  }
})();`

// bootstrap returns the -e program for an entry file: module says whether
// qjs would run it as an ES module.
func bootstrap(module bool) string {
	r := strings.NewReplacer(
		"CODE_GUEST_ERROR", string(abi.CodeGuestError),
		"EXIT_STATUS", strconv.Itoa(abi.ScriptErrorExit),
		"MODULE", map[bool]string{true: "true", false: "false"}[module],
		"SDK_FILE", jssdk.FileName,
	)
	return r.Replace(bootstrapTemplate)
}

// bootstrapID is part of the build key: a changed bootstrap is a changed
// artifact.
var bootstrapID = func() string {
	h := sha256.Sum256(append([]byte(bootstrapTemplate), jssdk.SDK...))
	return hex.EncodeToString(h[:8])
}()

// BuildID implements languages.BuildIdentifier.
func (Language) BuildID() string { return "bootstrap-" + bootstrapID }

// isModule says whether qjs would run src as an ES module: a .mjs file,
// or one whose first token (after a #! line and comments) is export, or
// import not followed by '(' or '.' (JS_DetectModule in quickjs.c).
func isModule(name, src string) bool {
	if path.Ext(name) == ".mjs" {
		return true
	}
	if strings.HasPrefix(src, "#!") {
		if i := strings.IndexByte(src, '\n'); i >= 0 {
			src = src[i:]
		} else {
			return false
		}
	}
	toks := lex(src)
	if len(toks) == 0 || toks[0].kind != tokName {
		return false
	}
	switch toks[0].text {
	case "export":
		return true
	case "import":
		return len(toks) == 1 || !isPunct(toks[1], "(", ".")
	}
	return false
}
