package sessions

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/languages/bash"
	"github.com/moat-sandbox/moat/policy"
)

// A session's commands are native jobs (host/native) under every kernel
// layer a /v1/runs bash job has — their own cgroup (memory, CPU, pids),
// pid, mount, net, ipc and uts namespaces, rlimits, Landlock, the child
// seccomp filter, an empty network namespace (no egress) — started as
// `bash -c CMD` with bash's utilities allowed to execute
// (languages/bash.Utilities) and nothing else. The workspace is bound in
// the job's own root at /home/user, read-write as a granted directory
// (no symlink, FIFO or socket made in it, nothing executed from it), and
// is its working directory and HOME: the path the session's code
// contexts see it at, so a path one prints the other opens.
//
// As root every command of a session runs as one uid leased for the
// session's life (native.LeaseUID), and the workspace is handed to it
// before each command starts: the commands share their files, and no job
// of another session or run has that uid while the session lives.
//
// A command's first process is a small bash init that forwards SIGTERM,
// SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the command: the first
// process of a pid namespace ignores every signal it has no handler for,
// so without it SIGTERM would not reach `bash -c "sleep 60"`. A command
// ended by a signal exits 128+n, as in a shell.

// Bounds of a session's commands.
const (
	// DefaultMaxCommands bounds the commands a session runs at once.
	DefaultMaxCommands = 16
	// DefaultCommandOutputBytes is what is kept of one command's output
	// (stdout and stderr together, the last bytes) for a late reader.
	DefaultCommandOutputBytes = 1 << 20
	// MaxCommandBytes bounds a command line.
	MaxCommandBytes = 64 << 10
	// MaxKeptCommands bounds the ended commands a session remembers (for
	// list and wait), beyond which the oldest are forgotten.
	MaxKeptCommands = 64
	// auditCommandBytes is how much of a command line the audit keeps.
	auditCommandBytes = 256
)

// commandInit is the first process of a command: it runs $1 with bash,
// stdin passed on (a background job's stdin is /dev/null otherwise),
// forwards the catchable signals to it, and exits with its status.
const commandInit = `exec 3<&0
/usr/bin/bash -c "$1" <&3 3<&- &
c=$!
exec 3<&- 0</dev/null
for s in TERM INT HUP QUIT USR1 USR2; do trap "kill -$s $c 2>/dev/null" $s; done
while :; do wait $c; r=$?; kill -0 $c 2>/dev/null || exit $r; done`

// CommandRequest is a command to start in a session.
type CommandRequest struct {
	// Cmd is run by bash -c.
	Cmd string
	// Env is added to the session's variables.
	Env map[string]string
	// Cwd is the working directory: beneath /home/user, or relative to it
	// ("" is /home/user).
	Cwd string
	// Stdin gives the command a pipe (Command.Write, CloseStdin); without
	// it stdin is empty.
	Stdin bool
	// Timeout ends the command; 0 is the session's end.
	Timeout time.Duration
	// Tag is the caller's name for the command (E2B's tag), listed.
	Tag string
}

// CommandInfo describes one of a session's commands.
type CommandInfo struct {
	PID       int       `json:"pid"`
	Cmd       string    `json:"cmd"`
	Cwd       string    `json:"cwd"`
	Tag       string    `json:"tag,omitempty"`
	Env       []string  `json:"env,omitempty"` // the names the request set
	StartedAt time.Time `json:"started_at"`
	Running   bool      `json:"running"`
	// ExitCode is set once the command ended: 128+n when a signal n ended
	// it (as a shell says), -1 when moat killed it (the session ended, its
	// timeout passed, SIGKILL).
	ExitCode *int   `json:"exit_code,omitempty"`
	Status   string `json:"status,omitempty"` // host/native's (ok, runtime-error, timeout, memory-limit, killed) or disk-quota
	Reason   string `json:"reason,omitempty"`
}

// Chunk is a piece of a command's output, in the order it was written.
type Chunk struct {
	Seq    int64  // 1, 2, ...: a reader resumes after the last it saw
	Stream string // stdout or stderr
	Data   []byte
}

