// Package wasmsnap captures a running WebAssembly instance's state (its
// linear memory and its globals) and restores it into a fresh instance of
// the same module: the way an interpreter that took 30 ms to start, or a
// plugin's top-level code, is paid for once instead of on every instance.
//
// It is Wizer's idea, kept apart from the module's code. Wizer writes the
// captured state into a new module (data segments, global initialisers),
// which then has to be compiled again: 4 s for CPython, 12 s for Ruby,
// per plugin. Here the module is compiled once, with its globals exported
// (Prepare), and an image is applied to a fresh instance after
// instantiation (Image.Restore): a copy of the memory's non-zero bytes.
// The machine code is shared by every image of the module.
//
// What an image cannot carry is state outside the instance: open
// descriptors, the preopened directories the guest's libc listed at its
// start, the environment it read. The caller restores into an instance
// configured as the captured one was (same mounts in the same order) and
// hands the guest whatever changed (arguments, environment) through the
// entry it calls.
//
// Entries are functions the module does not export, exported by Prepare as
// EntryPrefix+name, so that a restored instance can be entered somewhere
// other than _start: an interpreter's "run this string" (CPython's
// PyRun_SimpleStringFlags). A stripped interpreter names none of its
// functions (python.wasm's name section and DWARF addresses are gone), so
// FindEntry finds one by what it does: the first function called with a
// pointer to a marker string the run was given. Reactors (Ruby's) export
// their entries already.
package wasmsnap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/tetratelabs/wazero/api"
)

// EntryPrefix is the prefix of the exports Prepare adds for entries.
const EntryPrefix = "moat:entry."

// GlobalExport is the name under which Prepare exports the module's i-th
// defined global.
func GlobalExport(i int) string { return "moat:global." + strconv.Itoa(i) }

// Image is one instance's state: its memory, as its runs of non-zero
// bytes (a fresh memory is zero), and the values of its defined globals.
type Image struct {
	Pages   uint32
	Runs    []Run
	Globals []uint64
	// Values are what the guest told the host as it was captured (the
	// address of an object the entry needs, say).
	Values []uint64
	// Key is what the image was made for: Save records the name of its
	// file (named after everything the image depends on), and Open
	// refuses an image found under another name (copied or renamed from
	// another's: restored, it would be another module's state).
	Key string
	// mem, when set, is the memory as a sealed file the Runs lie in
	// (Shared, shared_linux.go): RestoreMapped maps it.
	mem *sharedMem
}

// Run is Data at offset Off of the memory.
type Run struct {
	Off  uint32
	Data []byte
}

// IsShared reports whether the image's memory is a sealed file that
// RestoreMapped maps (Shared, ReadImage); else it is copied.
func (img *Image) IsShared() bool { return img.mem != nil }

// Bytes is the size of the image's memory contents.
func (img *Image) Bytes() int {
	n := 0
	for _, r := range img.Runs {
		n += len(r.Data)
	}
	return n
}

// zeroBlock is the grain of an image's runs: a block of this many zero
// bytes ends a run, and fewer are copied with it (a run costs a call and
// a bounds check; 256 zero bytes cost less).
const zeroBlock = 256

// Capture reads mod's memory and the globals Prepare exported. Call it
// while the guest is stopped (inside a host function it called, or between
// calls): the memory is copied as it is.
func Capture(mod api.Module, globals int) (*Image, error) {
	mem := mod.Memory()
	if mem == nil {
		return nil, errors.New("wasmsnap: the module has no memory")
	}
	size := mem.Size()
	all, ok := mem.Read(0, size)
	if !ok {
		return nil, errors.New("wasmsnap: cannot read the memory")
	}
	img := &Image{Pages: size / 65536}
	// By blocks of zeroBlock bytes, each compared with zeros as memcmp
	// does (a 50 MiB heap in milliseconds, where a byte at a time took
	// 100 ms): a run is the non-zero blocks in a row.
	var zero [zeroBlock]byte
	isZero := func(b []byte) bool { return bytes.Equal(b, zero[:len(b)]) }
	var spans [][2]int
	for i := 0; i < len(all); {
		if isZero(all[i:min(i+zeroBlock, len(all))]) {
			i += zeroBlock
			continue
		}
		start := i
		for i < len(all) && !isZero(all[i:min(i+zeroBlock, len(all))]) {
			i += zeroBlock
		}
		spans = append(spans, [2]int{start, min(i, len(all))})
	}
	// Into the heap, whose pages are recycled: a fork's capture, the
	// copy the request waits for. Into a memfd (a fault per new tmpfs
	// page) it took half again as much CPU; the caller makes it Shared
	// when instances are to map it (once, off the capture's path).
	for _, sp := range spans {
		img.Runs = append(img.Runs, Run{Off: uint32(sp[0]), Data: bytes.Clone(all[sp[0]:sp[1]])})
	}
	for i := range globals {
		g := mod.ExportedGlobal(GlobalExport(i))
		if g == nil {
			return nil, fmt.Errorf("wasmsnap: global %d is not exported: the module was not prepared (Prepare)", i)
		}
		img.Globals = append(img.Globals, g.Get())
	}
	return img, nil
}

