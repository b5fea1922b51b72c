package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"testing/fstest"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// The device-file transport carries the op table to interpreters compiled
// to WASM (QuickJS, CPython, Ruby). Their binaries are fixed: they cannot
// import moat.call, but every one of them can open a file. So the host
// mounts a small virtual directory, DeviceDir, holding one character
// device, DeviceName. A guest opens DevicePath read-write and, for each op,
// writes one request line and reads one reply line, newline-delimited JSON:
//
//	guest → host  {"op":"kv.put","req":{"key":"count","value":"Mw=="}}
//	host → guest  {"resp":{}}
//	guest → host  {"op":"kv.get","req":{"key":"nope"}}
//	host → guest  {"resp":{"found":false}}
//	guest → host  {"op":"http.fetch","req":{...}}
//	host → guest  {"error":{"code":"denied","message":"op http.fetch: ..."}}
//	guest → host  {"op":"log.write","noreply":true,"req":{...}}
//	(no reply: DeviceRequest.NoReply)
//
// Op names and the JSON of requests and responses are those of package abi
// (the same bytes the import transport passes), and the op runs through the
// same Dispatcher, so grants, sensitive ops, audit and error codes are the
// import transport's. The op runs inside the guest's write(2): when the
// write returns, the reply is waiting to be read.
//
// Each open of the device is a channel of its own, with its own partial
// line and unread replies; a guest that keeps one descriptor open pays one
// write and one read per op. A line that is not a valid request gets an
// error reply (code invalid_argument, or too_large past MaxDeviceLine), not
// a dead channel: the protocol is text, and a guest's SDK should be able to
// report its own mistakes.
const (
	DeviceDir  = "/dev/moat"
	DeviceName = "ops"
	DevicePath = DeviceDir + "/" + DeviceName

	// DeviceEnv is the environment variable a run with the device gets,
	// holding DevicePath: an SDK that finds it unset can say the op table
	// was not enabled instead of failing on a missing file.
	DeviceEnv = "MOAT_OPS"

	// MaxDeviceLine bounds one request line: the request itself
	// (abi.MaxRequestBytes) and its envelope.
	MaxDeviceLine = abi.MaxRequestBytes + 1024
	// unreadWindow is how far a guest may run ahead of its replies: a
	// write serves its lines while less than this much is unread on the
	// descriptor, then returns short (EAGAIN when it served nothing). A
	// guest that pipelines requests still can; one that writes a million
	// and reads none cannot make the host answer them all at once.
	unreadWindow = 64 << 10
)

// DeviceRequest is one line a guest writes to the device.
type DeviceRequest struct {
	Op  string      `json:"op"`
	Req abi.RawJSON `json:"req,omitempty"` // the op's request; absent means {}
	// NoReply asks for no reply line: the op runs as any other (checks,
	// budget, audit), and what it answers, error included, is dropped.
	// For ops whose answer a guest has no use for (log.write): a reply
	// not read is a read and a decode the guest does not pay, which in
	// an interpreter on WASM is most of an op's cost. moat.next always
	// replies.
	NoReply bool `json:"noreply,omitempty"`
}

// DeviceReply is one line the host answers with: Resp on success (the op's
// response JSON), Error otherwise.
type DeviceReply struct {
	Resp  abi.RawJSON `json:"resp,omitempty"`
	Error *abi.Error  `json:"error,omitempty"`
}

// Device is the device-file transport of one run: the files it hands out
// dispatch ops through d with ctx, the run's context. Make one per run; it
// must not outlive the run's Dispatcher.
//
// Everything the device holds for the run (partial request lines, replies
// not read yet, over every open descriptor) is charged to the run's
// budget (budget.From(ctx); a run without one gets budget.DefaultLimits),
// as are the descriptors open at once: a guest that opens the device 200
// times, or writes a thousand requests and reads no reply, meets a
// refusal, never a growing host.
type Device struct {
	ctx      context.Context
	d        Dispatcher
	budget   *budget.Budget
	resident Resident
	runner   OpRunner
}

// Resident is the host's side of a resident interpreter (abi.OpNext): Next
// takes the previous call's result, or the guest's ready message, and
// blocks until the next call or the instance's end. InCall reports whether
// a call is being served; ops outside one are refused, since top-level
// code runs for no caller. Both run on the guest's goroutine, inside its
// write to the device.
type Resident interface {
	Next(req *abi.NextRequest) (abi.NextReply, error)
	InCall() bool
}

