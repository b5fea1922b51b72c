// Package execdaemon is the wire between a `moat exec` process and a warm
// moat of the same user: a daemon started on demand that keeps a host
// with the interpreters' machine code and snapshots in memory, so that a
// run costs what it costs in a host that is already up (a few ms), not
// the hundreds of ms a new process spends loading a 26 MB interpreter
// (docs/RATIONALE.md, "Where a whole `moat exec` process spends its
// time").
//
// The package knows nothing of languages or runs: a job is opaque bytes
// that the client encodes and the daemon's handler decodes. What it holds
// is who may talk to whom and how:
//
//   - the socket lives in a directory of the user's data directory made
//     0700 (Dir), and the daemon serves a connection only when the peer's
//     uid (SO_PEERCRED) is its own: another user cannot reach it, even if
//     the directory's mode were loosened;
//   - the first frame is a handshake naming the protocol, the binary
//     (path, size, modification time) and the configuration (data and
//     cache directory, the MOAT_ environment): a daemon of another binary
//     or configuration refuses, and one whose binary changed exits, so an
//     upgraded moat never asks a stale one;
//   - the client's stdin, stdout and stderr travel as file descriptors
//     (SCM_RIGHTS): the daemon writes output exactly where the client
//     would (a terminal stays a terminal) and opens no path the client
//     named;
//   - a cancel frame (the client's Ctrl-C or SIGTERM) or the connection's
//     end (the client killed) cancels the run's context: no run outlives
//     its client;
//   - the reply is the exit status the client exits with.
//
// Frames are a 4-byte big-endian length and JSON, each bounded
// (MaxFrame): the peer is the same user, but a frame is still input.
package execdaemon

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Protocol is the wire's version: a client and a daemon that differ in it
// do not talk (the binary's identity would differ too; this guards a
// rebuilt binary of the same size and time).
const Protocol = 1

// MaxFrame bounds one frame: a job carries the source (moat exec's
// --max-source, 1 MiB by default, at most what a user allows) and its
// arguments; stdin travels as a descriptor, not in a frame.
const MaxFrame = 64 << 20

// EnvOff turns the daemon off for a process: MOAT_NO_DAEMON=1 runs every
// `moat exec` in process and starts no daemon. Tests of the in-process
// path set it.
const EnvOff = "MOAT_NO_DAEMON"

// Off says whether the environment turns the daemon off.
func Off() bool {
	v := os.Getenv(EnvOff)
	return v != "" && v != "0"
}

// Identity is what a client and a daemon must share for one to serve the
// other: the same wire, the same binary, the same configuration.
type Identity struct {
	Protocol int    `json:"protocol"`
	Binary   string `json:"binary"` // absolute path
	Size     int64  `json:"size"`
	ModTime  int64  `json:"mod_time_ns"`
	Config   string `json:"config"` // ConfigKey of the settings
}

// SelfIdentity is the calling process's identity under config (the
// result of ConfigKey).
func SelfIdentity(config string) (Identity, error) {
	exe, err := os.Executable()
	if err != nil {
		return Identity{}, fmt.Errorf("execdaemon: own binary: %w", err)
	}
	fi, err := os.Stat(exe)
	if err != nil {
		return Identity{}, fmt.Errorf("execdaemon: own binary: %w", err)
	}
	return Identity{Protocol: Protocol, Binary: exe, Size: fi.Size(), ModTime: fi.ModTime().UnixNano(), Config: config}, nil
}

// Changed says whether the binary at id.Binary is no longer the one id
// names (an upgrade replaced it): a daemon that finds so exits.
func (id Identity) Changed() bool {
	fi, err := os.Stat(id.Binary)
	return err != nil || fi.Size() != id.Size || fi.ModTime().UnixNano() != id.ModTime
}

// ConfigKey is a short digest of the settings a run depends on (the
// caller names them: data and cache directories, flags) and of every
// MOAT_ variable of the environment but EnvOff: a daemon started under
// other settings would run the job elsewhere, so its key differs and
// the client does not use it.
func ConfigKey(settings ...string) string {
	h := sha256.New()
	for _, s := range settings {
		fmt.Fprintf(h, "%d:%s\n", len(s), s)
	}
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MOAT_") && !strings.HasPrefix(kv, EnvOff+"=") {
			env = append(env, kv)
		}
	}
	sort.Strings(env)
	for _, kv := range env {
		fmt.Fprintf(h, "%d:%s\n", len(kv), kv)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Dir is the directory of a data directory's daemon sockets, made 0700
// (and made so again when it exists with another mode): only its owner
// may reach a socket in it.
func Dir(dataDir string) (string, error) {
	d := filepath.Join(dataDir, "exec-daemon")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("execdaemon: %w", err)
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return "", fmt.Errorf("execdaemon: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("execdaemon: %s is not a directory", d)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("execdaemon: %s belongs to uid %d, not to this user", d, st.Uid)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(d, 0o700); err != nil {
			return "", fmt.Errorf("execdaemon: %w", err)
		}
	}
	return d, nil
}