// Restore writes the image into mod, a fresh instance of the module it
// was captured from: the memory grown to the image's size, the runs
// copied, the globals set. A grow the instance's memory limit refuses is
// an error.
func (img *Image) Restore(mod api.Module) error { return img.RestoreMapped(mod, nil) }

// A Mapper backs an instance's memory with a file's pages copy-on-write
// (wasmlimit.Allocator, with UseMapping, is one).
type Mapper interface {
	// Mapped reports whether the instance's memory can take a file.
	Mapped() bool
	// MapPrivate maps the first size bytes of the file fd over the
	// first size bytes of the memory, copy-on-write.
	MapPrivate(fd int, size uint64) error
}

// RestoreMapped is Restore into an instance whose memory m backs: when m
// can take the image's file (a Shared image), the image is mapped, not
// copied, and the instance holds only the pages it writes. Otherwise (m
// nil, or the image in the heap) it copies, as Restore does.
func (img *Image) RestoreMapped(mod api.Module, m Mapper) error {
	mem := mod.Memory()
	if mem == nil {
		return errors.New("wasmsnap: the module has no memory")
	}
	if have := mem.Size() / 65536; have < img.Pages {
		if _, ok := mem.Grow(img.Pages - have); !ok {
			return fmt.Errorf("wasmsnap: cannot grow the memory to the image's %d pages (%d MiB)", img.Pages, img.Pages/16)
		}
	}
	if img.mem != nil && m != nil && m.Mapped() {
		size := uint64(img.Pages) * 65536
		if err := m.MapPrivate(img.mem.fd(), size); err != nil {
			return err
		}
		// Past the image (a memory larger to begin with): zero, as a
		// fresh memory is, whatever the data segments wrote.
		if all, ok := mem.Read(0, mem.Size()); ok {
			clear(all[size:])
		}
		img.setGlobals(mod)
		return nil
	}
	// The instance's own data segments were copied at instantiation;
	// every byte they wrote that is zero in the image must be cleared.
	// The image's zero gaps are few and short next to its runs, so the
	// memory is cleared between runs, not as a whole.
	all, ok := mem.Read(0, mem.Size())
	if !ok {
		return errors.New("wasmsnap: cannot read the memory")
	}
	at := uint32(0)
	for _, r := range img.Runs {
		clear(all[at:r.Off])
		copy(all[r.Off:], r.Data)
		at = r.Off + uint32(len(r.Data))
	}
	clear(all[at:])
	img.setGlobals(mod)
	return nil
}