// SetResident makes the device serve abi.OpNext through r. Call it before
// the guest starts.
func (dev *Device) SetResident(r Resident) { dev.resident = r }

// An OpRunner runs the work of an op a resident instance asked for during a
// call (serve returns its reply line) and returns what serve returned,
// running it on another goroutine if it likes: a panic of serve must then
// be raised again on the caller's, where it ends the guest. See
// host/resident.go for why.
type OpRunner func(serve func() []byte) []byte

// SetOpRunner makes the device run the ops of calls (not abi.OpNext)
// through run. Call it before the guest starts.
func (dev *Device) SetOpRunner(run OpRunner) { dev.runner = run }

// SetContext sets the context the device's ops run with: a resident
// instance's Next sets each call's as it hands the call over. It must be
// called on the guest's goroutine (from Resident.Next), the one that
// serves the device; the device's own buffers stay charged to the budget
// it was made with.
func (dev *Device) SetContext(ctx context.Context) { dev.ctx = ctx }

// NewDevice returns the device of a run whose ops go to d.
func NewDevice(ctx context.Context, d Dispatcher) *Device {
	b := budget.From(ctx)
	if b == nil {
		b = budget.New(budget.Limits{}, nil)
		ctx = budget.With(ctx, b)
	}
	return &Device{ctx: ctx, d: d, budget: b}
}

// Mount adds the device directory to fsc at DeviceDir. It needs wazero's
// experimental sys.FS mounts, which every wazero.FSConfig offers.
func (dev *Device) Mount(fsc wazero.FSConfig) wazero.FSConfig {
	return fsc.(sysfs.FSConfig).WithSysFSMount(dev.FS(), DeviceDir)
}

// FS is the device directory as a wazero file system, for a caller that
// mounts it itself: it holds DeviceName, and each open of it is a channel.
func (dev *Device) FS() experimentalsys.FS { return deviceFS{dev: dev} }

// Serve answers one request line (without its newline) with one reply line
// (with its newline). It is the whole protocol; the files only frame it.
func (dev *Device) Serve(line []byte) []byte {
	if op, body, noReply, ok := parseRequest(line); ok {
		return dev.serve(op, body, noReply)
	}
	var req DeviceRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return replyError(abi.Errorf(abi.CodeInvalidArgument,
			`device %s: a request is one JSON object per line, {"op":"kv.get","req":{...}}: %s`, DevicePath, abi.DescribeDecodeError("", line, &req, err)))
	}
	if req.Op == "" {
		return replyError(abi.Errorf(abi.CodeInvalidArgument, `device %s: the request has no "op"; write {"op":"kv.get","req":{...}}`, DevicePath))
	}
	return dev.serve(req.Op, []byte(req.Req), req.NoReply)
}

func (dev *Device) serve(op string, body []byte, noReply bool) []byte {
	if op == abi.OpNext {
		return dev.next(body)
	}
	if dev.runner != nil && dev.resident != nil && dev.resident.InCall() {
		return dev.runner(func() []byte { return dev.serveOp(op, body, noReply) })
	}
	return dev.serveOp(op, body, noReply)
}

func (dev *Device) serveOp(op string, body []byte, noReply bool) []byte {
	if noReply {
		_ = dev.dispatch(op, body)
		return nil
	}
	return dev.dispatch(op, body)
}

// parseRequest reads the two shapes of request line the SDKs write,
// {"op":"NAME","req":REQ} and {"op":"NAME","noreply":true,"req":REQ},
// without encoding/json's reflection; ok is false for any other line,
// which Serve then decodes as JSON, so what a line means does not depend
// on the path it takes. An interpreter's request is a handful of these
// lines, and between its calls the host's code is out of the caches:
// the smaller path is measurably cheaper there.
func parseRequest(line []byte) (op string, body []byte, noReply, ok bool) {
	const head, req, noreplyReq = `{"op":"`, `","req":`, `","noreply":true,"req":`
	if len(line) < len(head)+len(req)+2 || string(line[:len(head)]) != head || line[len(line)-1] != '}' {
		return "", nil, false, false
	}
	rest := line[len(head) : len(line)-1]
	i := bytes.IndexByte(rest, '"')
	if i <= 0 || !plainJSON(rest[:i]) {
		return "", nil, false, false // no name, or one with escapes
	}
	op, rest = string(rest[:i]), rest[i:]
	switch {
	case bytes.HasPrefix(rest, []byte(req)):
		body = rest[len(req):]
	case bytes.HasPrefix(rest, []byte(noreplyReq)):
		body, noReply = rest[len(noreplyReq):], true
	default:
		return "", nil, false, false
	}
	if !json.Valid(body) {
		return "", nil, false, false
	}
	return op, body, noReply, true
}

