package sessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/policy"
)

// Fork: new sessions with the same interpreter memory, variables and
// files as one that lives.
//
// A context is captured between two runs (no run in flight: the
// context's lock is held), by its own REPL: repl.py's park action checks
// that nothing the image cannot carry is open (a file the code opened:
// its descriptor is the instance's, and a copy's instance has none), then
// writes a token on stdout and reads the clock, where the host copies the
// instance's memory and globals (host.Module.CaptureResident) and lets
// the call go on. A copy's context is a new module, loaded on its first
// run with the image (host.LoadOptions.ResidentImage) and entered by
// moat._resume(), which opens its own op device and serves. What is not
// in the image is made again for the copy: the WASI descriptors (its
// preopens are the same directories at the same guest paths, its own
// workspace among them), the host's side of the instance (call channels,
// op device), the random module's seed. Ruby's and JavaScript's contexts
// are captured the same way (repl.rb's and repl.js's park; a Ruby copy
// entered by the reactor's eval of Moat.resume_copy, host/resumer.go; a
// JavaScript one by qjs's eval_buf, languages/javascript/capture.go). A
// context whose interpreter has no such capture (see docs/RATIONALE.md,
// "Which contexts fork and pause") cannot be captured, and a fork or a
// pause of a session holding one is refused, naming it: never a copy
// that silently lacks it.
//
// Each capture nests: the copy's interpreter is entered on top of the
// captured frames, so a copy of a copy (or a session paused, resumed, run
// and paused again) is one level deeper, ~10 KiB of the interpreter's
// shadow stack each (measured: a context ran out of it after ~60 pause,
// resume and run cycles). MaxCaptureDepth bounds it at half that. qjs's
// shadow stack is 64 KiB in all (a fresh context recurses ~200 deep), and
// each generation that ran takes some of it (measured: ~125 deep left
// after 8, 25 after 20), so a JavaScript context's bound is
// MaxCaptureDepthJavaScript.

// Bounds of a fork.
const (
	MaxForkCount              = 100
	MaxCaptureDepth           = 32
	MaxCaptureDepthJavaScript = 8
)

// maxDepth is the most generations cc's state may go through.
func (cc *codeContext) maxDepth() int {
	if cc.info.Language == "javascript" {
		return MaxCaptureDepthJavaScript
	}
	return MaxCaptureDepth
}

// pendingContext is a copy's context not run yet.
type pendingContext struct {
	info  ContextInfo
	img   *host.ResidentImage
	depth int
}

// sessionState is a session captured at one point: its contexts' images
// (the workspace is copied under the same locks).
type sessionState struct {
	contexts map[string]*pendingContext
}

// capture captures every context of s, holding each context's lock until
// release is called (the workspace is copied meanwhile, so files and
// memory are of one moment). step names the cause in errors.
func (s *Session) capture(ctx context.Context, correlation, step string) (*sessionState, func(), error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, nil, notFound(s.id)
	}
	names := make([]string, 0, len(s.contexts))
	for n := range s.contexts {
		names = append(names, n)
	}
	slices.Sort(names) // one order: two captures never wait on each other crosswise
	ccs := make([]*codeContext, len(names))
	for i, n := range names {
		ccs[i] = s.contexts[n]
	}
	st := &sessionState{contexts: map[string]*pendingContext{}}
	for n, p := range s.pending { // not run since the last capture: the same image
		st.contexts[n] = p
	}
	s.mu.Unlock()
	var locked []*codeContext
	release := func() {
		for _, cc := range locked {
			cc.mu.Unlock()
		}
	}
	for _, cc := range ccs {
		cc.mu.Lock()
		locked = append(locked, cc)
		name := cc.info.Name
		if !cc.snap {
			release()
			return nil, nil, &Error{Code: "conflict", Session: s.id, Reason: fmt.Sprintf("%s: context %s runs %s, whose interpreter cannot be captured (see docs/RATIONALE.md, \"Which contexts fork and pause\"): end that context first (E2B: removeCodeContext), then %s; or start a new session", step, name, cc.info.Language, step)}
		}
		if cc.depth >= cc.maxDepth() {
			release()
			return nil, nil, &Error{Code: "conflict", Session: s.id, Reason: fmt.Sprintf("context %s is a copy of a copy %d times over, the most there may be (each nests its interpreter once more); fork an earlier session", name, cc.depth)}
		}
		tok := make([]byte, 16)
		_, _ = rand.Read(tok)
		token := hex.EncodeToString(tok)
		img, _, err := cc.mod.CaptureResident(ctx, host.Request{Action: "park", Input: []byte(token), Principal: s.owner, CorrelationID: correlation,
			Limits: host.Limits{Timeout: 30 * time.Second}}, token)
		if err != nil {
			release()
			return nil, nil, &Error{Code: "conflict", Session: s.id, Reason: fmt.Sprintf("%s: context %s could not be captured: %s", step, name, firstLine(err)), Err: err}
		}
		info := cc.info
		info.Runs = int(cc.runs.Load())
		st.contexts[name] = &pendingContext{info: info, img: img, depth: cc.depth + 1}
	}
	return st, release, nil
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// Fork makes count new sessions of p's session id, each with its
// variables and files as they are now (see the top of this file), all or
// none: the organization's limit must have room for every one.
func (m *Manager) Fork(ctx context.Context, p policy.Principal, id, correlation string, count int) ([]Info, error) {
	if count < 1 || count > MaxForkCount {
		return nil, invalid("count: %d; give 1 to %d", count, MaxForkCount)
	}
	s, err := m.Get(p, id)
	if err != nil {
		return nil, err
	}
	if err := m.reserve(ctx, s, correlation, count); err != nil {
		return nil, err
	}
	defer m.unreserve(s.owner.Org, count)
	began := time.Now()
	st, release, err := s.capture(ctx, correlation, "fork")
	if err != nil {
		m.record(ctx, s, correlation, "fork", audit.Deny, err.Error())
		return nil, err
	}
	now := time.Now().UTC()
	s.mu.Lock()
	ttl := s.expires.Sub(now)
	s.mu.Unlock()
	var made []*Session
	for range count {
		var c *Session
		if c, err = m.newSession(s.owner, s.env, s.meta, now, max(ttl, time.Second)); err == nil {
			if err = copyTree(s.dir, c.dir, m.cfg.DiskQuotaBytes, m.cfg.MaxFiles); err == nil {
				c.pending = copyPending(st.contexts)
				made = append(made, c)
				continue
			}
			_ = os.RemoveAll(c.dir)
		}
		break
	}
	release()
	if err != nil {
		for _, c := range made {
			_ = os.RemoveAll(c.dir)
		}
		m.record(ctx, s, correlation, "fork", audit.Deny, err.Error())
		return nil, fmt.Errorf("session %s: fork: %w", s.id, err)
	}
	out := make([]Info, 0, count)
	ids := make([]string, 0, count)
	m.mu.Lock()
	for _, c := range made {
		m.live[c.id] = c
	}
	m.mu.Unlock()
	for _, c := range made {
		m.record(ctx, c, correlation, "fork", audit.Allow, "forked from "+s.id)
		in := c.info()
		if m.cfg.OnCreate != nil {
			m.cfg.OnCreate(ctx, *in)
		}
		out = append(out, *in)
		ids = append(ids, c.id)
	}
	m.record(ctx, s, correlation, "fork", audit.Allow, fmt.Sprintf("into %s in %v", strings.Join(ids, " "), time.Since(began).Round(time.Microsecond)))
	return out, nil
}

