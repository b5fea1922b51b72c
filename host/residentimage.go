package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
)

// Resident images: the state of a resident script's instance, handed
// from one module to another.
//
// A module whose instances start from its own image captures that image
// from its own top level (snapshotImage). Two modules of the same
// interpreter, the same script and the same mounts (guest paths, order)
// have the same top level, so one's image serves the other's instances:
// server/sessions makes each code context a module of its own (its
// workspace is its file grant), and the image its top level made once
// starts every later context in milliseconds. The image holds nothing of
// a file grant (captureResident mounts stand-ins), but it holds the
// environment the capture saw: a caller hands an image only to modules
// loaded with that same environment, for the same organization.
//
// An image may also be captured from a live instance between two calls
// (CaptureResident): the guest, given a nonce by an action of its own,
// writes it on stdout with the numbers its entry needs and reads the
// clock, and the host copies the instance's memory and globals there, as
// at a snapshot's park (snapshot.go), then lets the call go on. That is
// a fork: new modules loaded with the image start where the instance
// was, variables and all, and are entered by Snapshot.Resume as nested
// calls on top of the captured frames. What the image cannot carry is
// what lives outside the instance's memory: its open WASI descriptors
// (the guest closes its op device before it parks, and refuses a park
// with other files open) and the host's side of the instance (its call
// channels and op device, made afresh for every instance).

// ResidentImage is a resident instance's state: its memory and globals,
// and the compiled module they belong to.
type ResidentImage struct {
	img *wasmsnap.Image
}

// Bytes is the size of the image's memory contents.
func (ri *ResidentImage) Bytes() int { return ri.img.Bytes() }

// Pages is the size of the memory the image needs, in 64 KiB pages.
func (ri *ResidentImage) Pages() uint32 { return ri.img.Pages }

// MarshalBinary encodes the image (wasmsnap's format: versioned, bounded
// and checksummed).
func (ri *ResidentImage) MarshalBinary() ([]byte, error) { return ri.img.Marshal(), nil }

// WriteTo writes what MarshalBinary returns to w, streamed: the image's
// memory is not copied again (a paused session's image goes to its store
// this way).
func (ri *ResidentImage) WriteTo(w io.Writer) (int64, error) { return ri.img.WriteTo(w) }

// MarshaledSize is the length of what MarshalBinary returns.
func (ri *ResidentImage) MarshaledSize() int64 { return ri.img.MarshaledSize() }

// maxResidentImageBytes bounds an image read back (UnmarshalResidentImage).
const maxResidentImageBytes = 4 << 30

// UnmarshalResidentImage decodes what MarshalBinary wrote (b is not
// kept): a damaged or truncated image is an error.
func UnmarshalResidentImage(b []byte) (*ResidentImage, error) {
	if int64(len(b)) > maxResidentImageBytes {
		return nil, fmt.Errorf("resident image: more than %d bytes", int64(maxResidentImageBytes))
	}
	img, err := wasmsnap.Unmarshal(b)
	if err != nil {
		return nil, err
	}
	return &ResidentImage{img: img.Shared()}, nil
}

// ReadResidentImage reads n bytes of r, what MarshalBinary or WriteTo
// wrote, as they stream into the sealed file its instances map
// (wasmsnap.ReadImage: nothing of the memory is copied into the heap). A
// damaged or truncated image is an error; with checked, the caller has
// a checksum of its own over these bytes and checks it before the image
// is used, so the image's own is not computed again.
func ReadResidentImage(r io.Reader, n int64, checked bool) (*ResidentImage, error) {
	if n > maxResidentImageBytes {
		return nil, fmt.Errorf("resident image: more than %d bytes", int64(maxResidentImageBytes))
	}
	img, err := wasmsnap.ReadImage(r, n, checked)
	if err != nil {
		return nil, err
	}
	return &ResidentImage{img: img}, nil
}

// fits checks that the image was made for s's compiled module.
func (ri *ResidentImage) fits(s *snapshotState) error {
	switch {
	case ri == nil || ri.img == nil:
		return errors.New("no image")
	case s.spec.Resume == "":
		return errors.New("the module's Snapshot has no Resume: its instances cannot be entered from an image")
	case ri.img.Key != s.code:
		return errors.New("the image is of another interpreter or build (its instances would not run from it)")
	case len(ri.img.Globals) != s.globals:
		return fmt.Errorf("the image has %d globals, the module %d", len(ri.img.Globals), s.globals)
	}
	return nil
}

// ResidentImage returns the image the module's resident instances start
// from, made from its top level on first use; nil when it has none (not a
// resident script with a Snapshot, or its capture failed).
func (m *Module) ResidentImage(ctx context.Context) *ResidentImage {
	s := m.code.snap
	if s == nil || s.spec.Resume == "" || m.code.script == nil || !m.code.script.Resident || (!s.ownImage() && !s.given) {
		return nil
	}
	var img *wasmsnap.Image
	if s.given {
		s.mu.Lock()
		img = s.img
		s.mu.Unlock()
	} else {
		img = m.snapshotImage(ctx, m.captureResident)
	}
	if img == nil {
		return nil
	}
	return &ResidentImage{img: keyed(img, s.code)}
}

