// Package codeshare shares wazero's compiled machine code between hosts on
// one store (host.Config.CodeKey): the host that compiles a module stores
// the file wazero wrote as an artifact of the store, MAC'd under the code
// key; a host about to compile a module it has no file for fetches the
// artifact, checks the MAC, and places it where wazero will look.
//
// Its API is what package host calls: New (which proves, by compiling a
// probe, that wazero names its files as predicted), Sharer.Compile, and
// Fingerprint, the prediction of wazero's file names (host.CacheFiles).
//
// Why a package of its own: it is a mechanism with its own trust argument
// (every host runs an artifact as machine code, so only holders of the
// key may make one a host accepts), its own prediction of wazero's
// internals to keep in step with each wazero release, and its own hostile
// tests; none of it is the embedding API. It sits under host/internal
// because it uses the store and the audit log (host/store, host/audit):
// it is in host's layer, and only host's packages may import it.
package codeshare

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/atomicfile"
	"github.com/moat-sandbox/moat/internal/wasmlimit"
	"github.com/tetratelabs/wazero"
	"golang.org/x/sys/cpu"
)

// Shared compiled code (host.Config.CodeKey).
//
// Hosts on one store (replicas of moat serve on one PostgreSQL database)
// hand each other wazero's compiled form of a module, so that a module
// compiled by one loads on the others in tens of milliseconds instead of
// seconds. The host that compiles a module stores the file wazero wrote
// in its compilation cache as an artifact of the store (CodePut),
// authenticated with an HMAC under the code key; a host that is about to
// compile a module it has no file for fetches the artifact (CodeGet),
// checks the MAC, and only then writes the file where wazero will look,
// and compiles: wazero finds the file and loads it.
//
// The artifact is keyed by everything that makes wazero's machine code
// valid on a machine, so a host whose code would differ looks up another
// key and simply misses (see Fingerprint). It is authenticated
// because every host runs it as machine code: whoever can write the
// database must not be able to make the replicas run code of their
// choosing; only holders of the code key can make an artifact a host
// accepts.

// MinKeyBytes is the shortest code key a host accepts: 32 bytes, the
// size of the HMAC-SHA256 output, so the key is not the weaker part.
const MinKeyBytes = 32

// macDomain separates this MAC from any other use of the key.
const macDomain = "moat shared code artifact v1\x00"

// Fingerprint is everything that decides whether machine code
// compiled by wazero on one host is valid on another, besides the bytes
// compiled. Two hosts trade an artifact only when they derive the same
// key from it, which they do only when every field is equal.
type Fingerprint struct {
	// WazeroDir is the directory wazero keeps its files in, under the
	// cache directory: "wazero-<version>-<GOARCH>-<GOOS>"
	// (wazero.NewCompilationCacheWithDir). wazero reads a file only in
	// the directory of its own version and platform, and checks the
	// version again in the file's header.
	WazeroDir string
	// WazeroSum is the checksum of wazero's module in the build (go.sum's
	// h1: hash), so that two builds calling different code by one
	// version string (a replace directive, a "dev" build) do not trade.
	WazeroSum string
	// GoVersion is the Go release that built the host: wazero's machine
	// code calls into the Go runtime through trampolines built with it.
	GoVersion string
	// RuntimeConfig is wasmlimit.RuntimeConfigID and whether DWARF
	// lines are kept (the artifact holds a source map when they are).
	RuntimeConfig string
	// CPU is wazero's CPU feature flags (internal/platform.CpuFeatures):
	// the instructions its code generator chose to use on this machine.
	CPU uint64
	// EnsureTermination is the runtime's CloseOnContextDone, which
	// adds a check on every loop back edge.
	EnsureTermination bool
}

