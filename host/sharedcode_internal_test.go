package host

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/internal/codeshare"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/moat-sandbox/moat/policy"
)

var (
	codeKeyA = []byte("replica-set-a: 32 bytes or more of secret")
	codeKeyB = []byte("replica-set-b: another secret, 32 bytes+")
)

// logBuffer collects a host's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records returns the log records whose msg is msg.
func (l *logBuffer) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func jsonLogger(w *logBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// replica is a host standing for one replica: a cache directory of its
// own on the shared store st.
func replica(t *testing.T, st *store.Store, key []byte) (*Host, *logBuffer) {
	t.Helper()
	ctx := context.Background()
	logs := &logBuffer{}
	h, err := New(ctx, Config{DataDir: t.TempDir(), Store: st, CodeKey: key, Logger: jsonLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	if len(key) > 0 && !h.SharesCode() {
		t.Fatalf("a host with a code key does not share code:\n%s", logs)
	}
	return h, logs
}

func sharedStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func pluginWasm(t testing.TB) []byte {
	t.Helper()
	wasm, err := os.ReadFile("../testdata/plugin.wasm")
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// cacheFiles lists the files in the directory wazero keeps h's.
func cacheFiles(t *testing.T, h *Host) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(h.cacheDir, codeshare.CurrentFingerprint(false, hostCloseOnContextDone).WazeroDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// sharedCodeEvents returns the shared_code audit events of h.
func sharedCodeEvents(t *testing.T, h *Host) []audit.Event {
	t.Helper()
	ctx := context.Background()
	if err := h.audit.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := h.audit.Query(ctx, audit.Filter{Kind: audit.KindSharedCode})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestCodeFileName: the file moat predicts is the file wazero writes, for
// a WAT plugin, for the Go guest, and for the bytes Load actually
// compiles when it rewrites a module's table limits: the prediction is
// what decides which name an artifact from the store is placed under.
// Under -short the rewrite is shown on a WAT plugin whose table has no
// maximum (testdata/hostile_plugin.wasm), and the Go guest's two
// compiles (15 s each) are make test's.
func TestCodeFileName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// rewritten is what Load compiles for wasm under a table cap of
	// 10000: its tables bounded, and the interrupt checks Load adds to
	// every module (interrupt.go).
	rewritten := func(t *testing.T, what string, wasm []byte) []byte {
		out, changed, lay, err := wasmrewrite.LimitTables(wasm, 10000)
		if err != nil || !changed {
			t.Fatalf("LimitTables of %s to 10000 elements: changed %v, %v; the test needs a rewrite", what, changed, err)
		}
		if out, err = wasmrewrite.InstrumentDeadline(out, lay, false); err != nil {
			t.Fatal(err)
		}
		return out
	}
	unbounded, err := os.ReadFile("../testdata/hostile_plugin.wasm")
	if err != nil {
		t.Fatal(err)
	}
	type codeCase struct {
		name     string
		wasm     []byte
		tableCap uint32 // through Load with this cap, when set
		compiled []byte // the bytes wazero is handed
	}
	tests := []codeCase{
		{name: "wat plugin", wasm: pluginWasm(t), compiled: pluginWasm(t)},
		{name: "wat plugin, table rewritten by Load", wasm: unbounded, tableCap: 10000, compiled: rewritten(t, "hostile_plugin.wasm", unbounded)},
	}
	if !testing.Short() {
		goGuest := testwasm.BuildGo(t, "./testdata/goguest", true)
		tests = append(tests,
			codeCase{name: "go guest", wasm: goGuest, compiled: goGuest},
			codeCase{name: "go guest, tables rewritten by Load", wasm: goGuest, tableCap: 10000, compiled: rewritten(t, "the Go guest", goGuest)})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := replica(t, sharedStore(t), codeKeyA)
			if tt.tableCap > 0 {
				m, err := h.Load(ctx, tt.wasm, LoadOptions{Name: "m", Limits: Limits{MaxTableElements: tt.tableCap}})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close(ctx)
			} else {
				cm, _, err := h.share.Compile(ctx, h.runtime, tt.wasm, codeshare.For{Module: "m"})
				if err != nil {
					t.Fatal(err)
				}
				defer cm.Close(ctx)
			}
			want := h.share.Fingerprint().FileName(tt.compiled)
			if got := cacheFiles(t, h); !slices.Equal(got, []string{want}) {
				t.Fatalf("wazero wrote %v; moat predicts %s", got, want)
			}
			if tt.tableCap > 0 && want == h.share.Fingerprint().FileName(tt.wasm) {
				t.Fatal("the rewritten module has the uploaded one's file name")
			}
		})
	}
}

// TestSharedCodeAcrossHosts: a module compiled by one host is stored, and
// loaded by another host on the same store from what it stored (the
// other's cache directory is its own, empty); a host with another key
// refuses it (audited) and compiles; a host without a key neither fetches
// nor stores.
func TestSharedCodeAcrossHosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sharedStore(t)
	wasm := pluginWasm(t)
	a, alog := replica(t, st, codeKeyA)
	ma, err := a.Load(ctx, wasm, LoadOptions{Name: "plug", CorrelationID: "up-1"})
	if err != nil {
		t.Fatal(err)
	}
	if ci := ma.Info().Compile; ci.FromSharedCode || ci.FromDiskCache {
		t.Fatalf("the first host's compile info %+v: want compiled here", ci)
	}
	if recs := alog.records("module compiled here"); len(recs) != 1 || recs[0]["reason"] != "no shared compiled code for it yet" || recs[0]["module"] != "plug" {
		t.Fatalf("the compiling host's log: %v\n%s", recs, alog)
	}
	if u, err := st.CodeUsage(ctx); err != nil || u.Artifacts != 1 {
		t.Fatalf("after one compilation the store holds %+v, %v; want one artifact", u, err)
	}

	b, blog := replica(t, st, codeKeyA)
	mb, err := b.Load(ctx, wasm, LoadOptions{Name: "plug"})
	if err != nil {
		t.Fatal(err)
	}
	if !mb.Info().Compile.FromSharedCode {
		t.Fatalf("the second host did not load the shared code: %+v\n%s", mb.Info().Compile, blog)
	}
	recs := blog.records("module loaded from shared compiled code")
	if len(recs) != 1 || recs[0]["module"] != "plug" || recs[0]["took"] == nil || recs[0]["bytes"] == nil {
		t.Fatalf("the second host's log: %v\n%s", recs, blog)
	}
	res, err := mb.Invoke(ctx, Request{Action: "echo", Input: []byte("hi"), Principal: policy.Principal{User: "ann", Org: "acme"}})
	if err != nil || string(res.Output) != "hi" {
		t.Fatalf("echo on the code another host compiled: %q, %v", res.Output, err)
	}
	if len(blog.records("module compiled here")) != 0 {
		t.Fatalf("the second host compiled:\n%s", blog)
	}

	c, clog := replica(t, st, codeKeyB)
	mc, err := c.Load(ctx, wasm, LoadOptions{Name: "plug", CorrelationID: "load-c"})
	if err != nil {
		t.Fatal(err)
	}
	if mc.Info().Compile.FromSharedCode {
		t.Fatal("a host with another code key ran the shared code")
	}
	evs := sharedCodeEvents(t, c)
	if len(evs) != 1 || evs[0].Decision != audit.Deny || evs[0].Rule != "shared_code.mac" || evs[0].Module != "plug" || evs[0].CorrelationID != "load-c" {
		t.Fatalf("another key's host: audit %+v\n%s", evs, clog)
	}

	d, dlog := replica(t, st, nil)
	if d.SharesCode() {
		t.Fatal("a host without a code key shares code")
	}
	compiled := instrument(t, wasm) // what Load hands wazero
	before, _ := st.CodeGet(ctx, a.share.Fingerprint().ArtifactKey(compiled), 0)
	md, err := d.Load(ctx, wasm, LoadOptions{Name: "plug"})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := st.CodeGet(ctx, a.share.Fingerprint().ArtifactKey(compiled), 0)
	if md.Info().Compile.FromSharedCode || len(sharedCodeEvents(t, d)) != 1 || !after.StoredAt.Equal(before.StoredAt) || strings.Contains(dlog.String(), "shared") {
		t.Fatalf("a host without a key used sharing: %+v\n%s", md.Info().Compile, dlog)
	}
}

// TestSharedCodeHostile: artifacts a writer of the database shaped. None
// that fails its MAC or the size bound reaches the cache directory, each
// such refusal is audited, and every load still succeeds, compiled here;
// artifacts with a valid MAC that wazero cannot use (a key holder's broken
// or stale file) are removed and compiled over.
func TestSharedCodeHostile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	wasm := pluginWasm(t)
	other, err := os.ReadFile("../testdata/abi2.wasm")
	if err != nil {
		t.Fatal(err)
	}
	fp := codeshare.CurrentFingerprint(false, hostCloseOnContextDone)
	compiled := instrument(t, wasm) // what Load hands wazero
	key := fp.ArtifactKey(compiled)
	type shaped struct {
		data, mac []byte
	}
	tests := []struct {
		name  string
		shape func(t *testing.T, good []byte, st *store.Store) shaped
		rule  string // the audited refusal, "" for none
		bound bool   // the fetching host's bound is the good artifact's size and 500
	}{
		{name: "tampered byte", rule: "mac", shape: func(t *testing.T, good []byte, _ *store.Store) shaped {
			d := slices.Clone(good)
			d[len(d)/2] ^= 0x80
			return shaped{d, codeshare.MAC(codeKeyA, key, good)}
		}},
		{name: "moved from another module's key", rule: "mac", shape: func(t *testing.T, _ []byte, st *store.Store) shaped {
			// another module's real artifact and its valid MAC
			a2, _ := replica(t, st, codeKeyA)
			cm, _, err := a2.share.Compile(ctx, a2.runtime, other, codeshare.For{Module: "other"})
			if err != nil {
				t.Fatal(err)
			}
			cm.Close(ctx)
			got, err := st.CodeGet(ctx, fp.ArtifactKey(other), 0)
			if err != nil {
				t.Fatal(err)
			}
			return shaped{got.Data, got.MAC}
		}},
		{name: "from another fingerprint (CPU features)", rule: "mac", shape: func(t *testing.T, good []byte, _ *store.Store) shaped {
			f := fp
			f.CPU ^= 1
			return shaped{good, codeshare.MAC(codeKeyA, f.ArtifactKey(wasm), good)}
		}},
		{name: "from another code key", rule: "mac", shape: func(t *testing.T, good []byte, _ *store.Store) shaped {
			return shaped{good, codeshare.MAC(codeKeyB, key, good)}
		}},
		{name: "truncated", rule: "mac", shape: func(t *testing.T, good []byte, _ *store.Store) shaped {
			return shaped{good[:len(good)/2], codeshare.MAC(codeKeyA, key, good)}
		}},
		{name: "zero MAC", rule: "mac", shape: func(t *testing.T, good []byte, _ *store.Store) shaped {
			return shaped{good, make([]byte, 32)}
		}},
		{name: "huge", rule: "size", bound: true, shape: func(t *testing.T, good []byte, _ *store.Store) shaped {
			d := append(slices.Clone(good), make([]byte, 1000)...)
			return shaped{d, codeshare.MAC(codeKeyA, key, d)}
		}},
		{name: "truncated, with a valid MAC (a key holder's broken file)", shape: func(t *testing.T, good []byte, _ *store.Store) shaped {
			d := good[:len(good)/2]
			return shaped{d, codeshare.MAC(codeKeyA, key, d)}
		}},
		{name: "another wazero version's, with a valid MAC", shape: func(t *testing.T, good []byte, _ *store.Store) shaped {
			// The header: "WAZEVO", the version's length, the version.
			if !bytes.HasPrefix(good, []byte("WAZEVO")) || good[6] == 0 {
				t.Fatalf("the artifact does not start with wazero's header: %q", good[:min(16, len(good))])
			}
			d := slices.Clone(good)
			d[6+int(good[6])] ^= 1 // the version's last character
			return shaped{d, codeshare.MAC(codeKeyA, key, d)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := sharedStore(t)
			a, _ := replica(t, st, codeKeyA)
			cm, _, err := a.share.Compile(ctx, a.runtime, compiled, codeshare.For{Module: "plug"})
			if err != nil {
				t.Fatal(err)
			}
			cm.Close(ctx)
			good, err := st.CodeGet(ctx, key, 0)
			if err != nil {
				t.Fatal(err)
			}
			bad := tt.shape(t, good.Data, st)
			if _, err := st.CodePut(ctx, store.CodeArtifact{Key: key, Data: bad.data, MAC: bad.mac}, 0); err != nil {
				t.Fatal(err)
			}

			b, blog := replica(t, st, codeKeyA)
			if tt.bound {
				b.share.MaxBytes = int64(len(good.Data)) + 500
			}
			// The fetch alone: a refused artifact writes nothing, not even
			// a temporary file.
			path := filepath.Join(b.share.Dir(), fp.FileName(compiled))
			placed, _, why := b.share.Fetch(ctx, key, path, codeshare.For{Module: "plug", CorrelationID: "c-1"})
			if tt.rule != "" {
				if placed || len(cacheFiles(t, b)) != 0 {
					t.Fatalf("a refused artifact reached the cache directory: %v (%s)", cacheFiles(t, b), why)
				}
				evs := sharedCodeEvents(t, b)
				if len(evs) != 1 || evs[0].Rule != "shared_code."+tt.rule || evs[0].Decision != audit.Deny ||
					evs[0].Attrs["artifact"] != key || evs[0].CorrelationID != "c-1" {
					t.Fatalf("audit after the refusal: %+v", evs)
				}
			} else if !placed {
				t.Fatalf("an artifact with a valid MAC was not placed: %s", why)
			}

			// The load: compiled here, served, and the store repaired.
			m, err := b.Load(ctx, wasm, LoadOptions{Name: "plug"})
			if err != nil {
				t.Fatalf("load: %v\n%s", err, blog)
			}
			if m.Info().Compile.FromSharedCode {
				t.Fatal("the load ran the shaped artifact")
			}
			res, err := m.Invoke(ctx, Request{Action: "echo", Input: []byte("hi"), Principal: policy.Principal{User: "ann", Org: "acme"}})
			if err != nil || string(res.Output) != "hi" {
				t.Fatalf("echo: %q, %v", res.Output, err)
			}
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(bad.data, good.Data) && bytes.Equal(got, bad.data) {
				t.Fatalf("the cache holds the shaped artifact after the load (%v)", err)
			}
			if recs := blog.records("module compiled here"); len(recs) != 1 {
				t.Fatalf("want one 'compiled here' line:\n%s", blog.String())
			}
			now, err := st.CodeGet(ctx, key, 0)
			if err != nil || !hmac.Equal(now.MAC, codeshare.MAC(codeKeyA, key, now.Data)) || !bytes.Equal(now.Data, got) {
				t.Errorf("the store was not repaired with the host's own compiled code: %v", err)
			}
		})
	}
}

// TestCodeKeyTooShort: a key shorter than MinCodeKeyBytes is refused at
// New, naming the fix.
func TestCodeKeyTooShort(t *testing.T) {
	t.Parallel()
	_, err := New(context.Background(), Config{DataDir: t.TempDir(), CodeKey: []byte("short")})
	if err == nil || !strings.Contains(err.Error(), "5 bytes; give at least 32") {
		t.Fatalf("New with a 5-byte code key: %v", err)
	}
}

// TestSharedCodeStoreAway: a store that does not answer makes the load
// compile here, not fail.
func TestSharedCodeStoreAway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, logs := replica(t, st, codeKeyA)
	st.Close()
	if _, err := h.Load(ctx, pluginWasm(t), LoadOptions{Name: "plug"}); err != nil {
		t.Fatalf("the load failed for want of the store: %v", err)
	}
	recs := logs.records("module compiled here; its compiled code was not shared")
	if len(recs) != 1 || !strings.Contains(recs[0]["reason"].(string), "the store did not answer") {
		t.Fatalf("want the compile logged with the store's failure:\n%s", logs)
	}
}

// TestLocalCode: a load with LocalCode neither stores its compiled code
// nor runs what the store holds, on a host that shares code.
func TestLocalCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sharedStore(t)
	wasm := pluginWasm(t)
	a, alog := replica(t, st, codeKeyA)
	if _, err := a.Load(ctx, wasm, LoadOptions{Name: "run", LocalCode: true}); err != nil {
		t.Fatal(err)
	}
	if u, err := st.CodeUsage(ctx); err != nil || u.Artifacts != 0 || len(alog.records("module compiled here")) != 0 {
		t.Fatalf("a local load stored %+v (%v):\n%s", u, err, alog)
	}
	b, _ := replica(t, st, codeKeyA)
	if _, err := b.Load(ctx, wasm, LoadOptions{Name: "shared"}); err != nil {
		t.Fatal(err)
	}
	c, clog := replica(t, st, codeKeyA)
	m, err := c.Load(ctx, wasm, LoadOptions{Name: "run", LocalCode: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Info().Compile.FromSharedCode || len(clog.records("module loaded from shared compiled code")) != 0 {
		t.Fatalf("a local load ran the store's code:\n%s", clog)
	}
}
