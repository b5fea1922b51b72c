package languages

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"
	"weak"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/atomicfile"
)

// BuildIdentifier is implemented by a language whose build output depends
// on more than its Info (compiler flags, the runtime shim it links): the
// returned string goes into the build cache key, so changing flags in the
// language's code never serves a stale artifact.
type BuildIdentifier interface {
	BuildID() string
}

// cacheFormat is part of every key: bump it when the stored form changes.
const cacheFormat = "moat-build-v1"

// BuildKey is the cache key of a build: the SHA-256 of the cache format,
// the language's name, version, toolchain and BuildID, the entry file's
// name and every file's name and content, each length-prefixed so that no
// two different submissions hash alike.
func BuildKey(l Language, src Source) string {
	in := l.Info()
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put(cacheFormat)
	put(in.Name)
	put(in.Version)
	put(in.Toolchain)
	put(string(in.Path))
	if b, ok := l.(BuildIdentifier); ok {
		put(b.BuildID())
	}
	put(src.Entry().Name)
	for _, f := range src.Files {
		put(f.Name)
		put(string(f.Content))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// BuildCache keeps build artifacts on disk and the most recent ones in
// memory. It is safe for concurrent use by goroutines and by processes
// sharing the directory: every file is written to a temporary name and
// renamed into place, so a reader sees a whole entry or none, and two
// builders of the same key write identical content.
//
// Layout: blobs/<sha256>.wasm holds WASM bytes by content, so the 26 MB
// CPython interpreter that every Python artifact carries is stored once;
// builds/<key[:2]>/<key>.json holds the rest of the artifact.
type BuildCache struct {
	dir string

	mu    sync.Mutex
	mem   map[string]*Artifact
	order []string // insertion order, for eviction

	// Interning of WASM bytes: every artifact of an interpreted language
	// carries the same 26 MB interpreter. byDigest finds a live copy of a
	// blob (so a disk hit neither reads nor holds a second copy), and
	// digests remembers the digest of a live copy (so a new script's
	// artifact is not hashed again). Weak pointers: an interned copy lives
	// only as long as some artifact uses it.
	internMu sync.Mutex
	byDigest map[string]weak.Pointer[byte]
	digests  map[weak.Pointer[byte]]blobRef

	// Disk bound (see evict). size is this process's running estimate of
	// the bytes under dir, -1 until the first Put measures it; a pass
	// measures the disk again, so other processes' writes are counted.
	evictMu  sync.Mutex
	maxBytes int64
	size     int64
	touched  map[string]time.Time // last mtime refresh per key
}

// DefaultBuildCacheMaxBytes bounds a build cache's disk use unless
// SetMaxBytes says otherwise: a code-execution server builds every
// distinct submission, and without a bound its cache grows until the disk
// is full.
const DefaultBuildCacheMaxBytes = 2 << 30

// touchEvery is how stale an entry's mtime (its last use, for eviction)
// may get before a hit refreshes it: one syscall per hit would cost more
// than the order it buys.
const touchEvery = 10 * time.Minute

type blobRef struct {
	digest string
	size   int
}

// memEntries bounds the in-memory layer. Artifacts of interpreted
// languages share the interpreter's bytes, so an entry is small for them;
// a compiled Go program is about 2.5 MB.
const memEntries = 128

// OpenBuildCache opens (creating it if needed) a build cache in dir.
func OpenBuildCache(dir string) (*BuildCache, error) {
	if dir == "" {
		return nil, errors.New("build cache: no directory given")
	}
	for _, d := range []string{dir, filepath.Join(dir, "blobs"), filepath.Join(dir, "builds")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("build cache: %w", err)
		}
	}
	return &BuildCache{dir: dir, mem: map[string]*Artifact{},
		byDigest: map[string]weak.Pointer[byte]{}, digests: map[weak.Pointer[byte]]blobRef{},
		maxBytes: DefaultBuildCacheMaxBytes, size: -1, touched: map[string]time.Time{}}, nil
}

// SetMaxBytes bounds the bytes the cache keeps on disk: a Put that takes
// it over the bound evicts the least recently used entries (and the blobs
// only they used) down to 90% of it. n <= 0 lifts the bound.
func (c *BuildCache) SetMaxBytes(n int64) {
	c.evictMu.Lock()
	c.maxBytes = n
	c.evictMu.Unlock()
}

// Dir returns the cache's directory.
func (c *BuildCache) Dir() string { return c.dir }

// storedArtifact is an Artifact on disk, with the WASM bytes by reference.
type storedArtifact struct {
	Kind       ArtifactKind      `json:"kind"`
	WASMDigest string            `json:"wasm_sha256,omitempty"`
	WASMSize   int               `json:"wasm_size,omitempty"`
	Files      []File            `json:"files,omitempty"`
	Args       []string          `json:"args,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Mounts     []host.Mount      `json:"mounts,omitempty"`
	Command    []string          `json:"command,omitempty"`
	ExtraExec  []string          `json:"extra_exec,omitempty"`
	BuildLog   string            `json:"build_log,omitempty"`
}

func (c *BuildCache) entryPath(key string) string {
	return filepath.Join(c.dir, "builds", key[:2], key+".json")
}

func (c *BuildCache) blobPath(digest string) string {
	return filepath.Join(c.dir, "blobs", digest+".wasm")
}

// Get returns the artifact stored under key. A missing or damaged entry is
// a miss, never an error: the caller rebuilds.
func (c *BuildCache) Get(key string) (*Artifact, bool) {
	c.mu.Lock()
	a, ok := c.mem[key]
	c.mu.Unlock()
	if ok {
		c.touch(key)
		return a, true
	}
	b, err := os.ReadFile(c.entryPath(key))
	if err != nil {
		return nil, false
	}
	var s storedArtifact
	if json.Unmarshal(b, &s) != nil {
		return nil, false
	}
	for _, m := range s.Mounts {
		if fi, err := os.Stat(m.HostDir); err != nil || !fi.IsDir() {
			return nil, false // the directory moved: rebuild
		}
	}
	a = &Artifact{Kind: s.Kind, Files: s.Files, Args: s.Args, Env: s.Env, Mounts: s.Mounts, Command: s.Command, ExtraExec: s.ExtraExec, BuildLog: s.BuildLog}
	if s.WASMDigest != "" {
		if w := c.interned(s.WASMDigest, s.WASMSize); w != nil {
			a.WASM = w
		} else {
			w, err := os.ReadFile(c.blobPath(s.WASMDigest))
			if err != nil || len(w) != s.WASMSize {
				return nil, false
			}
			c.intern(w, s.WASMDigest)
			a.WASM = w
		}
	}
	c.remember(key, a)
	c.touch(key)
	return a, true
}

// Put stores a under key.
func (c *BuildCache) Put(key string, a *Artifact) error {
	s := storedArtifact{Kind: a.Kind, Files: a.Files, Args: a.Args, Env: a.Env, Mounts: a.Mounts, Command: a.Command, ExtraExec: a.ExtraExec, BuildLog: a.BuildLog}
	var written int64
	if len(a.WASM) > 0 {
		s.WASMDigest, s.WASMSize = c.digestOf(a.WASM), len(a.WASM)
		p := c.blobPath(s.WASMDigest)
		if fi, err := os.Stat(p); err != nil || fi.Size() != int64(len(a.WASM)) {
			if err := writeAtomic(p, a.WASM); err != nil {
				return fmt.Errorf("build cache: %w", err)
			}
			written += int64(len(a.WASM))
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("build cache: %w", err)
	}
	p := c.entryPath(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("build cache: %w", err)
	}
	if err := writeAtomic(p, b); err != nil {
		return fmt.Errorf("build cache: %w", err)
	}
	written += int64(len(b))
	c.remember(key, a)
	c.grew(key, written)
	return nil
}

// touch marks key as used now (the entry's mtime), at most once per
// touchEvery per process.
func (c *BuildCache) touch(key string) {
	now := time.Now()
	c.mu.Lock()
	last, ok := c.touched[key]
	if ok && now.Sub(last) < touchEvery {
		c.mu.Unlock()
		return
	}
	if len(c.touched) >= 4*memEntries {
		clear(c.touched)
	}
	c.touched[key] = now
	c.mu.Unlock()
	_ = os.Chtimes(c.entryPath(key), now, now)
}

// grew adds n freshly written bytes to the estimate and evicts when it is
// over the bound.
func (c *BuildCache) grew(keep string, n int64) {
	c.evictMu.Lock()
	defer c.evictMu.Unlock()
	if c.maxBytes <= 0 {
		return
	}
	if c.size >= 0 {
		c.size += n
		if c.size <= c.maxBytes {
			return
		}
	}
	c.size = c.evictLocked(keep)
}

// cachedEntry is one builds/ file, for eviction.
type cachedEntry struct {
	key    string
	size   int64
	mtime  time.Time
	digest string
}

// evictLocked measures the cache on disk and, when it is over maxBytes,
// removes the least recently used entries (never keep, the one just put)
// until it is at 90% of the bound, with every blob no remaining entry
// uses. It returns the bytes left. Another process may be reading an
// entry or blob as it goes: both are removed by unlink, so the reader
// keeps what it opened, and a later Get of the key is a miss, which
// rebuilds.
func (c *BuildCache) evictLocked(keep string) int64 {
	var entries []cachedEntry
	var total int64
	refs := map[string]int{}
	shards, _ := os.ReadDir(filepath.Join(c.dir, "builds"))
	for _, sh := range shards {
		if !sh.IsDir() {
			continue
		}
		names, _ := os.ReadDir(filepath.Join(c.dir, "builds", sh.Name()))
		for _, n := range names {
			fi, err := n.Info()
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			total += fi.Size()
			key, ok := strings.CutSuffix(n.Name(), ".json")
			if !ok {
				c.removeStaleTemp(filepath.Join(c.dir, "builds", sh.Name(), n.Name()), fi)
				continue
			}
			e := cachedEntry{key: key, size: fi.Size(), mtime: fi.ModTime()}
			var s storedArtifact
			if b, err := os.ReadFile(c.entryPath(key)); err == nil && json.Unmarshal(b, &s) == nil {
				e.digest = s.WASMDigest
			}
			if e.digest != "" {
				refs[e.digest]++
			}
			entries = append(entries, e)
		}
	}
	blobs := map[string]int64{}
	names, _ := os.ReadDir(filepath.Join(c.dir, "blobs"))
	for _, n := range names {
		fi, err := n.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		total += fi.Size()
		d, ok := strings.CutSuffix(n.Name(), ".wasm")
		if !ok {
			c.removeStaleTemp(filepath.Join(c.dir, "blobs", n.Name()), fi)
			continue
		}
		blobs[d] = fi.Size()
	}
	if total <= c.maxBytes {
		return total
	}
	removeBlob := func(d string) {
		if err := os.Remove(c.blobPath(d)); err == nil {
			total -= blobs[d]
		}
		delete(blobs, d)
	}
	// Blobs nothing refers to (a crash between blob and entry) go first.
	for d := range blobs {
		if refs[d] == 0 {
			removeBlob(d)
		}
	}
	slices.SortFunc(entries, func(a, b cachedEntry) int { return a.mtime.Compare(b.mtime) })
	target := c.maxBytes / 10 * 9
	var gone []string
	for _, e := range entries {
		if total <= target {
			break
		}
		if e.key == keep || os.Remove(c.entryPath(e.key)) != nil {
			continue
		}
		total -= e.size
		gone = append(gone, e.key)
		if e.digest != "" {
			if refs[e.digest]--; refs[e.digest] == 0 {
				removeBlob(e.digest)
			}
		}
	}
	c.mu.Lock()
	for _, k := range gone {
		delete(c.mem, k)
		delete(c.touched, k)
	}
	c.order = slices.DeleteFunc(c.order, func(k string) bool { _, ok := c.mem[k]; return !ok })
	c.mu.Unlock()
	return total
}

// removeStaleTemp removes a temporary file writeAtomic left behind (a
// crash between create and rename), once it is surely not being written.
func (c *BuildCache) removeStaleTemp(p string, fi os.FileInfo) {
	if strings.HasPrefix(fi.Name(), ".tmp-") && time.Since(fi.ModTime()) > time.Hour {
		os.Remove(p)
	}
}

// digestOf returns the SHA-256 of b, hashing each live copy once.
func (c *BuildCache) digestOf(b []byte) string {
	wp := weak.Make(unsafe.SliceData(b))
	c.internMu.Lock()
	r, ok := c.digests[wp]
	c.internMu.Unlock()
	if ok && r.size == len(b) {
		return r.digest
	}
	sum := sha256.Sum256(b)
	d := hex.EncodeToString(sum[:])
	c.intern(b, d)
	return d
}

// intern records b as a live copy of the blob with digest d.
func (c *BuildCache) intern(b []byte, d string) {
	wp := weak.Make(unsafe.SliceData(b))
	c.internMu.Lock()
	defer c.internMu.Unlock()
	if len(c.digests) >= 4096 {
		for k := range c.digests {
			if k.Value() == nil {
				delete(c.digests, k)
			}
		}
		for k, v := range c.byDigest {
			if v.Value() == nil {
				delete(c.byDigest, k)
			}
		}
	}
	c.digests[wp] = blobRef{digest: d, size: len(b)}
	c.byDigest[d] = wp
}

// interned returns a live copy of the blob, or nil.
func (c *BuildCache) interned(d string, size int) []byte {
	c.internMu.Lock()
	wp, ok := c.byDigest[d]
	r := c.digests[wp]
	c.internMu.Unlock()
	if !ok || r.size != size {
		return nil
	}
	p := wp.Value()
	if p == nil {
		return nil
	}
	return unsafe.Slice(p, size)
}

func (c *BuildCache) remember(key string, a *Artifact) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mem[key]; ok {
		return
	}
	if len(c.order) >= memEntries {
		delete(c.mem, c.order[0])
		c.order = c.order[1:]
	}
	c.mem[key] = a
	c.order = append(c.order, key)
}

// writeAtomic writes b to p whole or not at all (atomicfile): a crash
// leaves the old file or the new one, never half of one.
func writeAtomic(p string, b []byte) error { return atomicfile.Write(p, b) }
