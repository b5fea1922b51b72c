package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/internal/atomicfile"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// Snapshots: an interpreter started once, its state reused by every run.
//
// CPython spends ~25 ms of a 30 ms hello world starting: its allocator,
// its type objects, the imports of site and encodings. All of it lands in
// linear memory and one global, the shadow-stack pointer. So the host
// runs the interpreter once to a point the guest chooses (the park),
// copies its memory and globals (package wasmsnap), and starts later runs
// from that image: a fresh instance of the same compiled module, the
// image written into it, and a call of an entry function with the code
// the run needs.
//
// The park. The guest, given $MOAT_SNAPSHOT (a nonce the host makes per
// capture), writes the nonce as a line on stdout and then reads the wall
// clock; that clock read never returns: the host copies the state there
// and ends the capture run. A clock read, because it is a host call made
// with the interpreter's lock held and nothing else in flight (a read or
// a write would release CPython's GIL, leaving no thread state to enter
// with). A guest cannot park a run that is not a capture: only a capture
// has the nonce and the clock that parks.
//
// The entry. The image's stack still holds the frames that led to the
// clock read; they are not resumed. The entry is called as a C function
// is called from inside that clock read: its string argument is written
// just below the captured stack pointer, and the pointer is set below it,
// so the captured frames stay intact under the new ones (the interpreter
// sees a nested call, as a C extension calling back into Python does).
// For CPython the entry is PyRun_SimpleStringFlags, found by
// wasmsnap.FindEntry; the code it runs sets sys.argv, the environment and
// the script, and ends the process as `python main.py` would.
//
// What an image fixes for every run started from it: what the guest did
// before the park (for a plugin, its top-level code, run once when the
// image is made), the interpreter's hash secret (PYTHONHASHSEED), and the
// mounts: a run must have the same directories at the same guest paths,
// in the same order, as the capture had, because the guest's libc listed
// them at its start. A run that does not (extra --dir mounts, an
// interpreter variable in its environment) starts cold; Module.Run says
// which in RunResult.FromSnapshot.
//
// Images are cached in memory per module and on disk under the cache
// directory, by the module's digest and Snapshot.Key (the bootstrap, the
// SDK and the plugin's sources): a new interpreter, SDK or plugin is a new
// image. A capture that fails (the guest never parks, or the probe fails)
// is logged once and the module's runs start cold.

// Snapshot says how a WASI command's runs may start from an image of one
// of its runs (LoadOptions.Snapshot).
type Snapshot struct {
	// Key names the image among the module's: a digest of whatever the
	// guest's state at the park depends on besides the module's bytes.
	Key string
	// The entry is the function a restored instance is entered by: a C
	// function of EntryParams ints or pointers, the first the code to
	// run. It is the first function of that signature the module calls
	// with a pointer to FindMarker's bytes (and FindFixed's values at
	// their positions) when run with FindArgs (argv after argv[0];
	// wasmsnap.FindEntry): for CPython, exec(MARKER) finds
	// PyRun_StringFlags(str, Py_file_input, globals, locals, flags).
	// Found once per module digest and kept in the cache directory.
	FindArgs    []string
	FindMarker  string
	FindFixed   map[int]uint64
	EntryParams int
	// EntryCall returns the entry's arguments for the code at address
	// code, given the numbers the guest wrote after the nonce on its park
	// line (an object's address: CPython's id()).
	EntryCall func(code uint32, park []uint64) []uint64
	// StackPointer is the index of the global that is the guest's shadow
	// stack pointer (clang's __stack_pointer, 0).
	StackPointer int
	// Args (after argv[0]), Env and Mounts are the capture run's. Mounts
	// are what every run started from the image must have, in order.
	Args   []string
	Env    map[string]string
	Mounts []Mount
	// Scratch says the runs started from the image have a scratch
	// directory (RunRequest.Scratch): the capture has an empty one at
	// ScratchGuestPath, after Mounts, and a run without one starts cold.
	Scratch bool
	// Probe is the code the host runs from a new image before it keeps
	// it: it must print the nonce it is given and end with status 0.
	Probe func(nonce string) string
	// Resume is the code a resident Script's instance started from the
	// image is entered with (its serve loop); Args, Env and Mounts are
	// then the Script's, with the op device.
	Resume string
	// EntryName, in place of the Find fields, names the entry in the
	// module's name section (a build that keeps it: QuickJS's eval_buf).
	EntryName string
	// RecordName names a function whose first argument (an i32) the
	// module records in a global of its own on every call
	// (wasmsnap.RecordParam); the value it held at the capture follows
	// the park line's numbers in EntryCall's park: QuickJS's JSContext,
	// which no script can name.
	RecordName string
	// CaptureOnly: the module makes no image of its own; its instances
	// start cold, and only a live one is captured (CaptureResident) and
	// started from (LoadOptions.ResidentImage). Probe is then unused.
	CaptureOnly bool
}