// CurrentFingerprint is this process's fingerprint for a runtime made
// by wasmlimit.NewRuntimeConfig with debugInfo and CloseOnContextDone set
// to closeOnContextDone.
func CurrentFingerprint(debugInfo, closeOnContextDone bool) Fingerprint {
	version, sum := wazeroBuild()
	return Fingerprint{
		WazeroDir:         "wazero-" + version + "-" + runtime.GOARCH + "-" + runtime.GOOS,
		WazeroSum:         sum,
		GoVersion:         runtime.Version(),
		RuntimeConfig:     fmt.Sprintf("%s;debug-info=%t", wasmlimit.RuntimeConfigID, debugInfo),
		CPU:               wazeroCPUFeatures(),
		EnsureTermination: closeOnContextDone,
	}
}

// wazeroBuild returns the version wazero names its cache directory by,
// read as wazero's internal/version.GetWazeroVersion reads it (the last
// dependency whose path contains github.com/tetratelabs/wazero, else the
// main module's version, else "dev"), and what identifies the wazero
// code in this build: its module's go.sum hash (with the replacement's,
// under a replace directive), or, in a build that carries no module
// information (a test binary: its wazero is "dev", as is every other
// such build's), the SHA-256 of this executable, so only the same binary
// trades.
func wazeroBuild() (version, sum string) {
	buildOnce.Do(func() {
		info, ok := debug.ReadBuildInfo()
		if ok {
			for _, dep := range info.Deps {
				if strings.Contains(dep.Path, "github.com/tetratelabs/wazero") {
					buildVersion, buildSum = dep.Version, dep.Path+"@"+dep.Version+" "+dep.Sum
					if dep.Replace != nil {
						buildSum += " => " + dep.Replace.Path + "@" + dep.Replace.Version + " " + dep.Replace.Sum
					}
				}
			}
			if buildVersion == "" || buildVersion == "(devel)" {
				buildVersion = info.Main.Version
			}
		}
		if buildVersion == "" || buildVersion == "(devel)" {
			buildVersion = "dev"
		}
		if buildSum == "" {
			buildSum = "executable " + executableDigest()
		}
	})
	return buildVersion, buildSum
}

var (
	buildOnce              sync.Once
	buildVersion, buildSum string
)

// executableDigest is the hex SHA-256 of the running executable, or a
// random value when it cannot be read (then this process trades with no
// other).
func executableDigest() string {
	h := sha256.New()
	if exe, err := os.Executable(); err == nil {
		if f, err := os.Open(exe); err == nil {
			_, err = io.Copy(h, f)
			f.Close()
			if err == nil {
				return hex.EncodeToString(h.Sum(nil))
			}
		}
	}
	var r [32]byte
	rand.Read(r[:])
	return "unreadable " + hex.EncodeToString(r[:])
}

// wazeroCPUFeatures computes wazero v1.12's CPU feature flags
// (internal/platform: cpuid_amd64.go, cpuid_arm64.go) from the same
// source wazero reads them from, golang.org/x/sys/cpu. Where this and
// wazero disagree, the file a host predicts is not the file wazero reads
// or writes: the probe at New finds that and turns sharing off.
func wazeroCPUFeatures() uint64 {
	var f uint64
	switch runtime.GOARCH {
	case "amd64":
		if cpu.X86.HasSSE41 {
			f |= 1 << 0 // CpuFeatureAmd64SSE4_1
		}
		if cpu.X86.HasBMI1 {
			f |= 1 << 1 // CpuFeatureAmd64BMI1
		}
		if cpu.X86.HasBMI1 && cpu.X86.HasBMI2 && cpu.X86.HasPOPCNT {
			f |= 1 << 2 // CpuFeatureAmd64ABM
		}
	case "arm64":
		if cpu.ARM64.HasATOMICS {
			f |= 1 << 0 // CpuFeatureArm64Atomic
		}
	}
	return f
}

