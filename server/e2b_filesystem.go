package server

// envd's filesystem on moat: the Connect service filesystem.Filesystem
// (Stat, MakeDir, Move, ListDir, Remove, WatchDir) and envd's plain HTTP
// /files (read, and write as multipart or one octet-stream body) and
// /health, all on the session's workspace through package sessions' file
// functions, so the workspace's rules are theirs: a path is /home/user/...
// or relative to it, os.Root beneath the workspace resolves every
// element (no "..", no symbolic link out), uploads count against the disk
// quota and the name limit, and every change is audited with the
// session and the correlation id, as /v1/sessions/{id}/files is.

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/moat-sandbox/moat/server/sessions"
)

func init() {
	envdServices = append(envdServices, mountFilesystem)
	envdServices = append(envdServices, func(s *Server, mux *http.ServeMux, _ ...connect.HandlerOption) {
		mux.HandleFunc("GET /files", s.envdReadFile)
		mux.HandleFunc("POST /files", s.envdWriteFiles)
		mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	})
}

// e2bMaxListDepth bounds ListDir's depth; e2bMaxUploadFiles the files of
// one multipart upload.
const (
	e2bMaxListDepth   = 32
	e2bMaxUploadFiles = 1000
)

// envdEntry is envd's EntryInfo as protojson writes it: the enum by
// name, the int64 as a string, the Timestamp in RFC 3339 with 3 to 9
// fractional digits (protobuf-es refuses other counts).
type envdEntry struct {
	Name         string `json:"name"`
	Type         string `json:"type"`
	Path         string `json:"path"`
	Size         string `json:"size"`
	Mode         uint32 `json:"mode"`
	Permissions  string `json:"permissions"`
	Owner        string `json:"owner"`
	Group        string `json:"group"`
	ModifiedTime string `json:"modifiedTime,omitempty"`
}

func envdEntryOf(e *sessions.Entry) *envdEntry {
	t := "FILE_TYPE_UNSPECIFIED"
	switch {
	case e.Type == "file":
		t = "FILE_TYPE_FILE"
	case e.Type == "dir":
		t = "FILE_TYPE_DIRECTORY"
	case e.Mode&fs.ModeSymlink != 0:
		t = "FILE_TYPE_SYMLINK"
	}
	out := &envdEntry{Name: e.Name, Type: t, Path: e.Path, Size: strconv.FormatInt(e.Size, 10),
		Mode: uint32(e.Mode.Perm()), Permissions: e.Mode.String(), Owner: "user", Group: "user"}
	if !e.ModTime.IsZero() {
		out.ModifiedTime = e.ModTime.UTC().Format("2006-01-02T15:04:05.000000000Z")
	}
	return out
}

type envdPathRequest struct {
	Path string `json:"path"`
}

type envdEntryResponse struct {
	Entry *envdEntry `json:"entry,omitempty"`
}

type envdMoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type envdListRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

type envdListResponse struct {
	Entries []*envdEntry `json:"entries"`
}

type envdEmpty struct{}

// unary adapts a plain function to a Connect unary handler on the
// request's sandbox.
func unary[Req, Res any](f func(ctx context.Context, sb *e2bSandbox, req *Req) (*Res, error)) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error) {
	return func(ctx context.Context, r *connect.Request[Req]) (*connect.Response[Res], error) {
		res, err := f(ctx, sandboxOf(ctx), r.Msg)
		if err != nil {
			var ce *connect.Error
			if errors.As(err, &ce) {
				return nil, ce
			}
			return nil, connectErr(err)
		}
		return connect.NewResponse(res), nil
	}
}