// snapshotState is a module's image, made once.
type snapshotState struct {
	spec    Snapshot
	globals int
	// scope is what the module was loaded with that may shape its image
	// beyond spec: its organization and manifest (imageKey).
	scope struct {
		org      string
		manifest []byte
	}
	// code names the compiled module (globals and entry exported): an
	// image restores only into instances of the same.
	code   string
	mu     sync.Mutex
	img    *wasmsnap.Image
	path   string // where img is kept on disk
	failed error
	// given: img is LoadOptions.ResidentImage, the only state an
	// instance may start with (no capture, no cold start).
	given bool
	// toolchain: the module is the machine's toolchain
	// (LoadOptions.Toolchain): its command image is the machine's.
	toolchain bool
	// park is a capture of a live instance in progress (CaptureResident).
	park atomic.Pointer[residentPark]
	// interp, when set, enters copies in place of the entry, and the
	// module has no image of its own (resumer.go).
	interp driver.Resumer
	// recorded is the index of the global holding RecordName's argument,
	// or -1.
	recorded int
}

// ownImage says whether the module makes an image of its own (from its
// top level, or a command's park), rather than only capturing live
// instances and starting from a given image.
func (s *snapshotState) ownImage() bool { return s.interp == nil && !s.spec.CaptureOnly }

// errParked unwinds a capture run from its park.
var errParked = errors.New("parked for a snapshot")

// maxEntryCode bounds the code an entry is called with: it is written on
// the guest's shadow stack, below the captured frames.
const maxEntryCode = 64 << 10

// entries remembers, for the life of the process, the entries found (by
// the name of the file each is kept in: the module's digest and how it was
// found): finding one runs the interpreter for ~1 s, and a process may
// have many hosts, each with a cache directory of its own.
var entries sync.Map

// fromSnapshot makes a load's runs (and a resident script's instances)
// start from an image: what is compiled is the module with its globals and
// its entry exported, code of its own (source, codeDigest), and the module
// keeps the spec. A loader calls it before compileWasm.
func (ld *loading) fromSnapshot(ctx context.Context, spec *Snapshot) error {
	var s *snapshotState
	if l := ld.like(); l != nil && l.code.snap != nil && sameEntry(&l.code.snap.spec, spec) {
		// The Template's preparation: the same bytes, the same entry.
		ld.source, ld.codeDigest = nil, l.code.snap.code
		s = &snapshotState{spec: *spec, globals: l.code.snap.globals, code: ld.codeDigest, recorded: l.code.snap.recorded}
	} else {
		source, globals, entry, err := ld.h.prepareSnapshot(ctx, ld.digest, ld.wasm, spec, ld.opts.FirstTime, ld.opts.Toolchain)
		if err != nil {
			return ld.fail(abi.CodeBadModule, err, "snapshot: %v", err)
		}
		ld.source, ld.codeDigest = source, fmt.Sprintf("%s-snap%d", ld.digest, entry)
		s = &snapshotState{spec: *spec, globals: globals, code: ld.codeDigest, recorded: -1}
		if spec.RecordName != "" {
			s.recorded = globals - 1 // RecordParam's, defined last
		}
	}
	s.scope.org, s.scope.manifest = ld.opts.Org, manifestBytes(ld.opts)
	s.toolchain = ld.opts.Toolchain
	if ri := ld.opts.ResidentImage; ri != nil {
		if err := ri.fits(s); err != nil {
			return ld.fail(abi.CodeInvalidArgument, err, "resident image: %v", err)
		}
		s.img, s.given = ri.img, true
	}
	ld.m.code.snap = s
	return nil
}