// FileName is the name of the file wazero v1.12 keeps the compiled form of
// code in (internal/engine/wazevo/engine_cache.go, fileCacheKey): hex of
// SHA-256(module ID, "WAZEVO", the CPU features as 8 little-endian
// bytes), where the module ID is SHA-256(code, then one byte for
// EnsureTermination) (internal/wasm/module.go, AssignModuleID; moat
// installs no function listeners, which would add to it).
func (f Fingerprint) FileName(code []byte) string {
	h := sha256.New()
	h.Write(code)
	if f.EnsureTermination {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	id := h.Sum(nil)
	h.Reset()
	h.Write(id)
	h.Write([]byte("WAZEVO"))
	var cpu [8]byte
	binary.LittleEndian.PutUint64(cpu[:], f.CPU)
	h.Write(cpu[:])
	return hex.EncodeToString(h.Sum(nil))
}

// ArtifactKey is the store's key of the artifact of code: SHA-256 over
// every field of f and wazero's file name for code (which covers the
// bytes, EnsureTermination and the CPU features), each length-prefixed.
func (f Fingerprint) ArtifactKey(code []byte) string {
	h := sha256.New()
	for _, s := range []string{"moat shared code key v1", f.WazeroDir, f.WazeroSum, f.GoVersion, f.RuntimeConfig, f.FileName(code)} {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// MAC authenticates an artifact: HMAC-SHA256 under key of the domain,
// the artifact's key, its length and its bytes. Binding the key means an
// artifact copied under another key (another module, another machine's
// fingerprint) does not verify.
func MAC(key []byte, artifactKey string, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(macDomain))
	m.Write([]byte(artifactKey))
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	m.Write(n[:])
	m.Write(data)
	return m.Sum(nil)
}

// Sharer is a host's side of shared compiled code: the host has none when
// it has no code key, or the probe at New found wazero does not name its
// files as predicted.
type Sharer struct {
	// MaxBytes bounds an artifact, fetched or stored: New sets
	// store.MaxCodeArtifactBytes.
	MaxBytes int64

	key    []byte
	st     *store.Store
	fp     Fingerprint
	dir    string // cacheDir/fp.WazeroDir: where wazero reads and writes
	budget int64  // what CodePut keeps (store.DefaultCodeBudget when 0)
	log    *slog.Logger
	audit  *audit.Log
}

// Config is what New needs of its host.
type Config struct {
	CacheDir string // the runtime's compilation cache directory
	Key      []byte // the code key, at least MinKeyBytes
	Store    *store.Store
	// DebugInfo and CloseOnContextDone are the runtime's settings
	// (CurrentFingerprint).
	DebugInfo, CloseOnContextDone bool
	Budget                        int64 // what CodePut keeps (store.DefaultCodeBudget when 0)
	Logger                        *slog.Logger
	Audit                         *audit.Log // where a refused artifact is recorded
}

// For names what a compilation is for, in logs and audit events.
type For struct {
	Module, CorrelationID string
}

// Fingerprint is s's fingerprint.
func (s *Sharer) Fingerprint() Fingerprint { return s.fp }

// Dir is where s's runtime keeps wazero's files.
func (s *Sharer) Dir() string { return s.dir }

// Source is where a compilation's machine code came from.
type Source int

// The sources of machine code.
const (
	Compiled   Source = iota // wazero compiled it here
	FromDisk                 // this machine's compilation cache
	FromStore                // an artifact of the store, placed in the cache
	Unobserved               // the machine code exists; where it came from was not seen
)

// New prepares sharing for a host whose runtime rt keeps its
// files under cfg.CacheDir, and proves the prediction of wazero's file names
// on this machine by compiling a probe module no one compiled before and
// finding its file where predicted. A failed probe is an error: the
// caller logs it and runs without sharing.
func New(ctx context.Context, rt wazero.Runtime, cfg Config) (*Sharer, error) {
	fp := CurrentFingerprint(cfg.DebugInfo, cfg.CloseOnContextDone)
	s := &Sharer{key: cfg.Key, st: cfg.Store, fp: fp, dir: filepath.Join(cfg.CacheDir, fp.WazeroDir), MaxBytes: store.MaxCodeArtifactBytes,
		budget: cfg.Budget, log: cfg.Logger, audit: cfg.Audit}
	if st, err := os.Stat(s.dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("wazero's cache directory %s is not there (wazero %s names it otherwise): %v", s.dir, fp.WazeroDir, err)
	}
	probe := probeModule()
	path := filepath.Join(s.dir, fp.FileName(probe))
	cm, err := rt.CompileModule(ctx, probe)
	if err != nil {
		return nil, fmt.Errorf("compile the probe module: %w", err)
	}
	defer os.Remove(path)
	defer cm.Close(ctx)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("wazero did not write the probe module's compiled code where moat predicts (%s): this wazero names its files otherwise", path)
	}
	return s, nil
}

// probeModule is a module with one function, made unique by 16 random
// bytes in a custom section (which the module ID covers): wazero cannot
// have compiled it before, so it must write its file.
func probeModule() []byte {
	var nonce [16]byte
	rand.Read(nonce[:])
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
		1, 5, 1, 0x60, 0, 1, 0x7f, // type: () -> i32
		3, 2, 1, 0, // function 0 of type 0
		10, 6, 1, 4, 0, 0x41, 42, 0x0b, // code: i32.const 42
	}
	name := "moat-probe"
	custom := append([]byte{byte(len(name))}, name...)
	custom = append(custom, nonce[:]...)
	m = append(m, 0, byte(len(custom)))
	return append(m, custom...)
}