func mountFilesystem(s *Server, mux *http.ServeMux, opts ...connect.HandlerOption) {
	const svc = "/filesystem.Filesystem/"
	mux.Handle(svc+"Stat", connect.NewUnaryHandler(svc+"Stat", unary(envdStat), opts...))
	mux.Handle(svc+"MakeDir", connect.NewUnaryHandler(svc+"MakeDir", unary(envdMakeDir), opts...))
	mux.Handle(svc+"Move", connect.NewUnaryHandler(svc+"Move", unary(envdMove), opts...))
	mux.Handle(svc+"ListDir", connect.NewUnaryHandler(svc+"ListDir", unary(envdListDir), opts...))
	mux.Handle(svc+"Remove", connect.NewUnaryHandler(svc+"Remove", unary(envdRemove), opts...))
	mux.Handle(svc+"CreateWatcher", connect.NewUnaryHandler(svc+"CreateWatcher", unary(s.envdCreateWatcher), opts...))
	mux.Handle(svc+"GetWatcherEvents", connect.NewUnaryHandler(svc+"GetWatcherEvents", unary(envdGetWatcherEvents), opts...))
	mux.Handle(svc+"RemoveWatcher", connect.NewUnaryHandler(svc+"RemoveWatcher", unary(envdRemoveWatcher), opts...))
	mux.Handle(svc+"WatchDir", e2bStream(connect.NewServerStreamHandler(svc+"WatchDir", s.envdWatchDir, opts...), e2bMaxStream))
}

func envdStat(_ context.Context, sb *e2bSandbox, req *envdPathRequest) (*envdEntryResponse, error) {
	e, err := sb.Session.Stat(req.Path)
	if err != nil {
		return nil, err
	}
	return &envdEntryResponse{Entry: envdEntryOf(e)}, nil
}

func envdMakeDir(ctx context.Context, sb *e2bSandbox, req *envdPathRequest) (*envdEntryResponse, error) {
	e, err := sb.Session.MakeDir(ctx, sb.Correlation, req.Path)
	if err != nil {
		return nil, err
	}
	return &envdEntryResponse{Entry: envdEntryOf(e)}, nil
}

func envdMove(ctx context.Context, sb *e2bSandbox, req *envdMoveRequest) (*envdEntryResponse, error) {
	e, err := sb.Session.Move(ctx, sb.Correlation, req.Source, req.Destination)
	if err != nil {
		return nil, err
	}
	return &envdEntryResponse{Entry: envdEntryOf(e)}, nil
}

func envdRemove(ctx context.Context, sb *e2bSandbox, req *envdPathRequest) (*envdEmpty, error) {
	return &envdEmpty{}, sb.Session.Remove(ctx, sb.Correlation, req.Path)
}

// envdListDir lists a directory to the depth asked (1: its names; 0 is
// 1, as envd reads it), breadth first, not following symbolic links,
// at most sessions.MaxListEntries names in all.
func envdListDir(_ context.Context, sb *e2bSandbox, req *envdListRequest) (*envdListResponse, error) {
	depth := max(int(req.Depth), 1)
	if depth > e2bMaxListDepth {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("depth: %d; give 1 to %d", req.Depth, e2bMaxListDepth))
	}
	st, err := sb.Session.Stat(req.Path)
	if err != nil {
		return nil, err
	}
	if st.Type != "dir" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path: %s is not a directory", st.Path))
	}
	out := &envdListResponse{Entries: []*envdEntry{}}
	level := []string{st.Path}
	for d := 0; d < depth && len(level) > 0; d++ {
		var next []string
		for _, dir := range level {
			es, err := sb.Session.List(dir)
			if err != nil {
				return nil, err
			}
			for i := range es {
				if len(out.Entries) >= sessions.MaxListEntries {
					return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%s holds more than %d names to depth %d; list a smaller depth or a directory beneath it", st.Path, sessions.MaxListEntries, depth))
				}
				out.Entries = append(out.Entries, envdEntryOf(&es[i]))
				if es[i].Type == "dir" {
					next = append(next, es[i].Path)
				}
			}
		}
		level = next
	}
	return out, nil
}

// e2bWatchPoll is how often WatchDir looks at the directory: moat takes
// no file-notification dependency, and a workspace is small and local.
var e2bWatchPoll = 200 * time.Millisecond

type envdWatchRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

type envdFSEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

