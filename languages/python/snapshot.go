package python

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	pysdk "github.com/moat-sandbox/moat/guests/python"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
)

// Runs from a snapshot (host/snapshot.go). CPython is started once, to the
// end of its initialisation and the imports of site, and parked; each run
// then starts from that image and enters it through PyRun_StringFlags with
// one line of code that hands the run its script, argv and environment to
// the helper module the bootstrap left in the image. (That build has
// PyRun_SimpleStringFlags inlined into its callers; PyRun_StringFlags,
// which exec calls, has code of its own. It takes the globals to run in:
// the helper's, whose address the bootstrap gives on its park line.)
//
// The helper does what `python -B /src/main.py ARGS` does after start-up:
// sys.argv and sys.path[0], a clean __main__, the script compiled and run
// there, an uncaught exception printed as CPython prints it (without the
// helper's frame), SystemExit's status as CPython reads it, and an end as
// CPython's: __main__ cleared (so files left open are closed and
// flushed), atexit handlers, stdout and stderr flushed, then the exit
// status, with os._exit. (Not a full collection: objects only a cycle
// keeps are not finalised, as os._exit would not.)
//
// A run whose environment sets an interpreter variable (PYTHON...) other
// than the artifact's starts cold: CPython reads those only as it starts.

var _ languages.Snapshotter = Language{}

// findMarker is what the entry is found with (wasmsnap.FindEntry): the
// string `python -c "exec(MARKER)"` hands PyRun_StringFlags. A comment,
// so the run would do nothing if it got that far.
const findMarker = "#moat: find PyRun_StringFlags\n"

// pyFileInput is CPython's Py_file_input, PyRun_StringFlags' second
// argument for a module's worth of statements.
const pyFileInput = 257

// snapshotHelper is the module the image keeps as sys.modules
// ["_moat_snapshot"]; a run's entry calls its main in its globals.
const snapshotHelper = `
import sys, os, json, builtins, atexit, importlib.machinery

def _status(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1

def main(cfg):
    cfg = json.loads(cfg)
    path = cfg["path"]
    os.environ.clear()
    os.environ.update(cfg["env"])
    sys.argv[:] = [path] + cfg["args"]
    sys.orig_argv[:] = ["python", "-B", path] + cfg["args"]
    sys.path[0] = os.path.dirname(path)
    rng = sys.modules.get("random")
    if rng is not None:
        rng.seed()  # not the image's sequence
    d = sys.modules["__main__"].__dict__
    d.clear()
    d.update(__name__="__main__", __doc__=None, __package__=None, __spec__=None,
             __annotations__={}, __builtins__=builtins, __file__=path, __cached__=None)
    status = 0
    try:
        d["__loader__"] = importlib.machinery.SourceFileLoader("__main__", path)
        with open(path, "rb") as f:
            src = f.read()
        exec(compile(src, path, "exec"), d)
    except SystemExit as e:
        status = _status(e)
    except BaseException as e:
        e.__traceback__ = e.__traceback__.tb_next  # not this frame
        sys.excepthook(type(e), e, e.__traceback__)
        status = 1
    d.clear()  # what the script left open is closed (and flushed) here
    try:
        atexit._run_exitfuncs()
    except SystemExit as e:
        status = _status(e)
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status & 0xFFFFFFFF if status >= 0 else status & 0xFF)
`

// snapshotBoot is the capture's `python -c`: the helper made a module,
// then the park (host/snapshot.go): the nonce and the address of the
// helper's globals on stdout, then a clock read that does not return.
var snapshotBoot = `import sys, types, os, time
_m = types.ModuleType("_moat_snapshot")
exec(compile(` + pyQuote(snapshotHelper) + `, "<moat>", "exec"), _m.__dict__)
sys.modules["_moat_snapshot"] = _m
os.write(1, ("%s %d\n" % (os.environ.pop("` + host.SnapshotEnv + `"), id(_m.__dict__))).encode())
time.time()
raise SystemExit("moat: the snapshot's park returned")
`

// pyQuote is a Python string literal of s: JSON's string syntax, which
// Go writes without the escapes Python lacks.
func pyQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Snapshot implements languages.Snapshotter.
func (Language) Snapshot(a *languages.Artifact) *host.Snapshot {
	if len(a.Mounts) == 0 || len(a.Args) != 2 || a.Args[0] != "-B" {
		return nil // no standard library as files: nothing to capture with
	}
	// The capture sees what a run sees, in order: /src (any directory:
	// the bootstrap does not read it; the library's own) and the library.
	mounts := a.RunMounts(a.Mounts[0].HostDir)
	return &host.Snapshot{
		Key:         host.SnapshotKey([]byte(snapshotBoot), []byte(Version)),
		FindArgs:    []string{"-c", "exec(" + pyQuote(findMarker) + ")"},
		FindMarker:  findMarker,
		FindFixed:   map[int]uint64{1: pyFileInput},
		EntryParams: 5,
		EntryCall: func(code uint32, park []uint64) []uint64 {
			var globals uint64
			if len(park) > 0 {
				globals = park[0]
			}
			return []uint64{uint64(code), pyFileInput, globals, globals, 0}
		},
		StackPointer: 0,
		Args:         []string{"-B", "-c", snapshotBoot},
		Env:          maps.Clone(a.Env),
		Mounts:       mounts,
		Scratch:      true, // every exec run has one (languages/scratch.go)
		Probe: func(nonce string) string {
			return fmt.Sprintf("import sys, os\nsys.stdout.write(%s)\nsys.stdout.flush()\nos._exit(0)\n", pyQuote(nonce))
		},
	}
}

// ResidentSnapshot implements languages.Snapshotter: moat.py parks in
// serve() when $MOAT_SNAPSHOT is set, after the plugin's top level, and an
// instance from the image enters moat._resume(), which serves. The image
// depends on the sources (the SDK is among them) and the interpreter.
func (Language) ResidentSnapshot(a *languages.Artifact, src languages.Source) *host.Snapshot {
	s := Language{}.Snapshot(a)
	if s == nil {
		return nil
	}
	s.Key = host.SnapshotKey([]byte(s.Key), languages.PackSources(src), pysdk.SDK)
	s.Resume = "_resume()"
	return s
}

// EntryCode implements languages.Snapshotter.
func (Language) EntryCode(a *languages.Artifact, args []string, env map[string]string) (string, bool) {
	if len(a.Args) != 2 || !strings.HasPrefix(a.Args[1], languages.SrcGuestPath+"/") {
		return "", false
	}
	for k, v := range env {
		if strings.HasPrefix(k, "PYTHON") && a.Env[k] != v {
			return "", false
		}
	}
	cfg, err := json.Marshal(map[string]any{"path": path.Clean(a.Args[1]), "args": nonNil(args), "env": env})
	if err != nil {
		return "", false
	}
	return `main(` + pyQuote(string(cfg)) + `)`, true
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}