// sameEntry reports whether a and b find the same entry.
func sameEntry(a, b *Snapshot) bool {
	return a.FindMarker == b.FindMarker && a.EntryParams == b.EntryParams && slices.Equal(a.FindArgs, b.FindArgs) &&
		a.EntryName == b.EntryName && a.RecordName == b.RecordName &&
		fmt.Sprint(a.FindFixed) == fmt.Sprint(b.FindFixed)
}

// prepareSnapshot finds the entry of wasm (whose digest is digest) and
// makes it and the globals reachable from the host (wasmsnap.Prepare),
// for a module loaded with a Snapshot. It returns the bytes to compile,
// the number of globals and the entry.
func (h *Host) prepareSnapshot(ctx context.Context, digest string, wasm []byte, spec *Snapshot, firstTime func(string) func(), toolchain bool) ([]byte, int, uint32, error) {
	if spec.EntryName != "" {
		return prepareNamed(wasm, spec)
	}
	if spec.Probe == nil || spec.Key == "" || spec.FindMarker == "" || spec.EntryCall == nil || spec.EntryParams < 1 {
		return nil, 0, 0, errors.New("a Snapshot needs a Key, a FindMarker, EntryParams, an EntryCall and a Probe")
	}
	path := filepath.Join(h.codeDir(toolchain), "snapshots", digest[:32]+"-"+SnapshotKey([]byte(spec.FindMarker), []byte(strings.Join(spec.FindArgs, "\x00")),
		[]byte(fmt.Sprint(spec.EntryParams, spec.FindFixed)))+".entry")
	var entry uint32
	memo := filepath.Base(path) // the same question for every host of the process
	if v, ok := entries.Load(memo); ok {
		entry = v.(uint32)
	} else if b, err := os.ReadFile(path); err == nil && len(b) == 4 {
		entry = binary.LittleEndian.Uint32(b)
	} else {
		if firstTime != nil {
			defer firstTime("load")()
		}
		args := append([]string{"entry"}, spec.FindArgs...)
		if entry, err = wasmsnap.FindEntry(ctx, wasm, args, spec.FindMarker, spec.EntryParams, spec.FindFixed); err != nil {
			return nil, 0, 0, err
		}
	}
	entries.Store(memo, entry)
	if _, err := os.Stat(path); err != nil {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			_ = atomicfile.Write(path, binary.LittleEndian.AppendUint32(nil, entry))
		}
	}
	out, globals, err := wasmsnap.Prepare(wasm, map[string]uint32{"run": entry})
	return out, globals, entry, err
}

// snapshotImage returns the module's image, made by capture on first use
// (or read from the disk); nil when the module has none or its capture
// failed, so that runs start cold.
func (m *Module) snapshotImage(ctx context.Context, capture func(context.Context) (*wasmsnap.Image, error)) *wasmsnap.Image {
	s := m.code.snap
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.img != nil || s.failed != nil {
		return s.img
	}
	path := m.imagePath()
	s.path = path
	img, err := wasmsnap.Open(path, s.globals)
	if err == nil {
		// Read once into a sealed memfd, which every instance maps
		// copy-on-write (enterImage); checked once, as it was read.
		s.img = img.Shared()
		return s.img
	}
	if !errors.Is(err, fs.ErrNotExist) {
		// Torn, truncated, of another format, or another image's copied
		// here: never restored. Made again below, over it.
		m.host.log.Warn("snapshot image unusable, made again (instances start cold meanwhile)", "module", m.name, "image", path, "err", err,
			"clear", m.clearImages())
		_ = os.Remove(path)
	}
	began := time.Now()
	// The capture is the module's, not the caller's: a caller that gives
	// up must not leave the module without an image for its life. It has
	// its own deadline (capture).
	ctx = context.WithoutCancel(ctx)
	img, err = capture(ctx)
	if err == nil {
		err = m.probeImage(ctx, img)
	}
	if err != nil {
		s.failed = err
		m.host.log.Warn("no snapshot: instances of the module start cold", "module", m.name, "err", err)
		return nil
	}
	s.img = img.Shared() // a sealed memfd every instance maps (enterImage)
	m.host.log.Info("snapshot made", "module", m.name, "bytes", img.Bytes(), "pages", img.Pages, "took", time.Since(began).Round(time.Millisecond))
	if wasmsnap.Save(path, img) == nil {
		wasmsnap.Prune(filepath.Dir(path), maxImageBytes)
	}
	return s.img
}