// Compile compiles code on rt with the store's artifact of it when this
// machine has no compiled file of it, and stores the artifact when it
// compiled it. Only the compilation's error is returned: the store, the
// artifact and the cache directory can only make it slower.
func (s *Sharer) Compile(ctx context.Context, rt wazero.Runtime, code []byte, who For) (wazero.CompiledModule, Source, error) {
	start := time.Now()
	name := s.fp.FileName(code)
	akey := s.fp.ArtifactKey(code)
	path := filepath.Join(s.dir, name)
	_, err := os.Stat(path)
	local := err == nil
	placed := false
	var fetched int
	var fetchTook time.Duration
	why := "the compiled code in this machine's cache was not usable by this wazero (it compiled anew)"
	if !local {
		placed, fetched, why = s.Fetch(ctx, akey, path, who)
		fetchTook = time.Since(start)
	}
	// Whether wazero read the file or wrote another is told by holding
	// the file open across the compilation: a file wazero replaces (a
	// stale one it deletes and compiles over) gets another inode, which
	// it could not if the old one were free for reuse.
	held, _ := os.Open(path)
	cm, err := rt.CompileModule(ctx, code)
	if err != nil && held != nil && ctx.Err() == nil {
		// wazero found a file it could not read (a checksum or a
		// header that does not match): it fails the compilation rather
		// than compile. Remove the file and compile.
		s.log.Warn("compiled code in the cache is unusable; removed, compiling", "module", who.Module, "file", path, "err", firstLine(err))
		held.Close()
		held = nil
		os.Remove(path)
		placed = false
		why = "the cached compiled code was unusable: " + firstLine(err)
		cm, err = rt.CompileModule(ctx, code)
	}
	read := false
	if held != nil {
		before, berr := held.Stat()
		after, aerr := os.Stat(path)
		read = berr == nil && aerr == nil && os.SameFile(before, after)
		held.Close()
	}
	if err != nil {
		return nil, Compiled, err
	}
	took := time.Since(start)
	switch {
	case read && placed:
		s.log.Info("module loaded from shared compiled code", "module", who.Module, "took", took.Round(time.Microsecond),
			"fetch", fetchTook.Round(time.Microsecond), "bytes", fetched, "artifact", akey[:12])
		return cm, FromStore, nil
	case read:
		s.log.Debug("module loaded from this machine's compile cache", "module", who.Module, "took", took.Round(time.Microsecond))
		return cm, FromDisk, nil
	}
	if _, err := os.Stat(path); err != nil {
		// wazero wrote no file under the predicted name (an engine that
		// keeps the module in memory already; listeners on ctx).
		s.log.Debug("compiled code not observed in the cache; not shared", "module", who.Module, "file", path)
		return cm, Unobserved, nil
	}
	if placed {
		why = "the shared compiled code was not usable by this wazero (it compiled anew)"
	}
	pubStart := time.Now()
	stored, storeErr := s.publish(ctx, akey, path)
	attrs := []any{"module", who.Module, "took", took.Round(time.Microsecond), "reason", why, "artifact", akey[:12]}
	if storeErr != nil {
		s.log.Warn("module compiled here; its compiled code was not shared", append(attrs, "err", storeErr)...)
	} else {
		s.log.Info("module compiled here", append(attrs, "shared_bytes", stored, "store_took", time.Since(pubStart).Round(time.Microsecond))...)
	}
	return cm, Compiled, nil
}