// setGlobals sets mod's mutable globals to the image's.
func (img *Image) setGlobals(mod api.Module) {
	for i, v := range img.Globals {
		g, ok := mod.ExportedGlobal(GlobalExport(i)).(api.MutableGlobal)
		if !ok {
			continue // an immutable global has its initial value already
		}
		g.Set(v)
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// imageMagic starts a marshalled image; its last byte is the format's
// version.
var imageMagic = []byte("moatimg\x03")

// maxKeyLen bounds an image's Key.
const maxKeyLen = 1024

// Marshal encodes the image for the disk, ending with a CRC-32C so that a
// torn file is found out.
func (img *Image) Marshal() []byte {
	b := append([]byte{}, imageMagic...)
	b = binary.AppendUvarint(b, uint64(len(img.Key)))
	b = append(b, img.Key...)
	b = binary.AppendUvarint(b, uint64(img.Pages))
	b = binary.AppendUvarint(b, uint64(len(img.Globals)))
	for _, g := range img.Globals {
		b = binary.AppendUvarint(b, g)
	}
	b = binary.AppendUvarint(b, uint64(len(img.Values)))
	for _, v := range img.Values {
		b = binary.AppendUvarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(img.Runs)))
	for _, r := range img.Runs {
		b = binary.AppendUvarint(b, uint64(r.Off))
		b = binary.AppendUvarint(b, uint64(len(r.Data)))
		b = append(b, r.Data...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// MarshaledSize is the length of what Marshal returns (and WriteTo
// writes), computed without encoding the image.
func (img *Image) MarshaledSize() int64 {
	uv := func(v uint64) int64 { return int64(len(binary.AppendUvarint(nil, v))) }
	n := int64(len(imageMagic)) + uv(uint64(len(img.Key))) + int64(len(img.Key)) + uv(uint64(img.Pages)) + uv(uint64(len(img.Globals)))
	for _, g := range img.Globals {
		n += uv(g)
	}
	n += uv(uint64(len(img.Values)))
	for _, v := range img.Values {
		n += uv(v)
	}
	n += uv(uint64(len(img.Runs)))
	for _, r := range img.Runs {
		n += uv(uint64(r.Off)) + uv(uint64(len(r.Data))) + int64(len(r.Data))
	}
	return n + 4
}

// WriteTo writes what Marshal returns to w without a copy of the image's
// memory in between (a paused session's image is streamed to its store:
// server/sessions/pause.go).
func (img *Image) WriteTo(w io.Writer) (int64, error) {
	crc := crc32.New(castagnoli)
	cw := &countWriter{w: io.MultiWriter(w, crc)}
	var b []byte
	flush := func() {
		if cw.err == nil && len(b) > 0 {
			_, cw.err = cw.Write(b)
		}
		b = b[:0]
	}
	b = append(b, imageMagic...)
	b = binary.AppendUvarint(b, uint64(len(img.Key)))
	b = append(b, img.Key...)
	b = binary.AppendUvarint(b, uint64(img.Pages))
	b = binary.AppendUvarint(b, uint64(len(img.Globals)))
	for _, g := range img.Globals {
		b = binary.AppendUvarint(b, g)
	}
	b = binary.AppendUvarint(b, uint64(len(img.Values)))
	for _, v := range img.Values {
		b = binary.AppendUvarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(img.Runs)))
	for _, r := range img.Runs {
		b = binary.AppendUvarint(b, uint64(r.Off))
		b = binary.AppendUvarint(b, uint64(len(r.Data)))
		flush()
		if cw.err == nil {
			_, cw.err = cw.Write(r.Data)
		}
	}
	flush()
	if cw.err == nil {
		_, cw.err = w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32()))
		if cw.err == nil {
			cw.n += 4
		}
	}
	return cw.n, cw.err
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Unmarshal decodes what Marshal wrote; damage is an error. The image's
// runs share b's memory: the caller does not change b after.
func Unmarshal(b []byte) (*Image, error) {
	bad := errors.New("wasmsnap: not an image, or a damaged one")
	if len(b) < len(imageMagic)+4 || !bytes.HasPrefix(b, imageMagic) {
		return nil, bad
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, bad
	}
	r := bytes.NewReader(body[len(imageMagic):])
	u := func() uint64 {
		v, err := binary.ReadUvarint(r)
		if err != nil {
			return 0
		}
		return v
	}
	img := &Image{}
	nk := u()
	if nk > maxKeyLen || nk > uint64(r.Len()) {
		return nil, bad
	}
	key := make([]byte, nk)
	_, _ = r.Read(key)
	img.Key = string(key)
	nr, ok := readCounts(img, u)
	if !ok {
		return nil, bad
	}
	end := uint64(img.Pages) * 65536
	at := uint64(0)
	for range nr {
		off, n := u(), u()
		if off < at || off+n > end || n > uint64(r.Len()) {
			return nil, bad
		}
		// The run's bytes are b's, not a copy: an image read back is
		// tens of megabytes, and b is not used after.
		pos := len(body) - r.Len()
		data := body[pos : pos+int(n) : pos+int(n)]
		_, _ = r.Seek(int64(n), io.SeekCurrent)
		img.Runs = append(img.Runs, Run{Off: uint32(off), Data: data})
		at = off + n
	}
	if r.Len() != 0 {
		return nil, bad
	}
	return img, nil
}

// Prepare returns wasm with each defined global exported as
// GlobalExport(i), and each function of entries (name → function index,
// FindEntry's answer) exported as EntryPrefix+name; and how many globals
// the module defines (Capture's argument). A module that already exports
// a name Prepare would add is refused.
func Prepare(wasm []byte, entries map[string]uint32) ([]byte, int, error) {
	m, err := parse(wasm)
	if err != nil {
		return nil, 0, err
	}
	var add []export
	for i := range m.globals {
		add = append(add, export{name: GlobalExport(i), kind: 3, index: m.importedGlobals + uint32(i)})
	}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		idx := entries[name]
		if idx < m.importedFuncs || idx-m.importedFuncs >= uint32(len(m.bodies)) {
			return nil, 0, fmt.Errorf("wasmsnap: entry %s is function %d, which the module does not define", name, idx)
		}
		add = append(add, export{name: EntryPrefix + name, kind: 0, index: idx})
	}
	out, err := m.withExports(add)
	return out, len(m.globals), err
}

// EntrySignature says whether fn takes params i32 values and returns an
// i32: a C function of params pointers or ints returning one.
func EntrySignature(fn api.FunctionDefinition, params int) bool {
	p, r := fn.ParamTypes(), fn.ResultTypes()
	if len(p) != params || len(r) != 1 || r[0] != api.ValueTypeI32 {
		return false
	}
	for _, t := range p {
		if t != api.ValueTypeI32 {
			return false
		}
	}
	return true
}

// readCounts reads what follows the key in an image's header, for
// Unmarshal and ReadImage alike: the memory's pages, the globals and the
// values, each count bounded before anything is appended, and the number
// of runs (bounded by each caller against what it holds). A page count
// past 32 bits is clamped before the conversion, so it fails the bound
// rather than wrapping into one.
func readCounts(img *Image, u func() uint64) (runs uint64, ok bool) {
	img.Pages = uint32(min(u(), 1<<17))
	if img.Pages > 65536 {
		return 0, false
	}
	ng := u()
	if ng > 1<<16 {
		return 0, false
	}
	for range ng {
		img.Globals = append(img.Globals, u())
	}
	nv := u()
	if nv > 1<<10 {
		return 0, false
	}
	for range nv {
		img.Values = append(img.Values, u())
	}
	return u(), true
}