// imageInputs is everything an instance of m is built from before its
// first call, and so everything its image may hold: the capture builds
// its instance from this struct (instanceArgs), and the image's name is
// its digest (imageKey). A new input of an instance is a new field here,
// and with it a new name: no list of what shapes an image is kept apart
// from what builds the instance, so none can fall behind it.
//
// The guest's part is Snapshot.Key (the bootstrap, the SDK, the plugin's
// sources) with the module's digest (the interpreter's bytes); the
// host's: the organization and manifest it was loaded with, its name, the
// profile's verdict (effective grants and limits), its config and limits,
// the capture's arguments, environment and mounts, the shape of its file
// grants (where each is mounted and how: libc numbered the preopens at
// its start, and another shape leaves the op device's descriptor pointing
// elsewhere, "Bad file descriptor") and whether it has the op device. Two
// organizations deploying the same sources therefore never share an
// image: what a top level kept stays its organization's. What a grant
// holds is not an input: a capture never sees it (grantStandIn).
type imageInputs struct {
	Format   int // bump to retire every image made before
	Module   string
	Guest    string
	Resume   string
	Binding  string // Module.Binding: sources, manifest, config, signature's verdict
	Org      string
	Manifest []byte
	Name     string
	Policy   *policy.Evaluation
	Config   map[string]string
	Limits   Limits
	Args     []string
	Env      map[string]string
	Mounts   []Mount
	Grants   []imageGrant
	Device   bool
	Scratch  bool // the capture had a run's scratch directory at ScratchGuestPath
}

// imageGrant is a file grant as an image sees it: where it is mounted,
// what it is and how.
type imageGrant struct {
	Path, Real string
	RW         bool
}

// imageInputs returns m's image inputs (see the type): those of a
// resident instance when m is a resident script with a resumable image,
// else those of a command's run.
func (m *Module) imageInputs() imageInputs {
	in := imageInputs{Format: 1, Module: m.digest, Name: m.name, Config: m.config, Limits: m.limits}
	if m.policy != nil {
		in.Policy, in.Binding = m.policy.eval, m.Binding()
	}
	if s := m.code.snap; s != nil {
		in.Guest, in.Resume, in.Org, in.Manifest = s.spec.Key, s.spec.Resume, s.scope.org, s.scope.manifest
		in.Args, in.Env, in.Mounts, in.Scratch = s.spec.Args, s.spec.Env, s.spec.Mounts, s.spec.Scratch
	}
	if m.code.script != nil && (m.code.snap == nil || m.code.snap.spec.Resume != "") {
		in.Args, in.Env, in.Mounts, in.Device = m.code.script.Args, m.code.script.Env, m.code.script.Mounts, true
	}
	for _, g := range m.files.grants() {
		in.Grants = append(in.Grants, imageGrant{Path: g.path, Real: g.dir.RealPath(), RW: g.dir.RW()})
	}
	return in
}

// imageKey names the module's image in the cache directory, which every
// host of the machine shares (moat serve has a host per organization):
// the digest of its imageInputs.
func (m *Module) imageKey() string {
	in := m.imageInputs()
	// A mount whose content is named is named by it, not by where it is
	// (Mount.Content).
	in.Mounts = slices.Clone(in.Mounts)
	for i := range in.Mounts {
		if in.Mounts[i].Content != "" {
			in.Mounts[i].HostDir = ""
		}
	}
	b, err := json.Marshal(in)
	if err != nil {
		// Unique to this module: an image no other shares.
		b = []byte(fmt.Sprintf("unencodable %p: %v", m, err))
	}
	return SnapshotKey(b)
}

// imagePath is where m's image is kept: in the machine's cache for a
// command image of the machine's toolchain (machineImage), else in the
// host's cache directory.
func (m *Module) imagePath() string {
	return filepath.Join(m.imageDir(), m.digest[:32]+"-"+m.imageKey()+".img")
}

