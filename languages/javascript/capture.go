package javascript

import (
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/moat-sandbox/moat/languages"

	jssdk "github.com/moat-sandbox/moat/guests/js"
)

// Copies of a live resident instance (a session's fork or pause). The
// host captures an instance at a clock read after its park line
// (host.Module.CaptureResident) and enters a copy by calling a C function
// of the interpreter on top of the captured frames. QuickJS's evaluator
// takes the JSContext first, and no script can learn its address, so the
// module records it: JS_Eval's first argument is kept in a global of its
// own on every call (wasmsnap.RecordParam; qjs calls it with its one
// context for the bootstrap), which the image carries. The entry is qjs's
// own eval_buf(ctx, code, len, filename, flags): for a module it
// compiles, evaluates and then awaits the module's promise, driving the
// job queue (js_std_await), and it reports an exception on stderr. Both
// are found by the name section the prebuilt qjs keeps.
//
// The code a copy is entered with imports the SDK the instance already
// loaded (the same module record, so the same handlers and state) and
// serves again with a device of its own (moat.js's _resumeCopy). Its
// serve loop returns when the host stops the instance; the code then
// exits, as the original would have.
//
// The instances start as before (cold: qjs starts in milliseconds); only
// a live one is captured (CaptureOnly).

const (
	recordFunction = "JS_Eval"
	entryFunction  = "eval_buf"
	// jsEvalTypeModule is JS_EVAL_TYPE_MODULE.
	jsEvalTypeModule = 1
)

// resumeName names the entry's code in stack traces; the code follows it
// after a NUL, in the one string the host writes on the stack.
const resumeName = "<moat resume>"

var resumeBody = `import * as moat from "` + languages.SrcGuestPath + "/" + jssdk.FileName + `";
import * as std from "qjs:std";
try {
  moat._resumeCopy();
} catch (e) {
  std.err.puts(String(e) + "\n" + String((e && e.stack) || "") + "\n");
  std.err.flush();
  std.exit(1);
}
std.exit(0);
`

var _ languages.Snapshotter = Language{}

// Snapshot implements languages.Snapshotter: a run starts cold.
func (Language) Snapshot(*languages.Artifact) *host.Snapshot { return nil }

// EntryCode implements languages.Snapshotter: a run starts cold.
func (Language) EntryCode(*languages.Artifact, []string, map[string]string) (string, bool) {
	return "", false
}

// ResidentSnapshot implements languages.Snapshotter: a resident plugin's
// live instance may be captured and a copy entered (see the top of this
// file); its instances make no image of their own. nil when the
// interpreter names neither function (a build without its name section):
// its instances then cannot be copied, and a session refuses to fork one.
func (Language) ResidentSnapshot(a *languages.Artifact, src languages.Source) *host.Snapshot {
	if !named(a.WASM) {
		return nil
	}
	return &host.Snapshot{
		Key:         host.SnapshotKey([]byte(Version), languages.PackSources(src), jssdk.SDK),
		EntryName:   entryFunction,
		RecordName:  recordFunction,
		CaptureOnly: true,
		EntryParams: 5,
		EntryCall: func(code uint32, park []uint64) []uint64 {
			var ctx uint64
			if len(park) > 0 {
				ctx = park[len(park)-1] // the recorded JSContext
			}
			body := code + uint32(len(resumeName)) + 1
			return []uint64{ctx, uint64(body), uint64(len(resumeBody)), uint64(code), jsEvalTypeModule}
		},
		Resume: resumeName + "\x00" + resumeBody,
	}
}

// named says whether wasm's name section names the entry and the function
// whose argument is recorded (a parse of the sections: about a
// millisecond for qjs).
func named(wasm []byte) bool {
	_, err1 := wasmsnap.FunctionIndex(wasm, entryFunction)
	_, err2 := wasmsnap.FunctionIndex(wasm, recordFunction)
	return err1 == nil && err2 == nil
}