// dispatch runs one op and returns its reply line.
func (dev *Device) dispatch(op string, body []byte) []byte {
	if dev.resident != nil && !dev.resident.InCall() {
		return replyError(abi.Errorf(abi.CodeUnavailable, "op %s: ops can be called only while an action runs (inside a handler registered with moat.action); top-level code runs once, when the instance starts, for no caller", op))
	}
	if len(body) == 0 || string(body) == "null" {
		body = []byte("{}")
	}
	if err := Admit(dev.ctx, []byte(op), body); err != nil {
		return replyError(err)
	}
	resp, err := dev.d.Dispatch(dev.ctx, []byte(op), body)
	if err != nil {
		return replyError(err)
	}
	return marshalReply(DeviceReply{Resp: resp})
}

// next serves abi.OpNext: the previous call's result in, the next call out.
func (dev *Device) next(body []byte) []byte {
	if dev.resident == nil {
		return replyError(abi.Errorf(abi.CodeUnavailable, "%s: this run serves the one action in $MOAT_ACTION; its instance is not resident", abi.OpNext))
	}
	req, ok := decodeNextRequest(body)
	if !ok && len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return replyError(abi.Errorf(abi.CodeInvalidArgument, `%s: the request is {"ready":{"actions":[...]}}, {"output":"BASE64"}, {"output_text":"TEXT"} or {"error":{"code":...,"message":...}}: %s`, abi.OpNext, abi.DescribeDecodeError("", body, &req, err)))
		}
	}
	reply, err := dev.resident.Next(&req)
	if err != nil {
		return replyError(err)
	}
	if line, ok := appendNextReply(append(make([]byte, 0, 64+len(reply.Text)+len(reply.Input)*4/3), `{"resp":`...), reply); ok {
		return append(line, "}\n"...)
	}
	b, err := json.Marshal(reply)
	if err != nil {
		return replyError(abi.Errorf(abi.CodeInternal, "%s: %v", abi.OpNext, err))
	}
	return marshalReply(DeviceReply{Resp: b})
}

func replyError(err error) []byte {
	e := asABIError(err)
	var f *FaultError
	if errors.As(err, &f) {
		e = &abi.Error{Code: abi.CodeGuestFault, Message: f.Error()}
	}
	return marshalReply(DeviceReply{Error: e})
}

func marshalReply(r DeviceReply) []byte {
	if len(r.Resp) == 0 && r.Error == nil {
		r.Resp = abi.RawJSON("{}")
	}
	if r.Error == nil && json.Valid(r.Resp) && bytes.IndexByte(r.Resp, '\n') < 0 {
		// The common case, without reflection: the op's response as it
		// is (valid JSON on one line, as json.Marshal would check).
		b := make([]byte, 0, len(r.Resp)+10)
		b = append(append(append(b, `{"resp":`...), r.Resp...), "}\n"...)
		return b
	}
	b, err := json.Marshal(r)
	if err != nil {
		// Resp came from an op's encoder; if it is not JSON, that is a host bug.
		b, _ = json.Marshal(DeviceReply{Error: abi.Errorf(abi.CodeInternal, "the op's reply is not valid JSON: %v", err)})
	}
	return append(b, '\n')
}

// deviceFS is the directory mounted at DeviceDir: it holds DeviceName and
// nothing else, and nothing in it can be created, renamed or removed.
type deviceFS struct {
	experimentalsys.UnimplementedFS
	dev *Device
}

// deviceDir lists the directory. Only listing and stat go through it;
// opening DeviceName hands out a deviceFile.
var deviceDir = &sysfs.AdaptFS{FS: fstest.MapFS{DeviceName: &fstest.MapFile{Mode: deviceMode}}}