// imageDir is the directory of m's image.
func (m *Module) imageDir() string {
	return filepath.Join(m.host.codeDir(m.machineImage()), "snapshots")
}

// machineImage reports whether m's image is the machine's: a command
// image (no resident script's top level ran in it, no file grant was
// mounted in it) of the machine's toolchain, made of the interpreter and
// its own start alone, whatever the tenant; every other image may hold
// a tenant's state and stays in the host's cache directory.
func (m *Module) machineImage() bool {
	s := m.code.snap
	return s != nil && s.toolchain && s.spec.Resume == "" && m.code.script == nil && m.files == nil
}

// clearImages says how to remove every image of m's image directory.
func (m *Module) clearImages() string {
	return "rm -r " + m.imageDir()
}

// dropImage forgets img, which an instance failed to start from (cause),
// and removes its file: the module's instances start cold from now on in
// this process, and the next process makes a new image. It returns the
// image's path.
func (m *Module) dropImage(img *wasmsnap.Image, cause error) string {
	s := m.code.snap
	s.mu.Lock()
	if s.img == img {
		s.img, s.failed = nil, fmt.Errorf("an instance failed to start from the image: %w", cause)
	}
	path := s.path
	s.mu.Unlock()
	_ = os.Remove(path)
	m.host.log.Warn("an instance failed to start from its snapshot image: the image is removed and instances start cold",
		"module", m.name, "image", path, "err", firstLine(cause), "clear", m.clearImages())
	return path
}

// manifestBytes is the manifest a module was loaded with, as signed or
// else encoded; nil without one.
func manifestBytes(opts LoadOptions) []byte {
	if opts.ManifestBytes != nil || opts.Manifest == nil {
		return opts.ManifestBytes
	}
	b, err := json.Marshal(opts.Manifest)
	if err != nil {
		// Unique to this load: an image no other load shares.
		b = []byte(fmt.Sprintf("%p", opts.Manifest))
	}
	return b
}

// maxImageBytes bounds the images kept on disk: a plugin's image is ~10
// MB, and every version of every plugin a server loads has one.
const maxImageBytes = 1 << 30

// captureCommand captures a run of the command as Snapshot's Args, Env and
// Mounts say.
func (m *Module) captureCommand(ctx context.Context) (*wasmsnap.Image, error) {
	in := m.imageInputs()
	mc := m.commandConfig(in.Args, in.Env, io.Discard, io.Discard, func() context.Context { return ctx })
	fsc := wazero.NewFSConfig()
	for _, mt := range in.Mounts {
		if mt.Granted {
			continue // a file grant (openMountGrants)
		}
		fsc = dirMount(fsc, mt)
	}
	if in.Scratch {
		var done func()
		var err error
		if fsc, done, err = mountCaptureScratch(fsc); err != nil {
			return nil, err
		}
		defer done()
	}
	return m.capture(ctx, mc.WithFSConfig(fsc), nil)
}

// capture runs the module, configured as mc, to its park and copies its
// state there. attach, when set, readies the context the guest runs in
// (a resident capture's op device).
func (m *Module) capture(ctx context.Context, mc wazero.ModuleConfig, attach func(context.Context) context.Context) (*wasmsnap.Image, error) {
	s := m.code.snap
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	token := hex.EncodeToString(nonce)
	lim := m.limits
	// As long as an instance's start may take (resident.go): a top level
	// that takes longer fails the same way cold.
	cctx, cancel := context.WithTimeout(ctx, max(lim.Timeout, residentStartTimeout))
	defer cancel()
	var stderr bytes.Buffer
	watch := &parkWatch{token: []byte(token)}
	var (
		mod  api.Module
		img  *wasmsnap.Image
		cerr error
	)
	mc = mc.WithEnv(SnapshotEnv, token).WithStdout(watch).WithStderr(&limitedBuffer{b: &stderr, n: 4096}).
		WithWalltime(func() (int64, int32) {
			if watch.armed() && img == nil && cerr == nil {
				if img, cerr = wasmsnap.Capture(mod, s.globals); cerr == nil {
					img.Values = watch.values()
				}
				panic(errParked)
			}
			t := time.Now()
			return t.Unix(), int32(t.Nanosecond())
		}, sys.ClockResolution(1))
	actx := experimental.WithMemoryAllocator(cctx, newLimitedMemory(lim))
	if attach != nil {
		actx = attach(actx)
	}
	mod, err := m.host.runtime.InstantiateModule(actx, m.code.cm, mc)
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	err = startModule(actx, mod, "_start")
	_ = mod.Close(context.Background())
	switch {
	case cerr != nil:
		return nil, cerr
	case img == nil && err == nil:
		return nil, fmt.Errorf("the guest ended without parking (%s)", lastLine(stderr.Bytes()))
	case img == nil:
		return nil, fmt.Errorf("the guest failed before it parked: %s (%s)", firstLine(err), lastLine(stderr.Bytes()))
	}
	return img, nil
}

