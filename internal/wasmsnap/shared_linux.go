package wasmsnap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Shared images. An image's memory held in the Go heap is copied into
// every instance restored from it, whole: 26 MB for CPython's REPL on
// every new session context, 80 MB for a fork's copy of a context holding
// a 50 MiB heap. An image whose memory is a file can instead be mapped
// into an instance copy-on-write (RestoreMapped, with a memory that takes
// a file's pages: wasmlimit's mapped memories), so every instance of one
// image shares its pages and holds only those it writes.
//
// The file is a memfd, sealed once written (no write, no resize, by
// anyone: not the host either), so the pages thousands of instances share
// cannot change under them, and a mapping never reaches past its end.
// Its runs of non-zero bytes are written at their offsets; the rest is a
// hole (no memory). Image.Runs then lie in a read-only mapping of it, so
// Marshal, WriteTo and a plain Restore read it as they read the heap.

// sharedMem is an image's memory as a sealed memfd and a read-only view.
type sharedMem struct {
	f    *os.File
	view []byte // the file, mapped read-only
}

// newSharedMem makes a memfd of size bytes, lets fill write it, then
// seals it and maps it read-only.
func newSharedMem(size int, fill func(sw *sharedWriter) error) (*sharedMem, error) {
	sw, err := createShared(size)
	if err != nil {
		return nil, err
	}
	if err := fill(sw); err != nil {
		sw.abort()
		return nil, err
	}
	return sw.seal()
}

// sharedWriter is a memfd being written, before it is sealed. It is
// written with pwrite, not through a mapping: a fault per 4 KiB page of
// tmpfs made a 50 MiB capture take 100 ms; a write allocates the pages
// in the call.
type sharedWriter struct {
	f    *os.File
	size int
}