type envdWatchResponse struct {
	Start      *envdEmpty   `json:"start,omitempty"`
	Filesystem *envdFSEvent `json:"filesystem,omitempty"`
	Keepalive  *envdEmpty   `json:"keepalive,omitempty"`
}

// e2bMaxWatches bounds the watches open on one session: each polls.
const e2bMaxWatches = 8

var e2bWatches = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

// envdWatchDir streams the changes to one directory (not recursive:
// moat offers one level) until the client goes or the session ends: a
// start event, then create, write and remove events from a comparison of
// listings every e2bWatchPoll, and a keepalive every 30 s.
func (s *Server) envdWatchDir(ctx context.Context, r *connect.Request[envdWatchRequest], st *connect.ServerStream[envdWatchResponse]) error {
	sb := sandboxOf(ctx)
	if r.Msg.Recursive {
		return connect.NewError(connect.CodeUnimplemented, errors.New("recursive: moat watches one directory level; watch each directory, or leave recursive out"))
	}
	dir, err := sb.Session.Stat(r.Msg.Path)
	if err != nil {
		return connectErr(err)
	}
	if dir.Type != "dir" {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path: %s is not a directory", dir.Path))
	}
	id := sb.Session.ID()
	e2bWatches.Lock()
	if e2bWatches.n[id] >= e2bMaxWatches {
		e2bWatches.Unlock()
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the sandbox has %d watches open, the most it may have; stop one", e2bMaxWatches))
	}
	e2bWatches.n[id]++
	e2bWatches.Unlock()
	defer func() {
		e2bWatches.Lock()
		if e2bWatches.n[id]--; e2bWatches.n[id] <= 0 {
			delete(e2bWatches.n, id)
		}
		e2bWatches.Unlock()
	}()

	before, err := watchLook(sb.Session, dir.Path)
	if err != nil {
		return connectErr(err)
	}
	if err := st.Send(&envdWatchResponse{Start: &envdEmpty{}}); err != nil {
		return err
	}
	tick := time.NewTicker(e2bWatchPoll)
	defer tick.Stop()
	lastSent := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now, err := watchLook(sb.Session, dir.Path)
		if err != nil {
			return connectErr(err) // the session ended, or the directory went
		}
		evs := watchDiff(before, now)
		before = now
		for _, ev := range evs {
			if err := st.Send(&envdWatchResponse{Filesystem: ev}); err != nil {
				return err
			}
			lastSent = time.Now()
		}
		if time.Since(lastSent) > 30*time.Second {
			if err := st.Send(&envdWatchResponse{Keepalive: &envdEmpty{}}); err != nil {
				return err
			}
			lastSent = time.Now()
		}
	}
}

// watchSeen is what a watch compares of a name from one look to the next.
type watchSeen struct {
	typ  string
	size int64
	mod  time.Time
}

// watchLook lists dir's names for a watch.
func watchLook(sess *sessions.Session, dir string) (map[string]watchSeen, error) {
	es, err := sess.List(dir)
	if err != nil {
		return nil, err
	}
	m := make(map[string]watchSeen, len(es))
	for _, e := range es {
		m[e.Name] = watchSeen{e.Type, e.Size, e.ModTime}
	}
	return m, nil
}

// watchDiff is the events between two looks: names that came, changed
// and went.
func watchDiff(before, now map[string]watchSeen) []*envdFSEvent {
	var evs []*envdFSEvent
	for name, n := range now {
		switch o, ok := before[name]; {
		case !ok:
			evs = append(evs, &envdFSEvent{Name: name, Type: "EVENT_TYPE_CREATE"})
		case o != n:
			evs = append(evs, &envdFSEvent{Name: name, Type: "EVENT_TYPE_WRITE"})
		}
	}
	for name := range before {
		if _, ok := now[name]; !ok {
			evs = append(evs, &envdFSEvent{Name: name, Type: "EVENT_TYPE_REMOVE"})
		}
	}
	return evs
}