// SocketPath is the socket of the daemon of id in dir (Dir): named by a
// digest of the whole identity, so that two binaries (an installed moat
// and a build of the repository) or two configurations each have their
// own daemon rather than turning each other away.
func SocketPath(dir string, id Identity) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%d\n%s\n%d\n%d\n%s", id.Protocol, id.Binary, id.Size, id.ModTime, id.Config))
	return filepath.Join(dir, hex.EncodeToString(h[:8])+".sock")
}

// sockaddr is path as a socket address. A path longer than sun_path
// (108 bytes; a test's temporary directory often is) is reached through
// the directory's descriptor, /proc/self/fd/N/NAME, with the returned
// func closing it.
func sockaddr(path string) (string, func(), error) {
	if len(path) < 100 {
		return path, func() {}, nil
	}
	// 0x200000 is O_PATH, which package syscall does not name.
	fd, err := syscall.Open(filepath.Dir(path), 0x200000|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(path)), func() { syscall.Close(fd) }, nil
}

// hello is the client's first frame; welcome the daemon's answer.
type hello struct {
	Identity Identity `json:"identity"`
}

type welcome struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

// request carries the job; its frame comes with the client's three
// descriptors.
type request struct {
	Job []byte `json:"job"`
}

// event is what flows after the request: the daemon's started and exit,
// the client's cancel.
type event struct {
	Started bool   `json:"started,omitempty"`
	Exit    *int   `json:"exit,omitempty"`
	Cancel  string `json:"cancel,omitempty"` // why: the client's cause, its signal
}

func writeFrame(c *net.UnixConn, v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("execdaemon: a frame of %d bytes is over %d", len(b), MaxFrame)
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	// The descriptors go with the frame's first byte; the rest follows.
	n, _, err := c.WriteMsgUnix(buf, oob, nil)
	for err == nil && n < len(buf) {
		var m int
		m, err = c.Write(buf[n:])
		n += m
	}
	return err
}

// readFrame reads one frame into v, and the descriptors that came with
// it (at most maxFDs; more are closed and refused).
func readFrame(c *net.UnixConn, v any, maxFDs int) ([]*os.File, error) {
	head := make([]byte, 4)
	oob := make([]byte, syscall.CmsgSpace(4*8))
	n, oobn, _, _, err := c.ReadMsgUnix(head, oob)
	if err != nil {
		return nil, err
	}
	files, ferr := parseRights(oob[:oobn], maxFDs)
	if ferr != nil {
		return nil, ferr
	}
	fail := func(err error) ([]*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	if n < 4 {
		if _, err := io.ReadFull(c, head[n:]); err != nil {
			return fail(err)
		}
	}
	size := binary.BigEndian.Uint32(head)
	if size > MaxFrame {
		return fail(fmt.Errorf("execdaemon: a frame of %d bytes is over %d", size, MaxFrame))
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fail(fmt.Errorf("execdaemon: a malformed frame: %w", err))
	}
	return files, nil
}

func parseRights(oob []byte, maxFDs int) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("execdaemon: control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	if len(fds) > maxFDs {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, fmt.Errorf("execdaemon: %d descriptors, at most %d", len(fds), maxFDs)
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		syscall.CloseOnExec(fd)
		files[i] = os.NewFile(uintptr(fd), fmt.Sprintf("client-fd-%d", i))
	}
	return files, nil
}

// ErrUnavailable wraps every reason a client could not hand its job to a
// daemon before the daemon started it: the caller runs the job in
// process instead, as if there were no daemon.
var ErrUnavailable = errors.New("no warm moat to run it")

// handshakeTimeout bounds a client's wait for a daemon's welcome: a
// daemon busy loading answers once its loads are done, a stuck one never.
const handshakeTimeout = 5 * time.Second