// createShared makes a memfd of size bytes (a hole: no memory yet). The
// memfd is made unexecutable (MFD_NOEXEC_SEAL, which moat's own seccomp
// filter asks of every memfd, where the kernel has it).
func createShared(size int) (*sharedWriter, error) {
	if size <= 0 || size%unix.Getpagesize() != 0 {
		return nil, fmt.Errorf("wasmsnap: a shared memory of %d bytes", size)
	}
	fd, err := unix.MemfdCreate("moat-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_NOEXEC_SEAL)
	if errors.Is(err, unix.EINVAL) { // a kernel before 6.3
		fd, err = unix.MemfdCreate("moat-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "moat-image")
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, err
	}
	return &sharedWriter{f: f, size: size}, nil
}

// writeAt writes p at off, within the file's size.
func (sw *sharedWriter) writeAt(p []byte, off int) error {
	if off < 0 || off+len(p) > sw.size {
		return errors.New("wasmsnap: a write past the shared memory")
	}
	_, err := sw.f.WriteAt(p, int64(off))
	return err
}

func (sw *sharedWriter) abort() { sw.f.Close() }

// seal ends the writing: the file sealed against every change, and
// mapped read-only.
func (sw *sharedWriter) seal() (*sharedMem, error) {
	fd := int(sw.f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		sw.f.Close()
		return nil, err
	}
	view, err := unix.Mmap(fd, 0, sw.size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		sw.f.Close()
		return nil, err
	}
	sh := &sharedMem{f: sw.f, view: view}
	runtime.AddCleanup(sh, func(s sharedMem) {
		_ = unix.Munmap(s.view)
		s.f.Close()
	}, *sh)
	return sh, nil
}

// fd is the memfd, for a mapping (Mapper.MapPrivate).
func (sh *sharedMem) fd() int { return int(sh.f.Fd()) }

// Shared returns img with its memory in a sealed memfd (a copy of img, or
// img itself when it is shared already), which RestoreMapped maps into an
// instance instead of copying it; img when no memfd can be had (Restore
// then copies, as before).
func (img *Image) Shared() *Image {
	if img.mem != nil || img.Pages == 0 {
		return img
	}
	sh, err := newSharedMem(int(img.Pages)*65536, func(sw *sharedWriter) error {
		for _, r := range img.Runs {
			if err := sw.writeAt(r.Data, int(r.Off)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return img
	}
	c := *img
	c.mem = sh
	c.Runs = viewRuns(sh.view, img.Runs)
	return &c
}

// viewRuns is runs with their bytes in view, at the same offsets.
func viewRuns(view []byte, runs []Run) []Run {
	out := make([]Run, len(runs))
	for i, r := range runs {
		end := int(r.Off) + len(r.Data)
		out[i] = Run{Off: r.Off, Data: view[r.Off:end:end]}
	}
	return out
}

// ReadImage reads an image Marshal (or WriteTo) wrote, n bytes of r, into
// a shared memory as it streams (RestoreMapped maps it; nothing of it is
// copied into the Go heap). Damage is an error, as Unmarshal's; with
// checked, its checksum is not computed: the caller checks the bytes
// itself (a paused session's image is checked whole, and nothing of it
// used before). Without a memfd, the image is read whole and Unmarshal'd.
func ReadImage(r io.Reader, n int64, checked bool) (*Image, error) {
	bad := errors.New("wasmsnap: not an image, or a damaged one")
	if n < int64(len(imageMagic))+4 || n > 1<<33 {
		return nil, bad
	}
	crc := crc32.New(castagnoli)
	body := io.Reader(io.LimitReader(r, n-4))
	if !checked {
		body = io.TeeReader(body, crc)
	}
	br := bufio.NewReaderSize(body, 64<<10)
	magic := make([]byte, len(imageMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != string(imageMagic) {
		return nil, bad
	}
	var ferr error
	u := func() uint64 {
		v, err := binary.ReadUvarint(br)
		if err != nil && ferr == nil {
			ferr = bad
		}
		return v
	}
	img := &Image{}
	nk := u()
	if nk > maxKeyLen {
		return nil, bad
	}
	key := make([]byte, nk)
	if _, err := io.ReadFull(br, key); err != nil {
		return nil, bad
	}
	img.Key = string(key)
	nr, ok := readCounts(img, u)
	if !ok {
		return nil, bad
	}
	if ferr != nil || nr > uint64(n) {
		return nil, bad
	}
	end := uint64(img.Pages) * 65536
	var spans [][2]int
	// fill reads the runs, each written by write at its offset.
	fill := func(write func(p []byte, off int) error) error {
		at := uint64(0)
		buf := make([]byte, 256<<10)
		for range nr {
			off, l := u(), u()
			if ferr != nil || off < at || off+l > end || l > uint64(n) {
				return bad
			}
			for done := uint64(0); done < l; {
				c := min(l-done, uint64(len(buf)))
				if _, err := io.ReadFull(br, buf[:c]); err != nil {
					return bad
				}
				if err := write(buf[:c], int(off+done)); err != nil {
					return err
				}
				done += c
			}
			spans = append(spans, [2]int{int(off), int(off + l)})
			at = off + l
		}
		return nil
	}
	var view []byte
	sw, err := createShared(int(end))
	if err != nil {
		// No memfd: the memory in the Go heap (Restore copies it).
		view = make([]byte, end)
		if err := fill(func(p []byte, off int) error { copy(view[off:], p); return nil }); err != nil {
			return nil, bad
		}
	} else {
		if err := fill(sw.writeAt); err != nil {
			sw.abort()
			if errors.Is(err, bad) {
				return nil, bad
			}
			return nil, fmt.Errorf("wasmsnap: write the image's memory: %w", err)
		}
		if img.mem, err = sw.seal(); err != nil {
			return nil, fmt.Errorf("wasmsnap: seal the image's memory: %w", err)
		}
		view = img.mem.view
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, bad // bytes past the runs
	}
	var sum [4]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return nil, bad
	}
	if !checked && binary.LittleEndian.Uint32(sum[:]) != crc.Sum32() {
		return nil, bad
	}
	img.Runs = make([]Run, len(spans))
	for i, s := range spans {
		img.Runs[i] = Run{Off: uint32(s[0]), Data: view[s[0]:s[1]:s[1]]}
	}
	return img, nil
}