// probeImage checks a new image: a run from it must print the nonce the
// probe is given and succeed, or the entry is not what it was taken for.
func (m *Module) probeImage(ctx context.Context, img *wasmsnap.Image) error {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	token := hex.EncodeToString(nonce)
	cctx, cancel := context.WithTimeout(ctx, max(m.limits.Timeout, 30*time.Second))
	defer cancel()
	var out, perr bytes.Buffer
	mc := m.commandConfig(nil, nil, &limitedBuffer{b: &out, n: 4096}, &limitedBuffer{b: &perr, n: 4096}, func() context.Context { return cctx })
	code, err := m.runFromImage(cctx, img, m.code.snap.spec.Probe(token), mc, m.code.snap.spec.Mounts, m.limits)
	if err != nil || code != 0 || out.String() != token {
		return fmt.Errorf("the image failed its probe (status %d, output %q, stderr %q): %v", code, out.String(), tailOf(perr.Bytes(), 300), err)
	}
	return nil
}

// runFromImage is a whole run of a probe on a fresh instance: restored,
// entered with code, closed. Runs proper go through run.
func (m *Module) runFromImage(ctx context.Context, img *wasmsnap.Image, code string, mc wazero.ModuleConfig, mounts []Mount, lim Limits) (uint32, error) {
	fsc := wazero.NewFSConfig()
	for _, mt := range mounts {
		fsc = dirMount(fsc, mt)
	}
	if m.code.snap.spec.Scratch && m.code.script == nil {
		var done func()
		var err error
		if fsc, done, err = mountCaptureScratch(fsc); err != nil {
			return 0, err
		}
		defer done()
	}
	alloc := newLimitedMemory(lim)
	if img.IsShared() {
		alloc.UseMapping(uint64(img.Pages) * 65536)
	}
	actx := experimental.WithMemoryAllocator(ctx, alloc)
	mod, err := m.host.runtime.InstantiateModule(actx, m.code.cm, mc.WithFSConfig(fsc))
	if err != nil {
		return 0, err
	}
	alloc.KeepWhile(mod)
	defer mod.Close(context.Background())
	err = m.enterImage(actx, mod, img, code, alloc)
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

// enterImage writes img into mod, a fresh instance, and calls the entry
// with code. It ends as startModule does: nil for a clean end (an exit
// with status 0, or the entry returning), a *sys.ExitError for an exit
// with another status (status 1 when the entry returned 0, C's NULL:
// CPython's PyRun_StringFlags returns NULL with an exception the code
// did not handle), or the trap. The image is mapped into mod's memory
// copy-on-write when alloc is mapped (UseMapping, before instantiation)
// and the image is shared (wasmsnap.Image.Shared), else copied.
func (m *Module) enterImage(ctx context.Context, mod api.Module, img *wasmsnap.Image, code string, alloc *limitedMemory) error {
	if err := img.RestoreMapped(mod, alloc); err != nil {
		return err
	}
	spec := m.code.snap.spec
	sp, ok := mod.ExportedGlobal(wasmsnap.GlobalExport(spec.StackPointer)).(api.MutableGlobal)
	if !ok || spec.StackPointer >= len(img.Globals) {
		return fmt.Errorf("global %d is not a mutable stack pointer", spec.StackPointer)
	}
	top := uint32(img.Globals[spec.StackPointer])
	at := (top - uint32(len(code)) - 1 - 16) &^ 15
	if len(code) > maxEntryCode || at > top || at < 64<<10 {
		return fmt.Errorf("the entry's code (%d bytes) does not fit on the stack below %d", len(code), top)
	}
	if !mod.Memory().Write(at, append([]byte(code), 0)) {
		return fmt.Errorf("the stack at %d is outside memory", at)
	}
	sp.Set(uint64(at - 16))
	fn := mod.ExportedFunction(wasmsnap.EntryPrefix + "run")
	if fn == nil || !wasmsnap.EntrySignature(fn.Definition(), spec.EntryParams) {
		return fmt.Errorf("the entry is missing or does not take %d ints", spec.EntryParams)
	}
	park := img.Values
	if r := m.code.snap.recorded; r >= 0 && r < len(img.Globals) {
		park = append(slices.Clone(park), img.Globals[r])
	}
	args := spec.EntryCall(at, park)
	if len(args) != spec.EntryParams {
		return fmt.Errorf("the entry takes %d arguments, not %d", spec.EntryParams, len(args))
	}
	r, err := fn.Call(ctx, args...)
	var exit *sys.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 0:
		return nil
	case err != nil:
		return err
	case r[0] == 0:
		return sys.NewExitError(1)
	}
	return nil
}