// Fetch places the store's artifact akey at path if there is one whose MAC
// verifies, and says whether it did, how many bytes, and otherwise why
// not.
func (s *Sharer) Fetch(ctx context.Context, akey, path string, who For) (placed bool, n int, why string) {
	a, err := s.st.CodeGet(ctx, akey, s.MaxBytes)
	var tl *store.CodeTooLargeError
	switch {
	case errors.Is(err, store.ErrCodeNotFound):
		return false, 0, "no shared compiled code for it yet"
	case errors.As(err, &tl):
		s.refuse(ctx, who, akey, tl.Size, "size",
			fmt.Sprintf("the shared compiled code is %d bytes, over the bound of %d: no host stores that much, so a database writer did; compiled here", tl.Size, tl.Max))
		return false, 0, "the shared compiled code was refused: over the size bound"
	case err != nil:
		return false, 0, "the store did not answer: " + firstLine(err)
	}
	if !hmac.Equal(a.MAC, MAC(s.key, akey, a.Data)) {
		s.refuse(ctx, who, akey, int64(len(a.Data)), "mac",
			"the shared compiled code does not verify under this host's code key: written by someone without the key (or by hosts with another key); compiled here")
		return false, 0, "the shared compiled code was refused: its MAC does not verify"
	}
	if err := atomicfile.Write(path, a.Data); err != nil {
		return false, 0, "the shared compiled code could not be written to the cache: " + firstLine(err)
	}
	return true, len(a.Data), ""
}

// refuse records a refused artifact: a warning and an audit event.
func (s *Sharer) refuse(ctx context.Context, who For, akey string, size int64, rule, reason string) {
	s.audit.Record(ctx, audit.Event{Kind: audit.KindSharedCode, Decision: audit.Deny, Module: who.Module, CorrelationID: who.CorrelationID,
		Rule: "shared_code." + rule, Reason: reason, Attrs: map[string]string{"artifact": akey, "bytes": fmt.Sprint(size)}})
}

// publish stores the file wazero wrote at path as the artifact akey. It
// outlives the load's context (the compilation is done, and the other
// hosts want it), within a minute.
func (s *Sharer) publish(ctx context.Context, akey, path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() > s.MaxBytes {
		return 0, fmt.Errorf("%d bytes of compiled code, over the %d a shared artifact may hold", st.Size(), s.MaxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, s.MaxBytes+1))
	if err != nil {
		return 0, err
	}
	if int64(len(data)) > s.MaxBytes {
		return 0, fmt.Errorf("over %d bytes of compiled code, more than a shared artifact may hold", s.MaxBytes)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_, err = s.st.CodePut(pctx, store.CodeArtifact{Key: akey, Data: data, MAC: MAC(s.key, akey, data)}, s.budget)
	if err != nil {
		return 0, err
	}
	return len(data), nil
}

// firstLine is err's message up to its first line break, without
// wazero's note that it recovered a panic.
func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSuffix(s, " (recovered by wazero)")
}