// copyPending copies a session state's contexts for one copy.
func copyPending(in map[string]*pendingContext) map[string]*pendingContext {
	out := make(map[string]*pendingContext, len(in))
	for k, v := range in {
		c := *v
		out[k] = &c
	}
	return out
}

// reserve holds n places of the organization's live-session limit for
// sessions about to be made (a fork's, a resume's); unreserve gives them
// back once they are live or abandoned.
func (m *Manager) reserve(ctx context.Context, s *Session, correlation string, n int) error {
	m.mu.Lock()
	have := m.reserved[s.owner.Org]
	for _, o := range m.live {
		if o.owner.Org == s.owner.Org {
			have++
		}
	}
	if have+n > m.cfg.MaxPerOrg {
		m.mu.Unlock()
		m.record(ctx, s, correlation, "fork", audit.Deny, fmt.Sprintf("the organization has %d live sessions; %d more pass the limit (sessions.max_per_org)", have, n))
		return &Error{Code: "resource_exhausted", Session: s.id, Reason: fmt.Sprintf("your organization has %d live sessions, and %d more would pass the most it may have, %d (sessions.max_per_org); ask for fewer, or end some", have, n, m.cfg.MaxPerOrg)}
	}
	if m.reserved == nil {
		m.reserved = map[string]int{}
	}
	m.reserved[s.owner.Org] += n
	m.mu.Unlock()
	return nil
}

func (m *Manager) unreserve(org string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reserved[org] -= n; m.reserved[org] <= 0 {
		delete(m.reserved, org)
	}
}

// copyTree copies the workspace src into dst (which exists, empty):
// directories, regular files and symbolic links (as links: every access
// through a workspace goes beneath its root, which refuses one leading
// out), at most maxBytes and maxFiles in all. src is read beneath an
// os.Root, so nothing its code made there leads the copy out.
func copyTree(src, dst string, maxBytes, maxFiles int64) error {
	from, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer from.Close()
	to, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer to.Close()
	var bytes, files int64
	return fs.WalkDir(from.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if files++; files > maxFiles {
			return fmt.Errorf("the workspace holds more than %d names (sessions.max_files)", maxFiles)
		}
		switch t := d.Type(); {
		case t.IsDir():
			return to.Mkdir(p, 0o700)
		case t&fs.ModeSymlink != 0:
			target, err := from.Readlink(p)
			if err != nil {
				return err
			}
			return to.Symlink(target, p)
		case t.IsRegular():
			in, err := from.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := to.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			n, err := io.Copy(out, io.LimitReader(in, maxBytes-bytes+1))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if bytes += n; err == nil && bytes > maxBytes {
				err = fmt.Errorf("the workspace holds more than %d bytes (sessions.disk_quota_bytes)", maxBytes)
			}
			return err
		}
		return nil // a device, a pipe or a socket: not copied
	})
}

// newSession makes a session of owner with its (empty) workspace, not yet
// live.
func (m *Manager) newSession(owner policy.Principal, env, meta map[string]string, now time.Time, ttl time.Duration) (*Session, error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	s := &Session{m: m, id: id, owner: owner, dir: filepath.Join(m.cfg.Dir, id), env: env, meta: meta, start: now,
		expires: now.Add(ttl), lastUsed: now, contexts: map[string]*codeContext{}}
	if err := os.MkdirAll(m.cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return nil, err
	}
	return s, nil
}