// A polled watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher: what
// E2B's synchronous Python SDK uses instead of the WatchDir stream) is
// the last look at a directory, kept in memory for its session; each
// GetWatcherEvents looks again and answers the difference. A session has
// at most e2bMaxWatches of them; those of ended sessions go within a
// minute (reapWatcher), or when the next is made.
type polledWatcher struct {
	session string
	dir     string
	before  map[string]watchSeen
}

var e2bWatchers = struct {
	sync.Mutex
	m map[string]*polledWatcher
}{m: map[string]*polledWatcher{}}

type envdWatcherID struct {
	WatcherID string `json:"watcherId"`
}

type envdWatcherEvents struct {
	Events []*envdFSEvent `json:"events"`
}

func (s *Server) envdCreateWatcher(_ context.Context, sb *e2bSandbox, req *envdWatchRequest) (*envdWatcherID, error) {
	if req.Recursive {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("recursive: moat watches one directory level; watch each directory, or leave recursive out"))
	}
	dir, err := sb.Session.Stat(req.Path)
	if err != nil {
		return nil, err
	}
	if dir.Type != "dir" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path: %s is not a directory", dir.Path))
	}
	before, err := watchLook(sb.Session, dir.Path)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	e2bWatchers.Lock()
	defer e2bWatchers.Unlock()
	n := 0
	for wid, w := range e2bWatchers.m {
		if _, live := s.sessions.Owner(w.session); !live {
			delete(e2bWatchers.m, wid)
		} else if w.session == sb.Session.ID() {
			n++
		}
	}
	if n >= e2bMaxWatches {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the sandbox has %d watchers, the most it may have; remove one", n))
	}
	e2bWatchers.m[id] = &polledWatcher{session: sb.Session.ID(), dir: dir.Path, before: before}
	s.reapWatcher(id)
	return &envdWatcherID{WatcherID: id}, nil
}

// reapWatcher drops watcher id, and its last look, once its session has
// ended: it looks every minute, so no one needs to call again for an
// ended session's watchers to go.
func (s *Server) reapWatcher(id string) {
	time.AfterFunc(time.Minute, func() {
		e2bWatchers.Lock()
		defer e2bWatchers.Unlock()
		w := e2bWatchers.m[id]
		if w == nil {
			return
		}
		if _, live := s.sessions.Owner(w.session); !live {
			delete(e2bWatchers.m, id)
			return
		}
		s.reapWatcher(id)
	})
}

// watcherOf returns the sandbox's watcher id (another sandbox's is not
// found, as none is).
func watcherOf(sb *e2bSandbox, id string) (*polledWatcher, error) {
	e2bWatchers.Lock()
	w := e2bWatchers.m[id]
	e2bWatchers.Unlock()
	if w == nil || w.session != sb.Session.ID() {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no watcher %.32q in this sandbox", id))
	}
	return w, nil
}

func envdGetWatcherEvents(_ context.Context, sb *e2bSandbox, req *envdWatcherID) (*envdWatcherEvents, error) {
	w, err := watcherOf(sb, req.WatcherID)
	if err != nil {
		return nil, err
	}
	now, err := watchLook(sb.Session, w.dir)
	if err != nil {
		return nil, err
	}
	e2bWatchers.Lock()
	evs := watchDiff(w.before, now)
	w.before = now
	e2bWatchers.Unlock()
	return &envdWatcherEvents{Events: append([]*envdFSEvent{}, evs...)}, nil
}

func envdRemoveWatcher(_ context.Context, sb *e2bSandbox, req *envdWatcherID) (*envdEmpty, error) {
	if _, err := watcherOf(sb, req.WatcherID); err != nil {
		return nil, err
	}
	e2bWatchers.Lock()
	delete(e2bWatchers.m, req.WatcherID)
	e2bWatchers.Unlock()
	return &envdEmpty{}, nil
}