const (
	dirMode    = fs.ModeDir | 0o555
	deviceMode = fs.ModeDevice | fs.ModeCharDevice | 0o666
	deviceIno  = 2
)

func (f deviceFS) OpenFile(path string, flag experimentalsys.Oflag, _ fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	switch path {
	case "", ".":
		if flag&(experimentalsys.O_RDWR|experimentalsys.O_WRONLY|experimentalsys.O_CREAT|experimentalsys.O_TRUNC) != 0 {
			return nil, experimentalsys.EISDIR
		}
		return deviceDir.OpenFile(".", flag, 0)
	case DeviceName:
		switch {
		case flag&experimentalsys.O_DIRECTORY != 0:
			return nil, experimentalsys.ENOTDIR
		case flag&experimentalsys.O_CREAT != 0 && flag&experimentalsys.O_EXCL != 0:
			return nil, experimentalsys.EEXIST
		}
		if err := f.dev.budget.Open(DevicePath); err != nil {
			// EMFILE is not among wazero's errnos; EAGAIN is what a
			// guest can retry after closing a descriptor.
			return nil, experimentalsys.EAGAIN
		}
		return &deviceFile{dev: f.dev}, 0
	}
	if flag&experimentalsys.O_CREAT != 0 {
		return nil, experimentalsys.EROFS
	}
	return nil, experimentalsys.ENOENT
}

func (f deviceFS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	switch path {
	case "", ".":
		return sys.Stat_t{Mode: dirMode, Ino: 1, Nlink: 2}, 0
	case DeviceName:
		return sys.Stat_t{Mode: deviceMode, Ino: deviceIno, Nlink: 1}, 0
	}
	return sys.Stat_t{}, experimentalsys.ENOENT
}

func (f deviceFS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) { return f.Stat(path) }

func (deviceFS) Mkdir(string, fs.FileMode) experimentalsys.Errno    { return experimentalsys.EROFS }
func (deviceFS) Chmod(string, fs.FileMode) experimentalsys.Errno    { return experimentalsys.EROFS }
func (deviceFS) Rename(string, string) experimentalsys.Errno        { return experimentalsys.EROFS }
func (deviceFS) Rmdir(string) experimentalsys.Errno                 { return experimentalsys.EROFS }
func (deviceFS) Unlink(string) experimentalsys.Errno                { return experimentalsys.EROFS }
func (deviceFS) Link(string, string) experimentalsys.Errno          { return experimentalsys.EROFS }
func (deviceFS) Symlink(string, string) experimentalsys.Errno       { return experimentalsys.EROFS }
func (deviceFS) Utimens(string, int64, int64) experimentalsys.Errno { return experimentalsys.EROFS }

// deviceFile is one open of DeviceName: a request/reply channel. Its
// buffers are charged to the run's budget: line by its capacity, unread
// by the bytes of the replies it queues.
type deviceFile struct {
	experimentalsys.UnimplementedFile
	dev      *Device
	line     []byte     // the request line being written
	overflow *abi.Error // why the current line is dropped to its end, or nil
	unread   []reply    // replies not read yet, each exactly its size
	pending  int        // bytes in unread
	closed   bool
}

// reply is one queued reply and whether its bytes are charged to the
// budget.
type reply struct {
	b       []byte
	charged bool
}

func (f *deviceFile) Ino() (sys.Inode, experimentalsys.Errno) { return deviceIno, 0 }
func (f *deviceFile) IsDir() (bool, experimentalsys.Errno)    { return false, 0 }
func (f *deviceFile) IsAppend() bool                          { return false }
func (f *deviceFile) SetAppend(bool) experimentalsys.Errno    { return 0 }
func (f *deviceFile) Stat() (sys.Stat_t, experimentalsys.Errno) {
	return sys.Stat_t{Mode: deviceMode, Ino: deviceIno, Nlink: 1}, 0
}