// keyed is img named for the compiled module code (a copy when its Key
// is another's: the disk's images are keyed by their file).
func keyed(img *wasmsnap.Image, code string) *wasmsnap.Image {
	if img.Key == code {
		return img
	}
	c := *img
	c.Key = code
	return &c
}

// CaptureResident invokes req on the module's resident instance with a
// capture armed: the action must write token on stdout, then the numbers
// its Snapshot's EntryCall needs, a newline, and read the wall clock,
// with no op in flight and nothing but its op device's directory open
// beyond the preopens. The host copies the instance's memory and globals
// at that clock read and the call goes on. The caller runs no other call
// on the module meanwhile (one at a time is refused, not queued).
func (m *Module) CaptureResident(ctx context.Context, req Request, token string) (*ResidentImage, Result, error) {
	s := m.code.snap
	fail := func(format string, args ...any) (*ResidentImage, Result, error) {
		return nil, Result{}, &Error{Module: m.name, Action: req.Action, Code: abi.CodeInvalidArgument, Reason: fmt.Sprintf(format, args...)}
	}
	if s == nil || s.spec.Resume == "" || m.code.script == nil || !m.code.script.Resident {
		return fail("the module is not a resident script with a resumable snapshot: its instances cannot be captured")
	}
	if len(token) < 16 {
		return fail("the capture's token is %d bytes; give at least 16 random ones", len(token))
	}
	p := &residentPark{watch: &parkWatch{token: []byte(token)}}
	if !s.park.CompareAndSwap(nil, p) {
		return fail("another capture of the module is in progress")
	}
	defer s.park.Store(nil)
	began := time.Now()
	res, err := m.Invoke(ctx, req)
	p.mu.Lock()
	img, perr := p.img, p.err
	p.mu.Unlock()
	switch {
	case err != nil:
		return nil, res, err
	case perr != nil:
		return fail("the capture failed: %v", perr)
	case img == nil:
		return fail("the instance did not park (the action wrote no park line, or read no clock after it)")
	}
	img.Key = s.code
	m.host.log.Debug("resident instance captured", "module", m.name, "bytes", img.Bytes(), "took", time.Since(began))
	return &ResidentImage{img: img}, res, nil
}

// residentPark is a capture of a live instance (CaptureResident).
type residentPark struct {
	watch *parkWatch
	mu    sync.Mutex
	owner *resident // the instance that wrote the park line
	img   *wasmsnap.Image
	err   error
}

// parkTee is a capturable resident instance's stdout: a park line goes
// to the capture in progress, anything else to the instance's stream.
type parkTee struct {
	s    *snapshotState
	r    *resident
	next io.Writer
}

func (t *parkTee) Write(b []byte) (int, error) {
	if p := t.s.park.Load(); p != nil && bytes.Contains(b, p.watch.token) {
		p.watch.Write(b)
		p.mu.Lock()
		if p.owner == nil && p.watch.armed() {
			p.owner = t.r
		}
		p.mu.Unlock()
		return len(b), nil
	}
	return t.next.Write(b)
}

// parkClock is a capturable resident instance's wall clock: the read
// after its park line is where its state is copied.
func (inst *instance) parkClock() (int64, int32) {
	s := inst.m.code.snap
	if p := s.park.Load(); p != nil {
		p.mu.Lock()
		if p.owner == inst.res && p.img == nil && p.err == nil && inst.mod != nil {
			if p.img, p.err = wasmsnap.Capture(inst.mod, s.globals); p.err == nil {
				p.img.Values = p.watch.values()
			}
		}
		p.mu.Unlock()
	}
	t := time.Now()
	return t.Unix(), int32(t.Nanosecond())
}

// startGiven starts a resident instance from the image the module was
// loaded with: the only state it may have, so a failure is the start's
// (never a cold start, which would lose it).
func (m *Module) startGiven(ctx context.Context, lim Limits) (*instance, error) {
	s := m.code.snap
	s.mu.Lock()
	img := s.img
	s.mu.Unlock()
	if img == nil {
		return nil, &Error{Module: m.name, Code: abi.CodeUnavailable, Reason: "its resident image failed before, and an instance may start from nothing else"}
	}
	if img.Pages > lim.MemoryLimitPages {
		return nil, &Error{Module: m.name, Code: abi.CodeMemoryLimit, Reason: fmt.Sprintf("its resident image needs %d pages (%d MiB), more than the limit of %d", img.Pages, img.Pages/16, lim.MemoryLimitPages)}
	}
	return m.startResident(ctx, lim, img)
}