// imageFor returns the image a run may start from: the module has one,
// the request asks for it (Entry), and the run's file system is the
// capture's (the same mounts at the same guest paths in the same order,
// nothing else); nil otherwise.
func (m *Module) imageFor(ctx context.Context, req RunRequest, lim Limits) *wasmsnap.Image {
	if m.code.snap == nil || !m.code.snap.ownImage() || req.Entry == "" || req.FS != nil || req.Ops || m.files != nil || len(req.Entry) > maxEntryCode {
		return nil
	}
	want := m.code.snap.spec.Mounts
	if len(req.Mounts) != len(want) || (req.Scratch != nil) != m.code.snap.spec.Scratch {
		return nil
	}
	for i, mt := range req.Mounts {
		if mt.GuestPath != want[i].GuestPath || mt.ReadOnly != want[i].ReadOnly || mt.Granted {
			return nil
		}
	}
	img := m.snapshotImage(ctx, m.captureCommand)
	if img == nil || img.Pages > lim.MemoryLimitPages {
		return nil
	}
	return img
}

// parkWatch is a capture's stdout: it arms the park when the guest has
// written its park line, the nonce and then numbers (decimal, separated
// by spaces) up to a newline.
type parkWatch struct {
	mu    sync.Mutex
	token []byte // the nonce
	seen  []byte
	line  []byte // the park line after the nonce, once whole
}

func (w *parkWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.line != nil {
		return len(p), nil
	}
	w.seen = append(w.seen, p...)
	if i := bytes.Index(w.seen, w.token); i >= 0 {
		if rest, _, ok := bytes.Cut(w.seen[i+len(w.token):], []byte("\n")); ok {
			w.line = append([]byte{' '}, rest...)
		}
	} else if len(w.seen) > 8192 {
		w.seen = slices.Clone(w.seen[len(w.seen)-len(w.token):])
	}
	return len(p), nil
}

func (w *parkWatch) armed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.line != nil
}

// values are the park line's numbers; one that is not a number ends them.
func (w *parkWatch) values() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var vs []uint64
	for _, f := range strings.Fields(string(w.line)) {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil || len(vs) == 16 {
			break
		}
		vs = append(vs, v)
	}
	return vs
}