// CommandResult is an ended command with the output kept of it.
type CommandResult struct {
	CommandInfo
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Encoding is "base64" when Stdout or Stderr is base64 (the output was
	// not UTF-8), else "".
	Encoding string `json:"encoding,omitempty"`
	// Truncated: the output passed what is kept of it (the first part is
	// gone).
	Truncated bool `json:"truncated,omitempty"`
}

// Command is a running (or ended) command of a session.
type Command struct {
	s    *Session
	proc *native.Process

	mu      sync.Mutex
	info    CommandInfo
	chunks  []Chunk // the last bytes, oldest first
	kept    int     // bytes in chunks
	max     int
	seq     int64
	dropped bool
	// quotaKill says why watchQuota killed the command.
	quotaKill string
	wake      chan struct{} // closed and replaced on every change
	done      chan struct{}
}

// commandTable is a session's commands.
type commandTable struct {
	mu       sync.Mutex
	next     int
	byPID    map[int]*Command
	lease    *native.UIDLease
	wg       sync.WaitGroup
	watching bool // watchQuota runs
}

// quotaEvery is how often the workspace is measured while commands run.
var quotaEvery = 250 * time.Millisecond

// watchQuota holds running commands to the workspace's quota: the
// workspace is bound into their root as the directory itself, which no
// filesystem quota bounds, so while any command runs it is measured
// (names and bytes, as the files API counts them) every quotaEvery, and
// when it grew past sessions.disk_quota_bytes or max_files every running
// command is killed and the kill audited. A command may overshoot by what
// it writes in one period (and one file by RLIMIT_FSIZE); what it wrote
// stays, for its owner to remove.
func (s *Session) watchQuota() {
	m := s.m
	t := &s.cmds
	measure := func() (int64, int64, bool) {
		r, err := os.OpenRoot(s.dir)
		if err != nil {
			return 0, 0, false // the session ended: its end kills the commands
		}
		defer r.Close()
		b, f := s.usage(r)
		return b, f, true
	}
	// Only growth past the quota kills: a command that removes files from
	// a workspace left over it (rm big) must be able to run.
	prevBytes, prevFiles, _ := measure()
	tick := time.NewTicker(quotaEvery)
	defer tick.Stop()
	for range tick.C {
		t.mu.Lock()
		var running []*Command
		for _, c := range t.byPID {
			if c.Info().Running {
				running = append(running, c)
			}
		}
		if len(running) == 0 {
			t.watching = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		// A running command is use: the session does not idle out under
		// it (its timeout still ends both).
		s.touch()
		bytes, files, ok := measure()
		grew := bytes > prevBytes || files > prevFiles
		prevBytes, prevFiles = bytes, files
		if !ok || !grew || bytes <= m.cfg.DiskQuotaBytes && files <= m.cfg.MaxFiles {
			continue
		}
		why := fmt.Sprintf("the workspace holds %d bytes in %d names, past its quota of %d bytes and %d names (sessions.disk_quota_bytes, max_files)", bytes, files, m.cfg.DiskQuotaBytes, m.cfg.MaxFiles)
		for _, c := range running {
			c.mu.Lock()
			c.quotaKill = why
			c.mu.Unlock()
			c.proc.Kill()
		}
		m.record(context.Background(), s, "", "command", audit.Deny, why+": its running commands were killed")
	}
}

// Write is the stream of one of a command's outputs.
type commandStream struct {
	c    *Command
	name string
}

func (w commandStream) Write(p []byte) (int, error) {
	w.c.append(w.name, p)
	return len(p), nil
}

func (c *Command) append(stream string, p []byte) {
	c.mu.Lock()
	c.seq++
	c.chunks = append(c.chunks, Chunk{Seq: c.seq, Stream: stream, Data: slices.Clone(p)})
	c.kept += len(p)
	for c.kept > c.max && len(c.chunks) > 0 {
		over := c.kept - c.max
		if first := &c.chunks[0]; len(first.Data) > over {
			first.Data = first.Data[over:]
			c.kept -= over
		} else {
			c.kept -= len(first.Data)
			c.chunks = c.chunks[1:]
		}
		c.dropped = true
	}
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
}

// PID is the command's number in its session.
func (c *Command) PID() int { return c.info.PID }

// Info describes the command now.
func (c *Command) Info() CommandInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// Done is closed when the command has ended and its processes and cgroup
// are gone.
func (c *Command) Done() <-chan struct{} { return c.done }

// Follow calls fn with every chunk after seq (0: every chunk kept), as
// produced, until the command ends (then it returns its result) or ctx
// is done. A reader slower than the ring loses the oldest chunks.
func (c *Command) Follow(ctx context.Context, after int64, fn func(Chunk) error) (*CommandInfo, error) {
	for {
		c.mu.Lock()
		var todo []Chunk
		for _, ch := range c.chunks {
			if ch.Seq > after {
				todo = append(todo, ch)
			}
		}
		wake := c.wake
		ended := c.info.ExitCode != nil
		info := c.info
		c.mu.Unlock()
		for _, ch := range todo {
			if err := fn(ch); err != nil {
				return nil, err
			}
			after = ch.Seq
		}
		if ended && len(todo) == 0 {
			return &info, nil
		}
		if len(todo) > 0 {
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Wait waits for the command to end (or ctx) and returns it with its
// output.
func (c *Command) Wait(ctx context.Context) (*CommandResult, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c.result(), nil
}

func (c *Command) result() *CommandResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out, errb []byte
	for _, ch := range c.chunks {
		if ch.Stream == "stdout" {
			out = append(out, ch.Data...)
		} else {
			errb = append(errb, ch.Data...)
		}
	}
	r := &CommandResult{CommandInfo: c.info, Truncated: c.dropped}
	r.Stdout, r.Stderr, r.Encoding = TextOrBase64(out, errb)
	return r
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// commandDefaults fills the commands' zero fields.
func (c *Config) commandDefaults() {
	if c.MaxCommands <= 0 {
		c.MaxCommands = DefaultMaxCommands
	}
	if c.CommandOutputBytes <= 0 {
		c.CommandOutputBytes = DefaultCommandOutputBytes
	}
}

// TextOrBase64 returns two outputs as text when both are UTF-8, else both
// as standard base64 and "base64".
func TextOrBase64(a, b []byte) (string, string, string) {
	if utf8.Valid(a) && utf8.Valid(b) {
		return string(a), string(b), ""
	}
	return b64(a), b64(b), "base64"
}

// Write writes to the command's stdin.
func (c *Command) Write(p []byte) error {
	if _, err := c.proc.Write(p); err != nil {
		return &Error{Code: "conflict", Session: c.s.id, Reason: fmt.Sprintf("command %d: its stdin is closed (it ended, or stdin was closed or never asked for: start it with stdin)", c.info.PID), Err: err}
	}
	c.s.touch()
	return nil
}

// CloseStdin closes the command's stdin.
func (c *Command) CloseStdin() error { return c.proc.CloseStdin() }

// Signals a caller may send, by name.
var Signals = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "SIGINT": syscall.SIGINT,
	"SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
}

// Signal sends the signal named (SIGTERM, SIGKILL, SIGINT, ...).
func (c *Command) Signal(ctx context.Context, correlation, name string) error {
	sig, ok := Signals[name]
	if !ok {
		return invalid("signal: %q; give one of SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2", name)
	}
	select {
	case <-c.done:
		return &Error{Code: "conflict", Session: c.s.id, Reason: fmt.Sprintf("command %d has ended", c.info.PID)}
	default:
	}
	_ = c.proc.Signal(sig)
	c.s.m.record(ctx, c.s, correlation, "signal", audit.Allow, fmt.Sprintf("command %d: %s", c.info.PID, name))
	return nil
}

// Commands lists the session's commands, by pid.
func (s *Session) Commands() []CommandInfo {
	s.cmds.mu.Lock()
	cs := slices.Collect(maps.Values(s.cmds.byPID))
	s.cmds.mu.Unlock()
	out := make([]CommandInfo, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Info())
	}
	slices.SortFunc(out, func(a, b CommandInfo) int { return a.PID - b.PID })
	return out
}

// Command returns the session's command pid, or not_found.
func (s *Session) Command(pid int) (*Command, error) {
	s.cmds.mu.Lock()
	c := s.cmds.byPID[pid]
	s.cmds.mu.Unlock()
	if c == nil {
		return nil, &Error{Code: "not_found", Session: s.id, Reason: fmt.Sprintf("no command %d in this session (list them: GET /v1/sessions/%s/commands)", pid, s.id)}
	}
	return c, nil
}

// commandSpec is the native job of req.
func (s *Session) commandSpec(req CommandRequest, uid uint32) (native.Spec, string, error) {
	m := s.m
	cwd, err := rel(req.Cwd, true)
	if err != nil {
		return native.Spec{}, "", err
	}
	if r, err := os.OpenRoot(s.dir); err != nil {
		return native.Spec{}, "", fmt.Errorf("session %s: open its workspace: %w", s.id, err)
	} else {
		fi, err := r.Stat(cwd)
		r.Close()
		if err != nil {
			return native.Spec{}, "", s.fsErr(cwd, err)
		}
		if !fi.IsDir() {
			return native.Spec{}, "", invalid("cwd: %s is not a directory", guestPath(cwd))
		}
	}
	src, err := filepath.EvalSymlinks(s.dir)
	if err != nil {
		return native.Spec{}, "", fmt.Errorf("session %s: its workspace: %w", s.id, err)
	}
	env := map[string]string{}
	maps.Copy(env, s.env)
	maps.Copy(env, req.Env)
	env["HOME"], env["PATH"], env["LANG"], env["TMPDIR"], env["USER"] = WorkspacePath, native.DefaultPath, "C.UTF-8", "/tmp", "user"
	env["PWD"] = guestPath(cwd)
	var envv []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envv = append(envv, k+"="+env[k])
	}
	lim := policy.DefaultExecLimits
	if h := m.cfg.HostFor(s.owner.Org); h != nil && h.Profile() != nil {
		lim = h.Profile().ExecMaxima()
	}
	timeout := req.Timeout
	if rest := time.Until(s.start.Add(m.cfg.MaxLifetime)); timeout <= 0 || timeout > rest {
		timeout = max(rest, time.Second)
	}
	exe := make([]string, 0, len(bash.Utilities))
	for _, u := range bash.Utilities {
		if p := filepath.Join("/usr/bin", u); fileExists(p) {
			exe = append(exe, p)
		}
	}
	spec := native.Spec{
		Command: []string{"/usr/bin/bash", "-c", commandInit, "moat-init", req.Cmd},
		Env:     envv, Timeout: timeout, LongLived: true,
		MemoryBytes: int64(lim.Memory), Pids: int64(m.cfg.CommandPids),
		DiskBytes: int64(lim.Scratch), DiskFiles: int64(lim.ScratchFiles),
		ExtraExec: exe,
		Mounts:    []native.Mount{{Source: src, Target: WorkspacePath, RW: true}},
		WorkDir:   guestPath(cwd),
		UID:       uid, GID: uid,
	}
	return spec, guestPath(cwd), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// StartCommand starts req in the session: `bash -c CMD` as a native job
// bound to the workspace. It runs until it ends, its timeout passes, it is
// killed, or the session ends (which kills it and waits for its cgroup to
// go).
func (s *Session) StartCommand(ctx context.Context, correlation string, req CommandRequest) (*Command, error) {
	m := s.m
	switch {
	case req.Cmd == "":
		return nil, invalid("cmd: empty; give a command line for bash -c")
	case len(req.Cmd) > MaxCommandBytes:
		return nil, &Error{Code: "too_large", Session: s.id, Reason: fmt.Sprintf("cmd: %d bytes, at most %d", len(req.Cmd), MaxCommandBytes)}
	case slices.Contains([]byte(req.Cmd), 0):
		return nil, invalid("cmd: it holds a NUL byte")
	case len(req.Tag) > MaxContextName:
		return nil, invalid("tag: %d bytes, at most %d", len(req.Tag), MaxContextName)
	case req.Timeout < 0:
		return nil, invalid("timeout: negative; give a positive duration, or none to run until the session ends")
	}
	if err := checkVars("envs", req.Env, true); err != nil {
		return nil, err
	}
	for k := range req.Env {
		if reservedEnv(k) || len(k) >= 3 && k[:3] == "LD_" || slices.Contains(native.LoaderEnv, k) {
			return nil, invalid("envs: %s is set by moat or refused (HOME, PWD, PATH, PYTHON*, MOAT_*, LD_*, the loader's); choose another name", k)
		}
	}
	t := &s.cmds
	t.mu.Lock()
	running := 0
	for _, c := range t.byPID {
		if c.Info().Running {
			running++
		}
	}
	if running >= m.cfg.MaxCommands {
		t.mu.Unlock()
		m.record(ctx, s, correlation, "command", audit.Deny, fmt.Sprintf("the session runs %d commands, the limit", running))
		return nil, &Error{Code: "resource_exhausted", Session: s.id, Reason: fmt.Sprintf("the session runs %d commands, the most it may (sessions.max_commands); wait for one or kill it", running)}
	}
	if t.lease == nil && os.Geteuid() == 0 {
		l, err := native.LeaseUID()
		if err != nil {
			t.mu.Unlock()
			return nil, fmt.Errorf("session %s: a uid for its commands: %w", s.id, err)
		}
		t.lease = l
	}
	var uid uint32
	if t.lease != nil {
		uid = t.lease.UID()
	}
	t.mu.Unlock()

	spec, cwd, err := s.commandSpec(req, uid)
	if err != nil {
		return nil, err
	}
	if uid != 0 {
		if err := native.HandOver(s.dir, uid, uid); err != nil {
			return nil, fmt.Errorf("session %s: hand its workspace to its commands' uid: %w", s.id, err)
		}
	}
	c := &Command{s: s, max: m.cfg.CommandOutputBytes, wake: make(chan struct{}), done: make(chan struct{})}
	c.info = CommandInfo{Cmd: req.Cmd, Cwd: cwd, Tag: req.Tag, StartedAt: time.Now().UTC(), Running: true, Env: slices.Sorted(maps.Keys(req.Env))}

	s.mu.Lock()
	ended := s.ended
	if !ended {
		t.wg.Add(1) // under s.mu: end waits for every command it did not see start
	}
	s.mu.Unlock()
	if ended {
		return nil, notFound(s.id)
	}
	proc, err := native.Start(spec, native.Stdio{Stdin: req.Stdin, Stdout: commandStream{c, "stdout"}, Stderr: commandStream{c, "stderr"}})
	if err != nil {
		t.wg.Done()
		m.record(ctx, s, correlation, "command", audit.Deny, fmt.Sprintf("%s: %v", truncate(req.Cmd, auditCommandBytes), err))
		return nil, fmt.Errorf("session %s: start the command: %w", s.id, err)
	}
	c.proc = proc
	t.mu.Lock()
	if t.byPID == nil {
		t.byPID = map[int]*Command{}
	}
	t.next++
	c.info.PID = t.next
	t.byPID[c.info.PID] = c
	t.forgetOld()
	if !t.watching {
		t.watching = true
		go s.watchQuota()
	}
	t.mu.Unlock()
	s.mu.Lock()
	ended = s.ended // end collects the commands after it sets ended: one of the two sees this one
	s.mu.Unlock()
	if ended {
		proc.Kill()
	}
	m.record(ctx, s, correlation, "command", audit.Allow, fmt.Sprintf("pid %d: %s", c.info.PID, truncate(req.Cmd, auditCommandBytes)))
	go func() {
		defer t.wg.Done()
		res, err := proc.Wait()
		code, status, reason := -1, "killed", ""
		if err != nil {
			reason = err.Error()
		} else {
			code, status, reason = res.ExitCode, string(res.Status), res.Reason
			if res.Status == native.StatusKilled && res.Signal != "" && res.ExitCode < 0 {
				reason = "killed: " + res.Signal
			}
		}
		c.mu.Lock()
		if c.quotaKill != "" {
			status, reason = "disk-quota", c.quotaKill
		}
		c.info.Running, c.info.ExitCode, c.info.Status, c.info.Reason = false, &code, status, reason
		close(c.wake)
		c.wake = make(chan struct{})
		c.mu.Unlock()
		close(c.done)
		m.record(context.WithoutCancel(ctx), s, correlation, "command-end", audit.Allow, fmt.Sprintf("pid %d: %s, exit %d", c.info.PID, status, code))
	}()
	return c, nil
}

// forgetOld drops the oldest ended commands past MaxKeptCommands. t.mu
// is held.
func (t *commandTable) forgetOld() {
	if len(t.byPID) <= MaxKeptCommands {
		return
	}
	for _, pid := range slices.Sorted(maps.Keys(t.byPID)) {
		if len(t.byPID) <= MaxKeptCommands {
			return
		}
		if c := t.byPID[pid]; !c.Info().Running {
			delete(t.byPID, pid)
		}
	}
}

// endCommands kills every command of an ending session and waits until
// each one's processes and cgroup are gone; then the uid goes back.
func (s *Session) endCommands() {
	t := &s.cmds
	t.mu.Lock()
	cs := slices.Collect(maps.Values(t.byPID))
	t.mu.Unlock()
	for _, c := range cs {
		if c.proc != nil {
			c.proc.Kill()
		}
	}
	t.wg.Wait()
	t.mu.Lock()
	if t.lease != nil {
		t.lease.Release()
		t.lease = nil
	}
	t.mu.Unlock()
}

// CgroupDirs are the cgroup directories of the command's job, for tests
// that check they are gone once it ended.
func (c *Command) CgroupDirs() []string { return c.proc.CgroupDirs() }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