// envdError writes envd's HTTP error: {code, message}, which the SDKs
// read into their own exceptions.
func envdError(w http.ResponseWriter, err error) {
	var pe *Problem
	if !errors.As(err, &pe) {
		_ = errors.As(sessionProblem(err), &pe) // the /v1 routes' statuses: a host error's by its code
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(pe.Status)
	_ = json.NewEncoder(w).Encode(e2bError{Code: pe.Status, Message: pe.Detail})
}

// envdUser checks envd's username parameter: moat's sandbox has one
// user, whose home is the workspace; "root" is accepted as the SDKs
// send it and means the same user (no more rights).
func envdUser(r *http.Request) error {
	switch u := r.URL.Query().Get("username"); u {
	case "", "user", "root":
		return nil
	default:
		return problem(http.StatusBadRequest, "invalid_argument", "username: %.32q; a moat sandbox has one user, user (root is taken as it)", u)
	}
}

// envdReadFile is envd's GET /files?path=: the file's bytes.
func (s *Server) envdReadFile(w http.ResponseWriter, r *http.Request) {
	sb := sandboxOf(r.Context())
	if err := envdUser(r); err != nil {
		envdError(w, err)
		return
	}
	f, size, err := sb.Session.OpenFile(r.URL.Query().Get("path"))
	if err != nil {
		envdError(w, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = io.CopyN(w, f, size)
}

// envdWriteEntry is envd's HTTP EntryInfo, one per file written.
type envdWriteEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// envdWriteFiles is envd's POST /files: a multipart form of files (each
// part's file name its path when no path is given), or one
// application/octet-stream body (gzip-encoded if the SDK asked) written
// to path. Each file is bounded as sessions.WriteFile bounds it.
func (s *Server) envdWriteFiles(w http.ResponseWriter, r *http.Request) {
	sb := sandboxOf(r.Context())
	if err := envdUser(r); err != nil {
		envdError(w, err)
		return
	}
	qpath := r.URL.Query().Get("path")
	var out []envdWriteEntry
	write := func(p string, body io.Reader) error {
		if p == "" {
			return problem(http.StatusBadRequest, "invalid_argument", "path: give the file's path (the path parameter, or the file name of its part)")
		}
		e, err := sb.Session.WriteFile(r.Context(), sb.Correlation, p, body)
		if err != nil {
			return err
		}
		out = append(out, envdWriteEntry{Name: e.Name, Type: "file", Path: e.Path})
		return nil
	}
	var body io.Reader = r.Body
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			envdError(w, problem(http.StatusBadRequest, "invalid_argument", "the body is not gzip: %v", err))
			return
		}
		body = zr // what it inflates to is bounded by WriteFile
	default:
		envdError(w, problem(http.StatusBadRequest, "invalid_argument", "Content-Encoding: %.32q; send the body as it is, or gzip", enc))
		return
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var err error
	switch mt {
	case "multipart/form-data":
		err = s.envdMultipart(r, body, params["boundary"], qpath, write)
	case "application/octet-stream", "":
		err = write(qpath, body)
	default:
		err = problem(http.StatusUnsupportedMediaType, "invalid_argument", "Content-Type: %.64q; send multipart/form-data or application/octet-stream", mt)
	}
	if err != nil {
		envdError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) envdMultipart(r *http.Request, body io.Reader, boundary, qpath string, write func(string, io.Reader) error) error {
	if boundary == "" {
		return problem(http.StatusBadRequest, "invalid_argument", "Content-Type: multipart/form-data without a boundary")
	}
	mr := multipart.NewReader(body, boundary)
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			if n == 0 {
				return problem(http.StatusBadRequest, "invalid_argument", "the form holds no file")
			}
			return nil
		}
		if err != nil {
			return problem(http.StatusBadRequest, "invalid_argument", "the multipart body: %v", err)
		}
		if n >= e2bMaxUploadFiles {
			return problem(http.StatusBadRequest, "invalid_argument", "the form holds more than %d files; send them in several requests", e2bMaxUploadFiles)
		}
		p := qpath
		if p == "" {
			// The part's file name as sent, not Part.FileName's base
			// name: the SDK names each file of a multi-file write by
			// its path. sessions.WriteFile checks it as any path.
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			p = dp["filename"]
		}
		err = write(p, part)
		part.Close()
		if err != nil {
			return err
		}
	}
}
