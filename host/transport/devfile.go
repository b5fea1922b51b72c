package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"testing/fstest"

	"github.com/moat-sandbox/moat/abi"
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

	// MaxDeviceLine bounds one request line (a kv value of 1 MiB is about
	// 1.4 MB in base64).
	MaxDeviceLine = 4 << 20
	// maxUnread bounds the replies a guest has not read yet: a guest that
	// writes requests and never reads gets EAGAIN rather than growing host
	// memory.
	maxUnread = 2 * MaxDeviceLine
)

// DeviceRequest is one line a guest writes to the device.
type DeviceRequest struct {
	Op  string      `json:"op"`
	Req abi.RawJSON `json:"req,omitempty"` // the op's request; absent means {}
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
type Device struct {
	ctx context.Context
	d   Dispatcher
}

// NewDevice returns the device of a run whose ops go to d.
func NewDevice(ctx context.Context, d Dispatcher) *Device {
	return &Device{ctx: ctx, d: d}
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
	var req DeviceRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return replyError(abi.Errorf(abi.CodeInvalidArgument,
			`device %s: a request is one JSON object per line, {"op":"kv.get","req":{...}}: %v`, DevicePath, err))
	}
	if req.Op == "" {
		return replyError(abi.Errorf(abi.CodeInvalidArgument, `device %s: the request has no "op"; write {"op":"kv.get","req":{...}}`, DevicePath))
	}
	body := []byte(req.Req)
	if len(body) == 0 || string(body) == "null" {
		body = []byte("{}")
	}
	resp, err := dev.d.Dispatch(dev.ctx, []byte(req.Op), body)
	if err != nil {
		return replyError(err)
	}
	return marshalReply(DeviceReply{Resp: resp})
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

// deviceFile is one open of DeviceName: a request/reply channel.
type deviceFile struct {
	experimentalsys.UnimplementedFile
	dev      *Device
	line     []byte // the request line being written
	overflow bool   // the current line passed MaxDeviceLine; drop it to its end
	unread   []byte // replies not read yet
	closed   bool
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
// lines. Each complete line is served before Write returns.
func (f *deviceFile) Write(p []byte) (int, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	if len(f.unread) > maxUnread {
		return 0, experimentalsys.EAGAIN
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !f.overflow {
			if len(f.line)+len(chunk) > MaxDeviceLine {
				f.overflow, f.line = true, nil
			} else {
				f.line = append(f.line, chunk...)
			}
		}
		if i < 0 {
			break
		}
		p = p[i+1:]
		switch line := bytes.TrimSpace(f.line); {
		case f.overflow:
			f.unread = append(f.unread, replyError(abi.Errorf(abi.CodeTooLarge, "device %s: a request line is limited to %d bytes", DevicePath, MaxDeviceLine))...)
		case len(line) > 0: // blank lines are ignored
			f.unread = append(f.unread, f.dev.Serve(line)...)
		}
		f.line, f.overflow = f.line[:0], false
	}
	return n, 0
}

// Read returns replies. With none waiting it returns 0 bytes (end of file):
// the guest read before it finished a request line.
func (f *deviceFile) Read(p []byte) (int, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	n := copy(p, f.unread)
	f.unread = f.unread[n:]
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
	f.closed, f.line, f.unread = true, nil, nil
	return 0
}