// limitedBuffer keeps the first n bytes written to it.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// SnapshotKey is a Snapshot.Key: the digest of the parts given, each
// length-prefixed so that no two lists collide.
func SnapshotKey(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// SnapshotBytes is the size of the image the module's runs or resident
// instances start from (its memory's non-zero bytes); 0 while it has none
// (not yet made, not asked for, or its capture failed).
func (m *Module) SnapshotBytes() int {
	if m.code.snap == nil {
		return 0
	}
	m.code.snap.mu.Lock()
	defer m.code.snap.mu.Unlock()
	if m.code.snap.img == nil {
		return 0
	}
	return m.code.snap.img.Bytes()
}

// grantWatch records the first access a capture's guest made to a file
// grant's stand-in.
type grantWatch struct {
	mu          sync.Mutex
	grant, path string
}

func (w *grantWatch) touch(grant, p string) experimentalsys.Errno {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.grant == "" {
		w.grant, w.path = grant, p
	}
	return experimentalsys.ENOENT
}

// touched is the grant first accessed and the path asked for; "" when
// none was.
func (w *grantWatch) touched() (grant, path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.grant, w.path
}

// mountGrantStandIns mounts a stand-in at each of the module's file
// grants' paths, in the order mountFileGrants mounts the grants: the
// capture's guest sees the directories where its instances will (its
// libc numbers them as it starts), and nothing in them.
func (m *Module) mountGrantStandIns(fsc wazero.FSConfig, w *grantWatch) wazero.FSConfig {
	for _, g := range m.files.grants() {
		fsc = fsc.(sysfs.FSConfig).WithSysFSMount(&grantStandIn{grant: g.path, watch: w, root: &sysfs.AdaptFS{FS: embed.FS{}}}, g.path)
	}
	return fsc
}

// grantStandIn is a file grant as a capture sees it: an empty directory
// of no one's (the zero embed.FS), whose root the runtime may open and
// stat (wazero opens a preopen's root when its descriptor is first
// asked about), and every other access, listing the root included, is
// recorded and fails with ENOENT; so the image made holds nothing of the
// tenant's directory (captureResident).
type grantStandIn struct {
	experimentalsys.UnimplementedFS
	grant string
	watch *grantWatch
	root  experimentalsys.FS
}

func isRoot(p string) bool { return p == "." || p == "" || p == "/" }

func (f *grantStandIn) OpenFile(p string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	if isRoot(p) && flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR|experimentalsys.O_CREAT|experimentalsys.O_TRUNC) == 0 {
		d, e := f.root.OpenFile(".", flag, perm)
		if e != 0 {
			return nil, e
		}
		return &standInRoot{File: d, f: f}, 0
	}
	return nil, f.watch.touch(f.grant, p)
}

func (f *grantStandIn) Lstat(p string) (sys.Stat_t, experimentalsys.Errno) {
	if isRoot(p) {
		return f.root.Lstat(".")
	}
	return sys.Stat_t{}, f.watch.touch(f.grant, p)
}

func (f *grantStandIn) Stat(p string) (sys.Stat_t, experimentalsys.Errno) {
	if isRoot(p) {
		return f.root.Stat(".")
	}
	return sys.Stat_t{}, f.watch.touch(f.grant, p)
}

func (f *grantStandIn) Mkdir(p string, _ fs.FileMode) experimentalsys.Errno {
	return f.watch.touch(f.grant, p)
}

func (f *grantStandIn) Chmod(p string, _ fs.FileMode) experimentalsys.Errno {
	return f.watch.touch(f.grant, p)
}

func (f *grantStandIn) Rename(from, _ string) experimentalsys.Errno {
	return f.watch.touch(f.grant, from)
}

func (f *grantStandIn) Rmdir(p string) experimentalsys.Errno { return f.watch.touch(f.grant, p) }

func (f *grantStandIn) Unlink(p string) experimentalsys.Errno { return f.watch.touch(f.grant, p) }

func (f *grantStandIn) Link(p, _ string) experimentalsys.Errno { return f.watch.touch(f.grant, p) }

func (f *grantStandIn) Symlink(_, p string) experimentalsys.Errno {
	return f.watch.touch(f.grant, p)
}

func (f *grantStandIn) Readlink(p string) (string, experimentalsys.Errno) {
	return "", f.watch.touch(f.grant, p)
}

func (f *grantStandIn) Utimens(p string, _, _ int64) experimentalsys.Errno {
	return f.watch.touch(f.grant, p)
}

// standInRoot is a stand-in's root directory, opened: listing it is a
// look into the grant.
type standInRoot struct {
	experimentalsys.File
	f *grantStandIn
}

func (d *standInRoot) Readdir(int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	return nil, d.f.watch.touch(d.f.grant, ".")
}