// Write takes request bytes, in any framing: a line may arrive in pieces
// (a buffered writer flushing mid-line) and one write may carry several
// lines. Each complete line is served before Write returns, while the
// descriptor has less than unreadWindow of replies waiting; past that
// Write returns the bytes it consumed (a short write), or EAGAIN when it
// consumed none, and the guest must read. A line past MaxDeviceLine, or one
// the run's budget cannot hold, is dropped to its end and answered with
// too_large or resource_exhausted. Write stops when the run's context ends.
func (f *deviceFile) Write(p []byte) (int, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	n := 0
	for len(p) > 0 {
		if f.pending >= unreadWindow {
			break
		}
		if f.dev.ctx.Err() != nil {
			if n == 0 {
				return 0, experimentalsys.EIO
			}
			break
		}
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if f.overflow == nil {
			f.overflow = f.take(chunk)
		}
		if i < 0 {
			n += len(p)
			break
		}
		n += i + 1
		p = p[i+1:]
		switch line := bytes.TrimSpace(f.line); {
		case f.overflow != nil:
			f.queue(replyError(f.overflow))
		case len(line) > 0: // blank lines are ignored
			if reply := f.dev.Serve(line); reply != nil {
				f.queue(reply)
			}
		}
		f.resetLine()
	}
	if n == 0 && len(p) > 0 {
		return 0, experimentalsys.EAGAIN
	}
	return n, 0
}

// take appends chunk to the line being written, growing its buffer within
// the budget; it returns why the line must be dropped instead.
func (f *deviceFile) take(chunk []byte) *abi.Error {
	need := len(f.line) + len(chunk)
	if need > MaxDeviceLine {
		f.resetLine()
		return abi.Errorf(abi.CodeTooLarge, "device %s: a request line is limited to %d bytes", DevicePath, MaxDeviceLine)
	}
	if need > cap(f.line) {
		newCap := min(max(need, 2*cap(f.line), 512), MaxDeviceLine)
		if err := f.dev.budget.Hold(int64(newCap-cap(f.line)), "device "+DevicePath+": a request line"); err != nil {
			f.resetLine()
			return asABIError(err)
		}
		grown := make([]byte, len(f.line), newCap)
		copy(grown, f.line)
		f.line = grown
	}
	f.line = append(f.line, chunk...)
	return nil
}

// resetLine starts a new line, keeping a small buffer for the next one
// and returning a large one to the budget.
func (f *deviceFile) resetLine() {
	f.overflow = nil
	if cap(f.line) > 4<<10 {
		f.dev.budget.Release(int64(cap(f.line)))
		f.line = nil
		return
	}
	f.line = f.line[:0]
}

// queue adds a reply for the guest to read. A reply the budget cannot hold
// is replaced by a short resource_exhausted reply, which is not charged:
// at most one per line, and lines stop being served past unreadWindow.
func (f *deviceFile) queue(b []byte) {
	r := reply{b: b, charged: true}
	if err := f.dev.budget.Hold(int64(len(b)), "device "+DevicePath+": a reply not read yet"); err != nil {
		r = reply{b: replyError(err)}
	}
	f.pending += len(r.b)
	f.unread = append(f.unread, r)
}

// Read returns replies. With none waiting it returns 0 bytes (end of file):
// the guest read before it finished a request line.
func (f *deviceFile) Read(p []byte) (int, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	n := 0
	for n < len(p) && len(f.unread) > 0 {
		head := &f.unread[0]
		c := copy(p[n:], head.b)
		n += c
		f.pending -= c
		if head.charged {
			f.dev.budget.Release(int64(c))
		}
		if c < len(head.b) {
			head.b = head.b[c:]
			break
		}
		f.unread[0] = reply{}
		f.unread = f.unread[1:]
	}
	if len(f.unread) == 0 {
		f.unread = nil
	}
	return n, 0
}

// The device is a stream: Seek, Pread and Pwrite are UnimplementedFile's
// (ENOSYS), as on a pipe.
func (f *deviceFile) Truncate(int64) experimentalsys.Errno       { return experimentalsys.EINVAL }
func (f *deviceFile) Sync() experimentalsys.Errno                { return 0 }
func (f *deviceFile) Datasync() experimentalsys.Errno            { return 0 }
func (f *deviceFile) Utimens(int64, int64) experimentalsys.Errno { return experimentalsys.EPERM }
func (f *deviceFile) Readdir(int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	return nil, experimentalsys.ENOTDIR
}

func (f *deviceFile) Close() experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	for _, r := range f.unread {
		if r.charged {
			f.dev.budget.Release(int64(len(r.b)))
		}
	}
	f.dev.budget.Release(int64(cap(f.line)))
	f.dev.budget.Close()
	f.closed, f.line, f.unread = true, nil, nil
	return 0
}
