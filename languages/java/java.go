// Package java is the Java language: Debian's OpenJDK 17
// (openjdk-17-jdk-headless). javac compiles the submission as a confined
// build job (languages.RunTool: the kernel layers, no network, cached by
// content as every build is), and java runs the classes as a confined
// native process (host/native), since the JVM has no WASM build worth
// running. Import it for its side effect of registering "java".
//
// The JVM sizes itself from what it is told, not from the cgroup it runs
// in, so every run is told its limits (RunFlags): the heap is the memory
// limit less a headroom for what is not heap, the collector is the serial
// one (no GC threads), the JVM sees one processor, and every thread's
// stack is bounded. The threads a JVM starts count against the process
// limit, which is raised to hold them and not much more (Pids).
//
// The class run is Main by convention; a submission without a Main runs
// the class of its entry file that declares `static void main`.
//
// Validation profile rules: "import:PACKAGE" refuses an import of PACKAGE
// or of anything under it (e.g. "import:java.net", "import:java.lang.reflect").
package java

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/toolchains"
)

func init() {
	languages.Register(Java)
	Java.registered.Store(true)
}

// Java is the registered language.
var Java = &Language{}

// Language compiles and runs Java.
type Language struct {
	registered atomic.Bool
}

// Package is the Debian package that provides javac and java.
const Package = "openjdk-17-jdk-headless"

var _ languages.Language = (*Language)(nil)
var _ languages.Checker = (*Language)(nil)
var _ languages.NativeTuner = (*Language)(nil)
var _ languages.BuildIdentifier = (*Language)(nil)

// jdk is the JDK found from /usr/bin/javac: both tools come from the
// directory javac resolves to, so the compiler and the runtime are always
// one release (Debian's alternatives could point java at another JDK).
type jdk struct {
	javac, java, version string
	// etc is Debian's configuration of the JDK (/etc/java-17-openjdk),
	// which its conf/ links into: java.security and the like, read by
	// every JVM as it starts. Only this directory of /etc is added to
	// what the compiler and the program may read.
	etc string
}

var findJDK = sync.OnceValues(func() (jdk, error) {
	bin, err := toolchains.Binary("javac", Package)
	if err != nil {
		return jdk{}, err
	}
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return jdk{}, fmt.Errorf("%w: %s: %v", toolchains.ErrMissing, bin, err)
	}
	java := filepath.Join(filepath.Dir(real), "java")
	if _, err := os.Stat(java); err != nil {
		return jdk{}, fmt.Errorf("%w: %s has no java beside it (install the Debian package %s: `moat toolchains install java` as root)", toolchains.ErrMissing, real, Package)
	}
	// Run bare, with no untrusted input, for the version only.
	out, err := exec.Command(real, "-J-Xshare:auto", "-J-XX:+UseSerialGC", "-J-Xmx64m", "-version").CombinedOutput()
	if err != nil {
		return jdk{}, fmt.Errorf("%s -version: %w: %s", real, err, strings.TrimSpace(string(out)))
	}
	m := regexp.MustCompile(`javac (\S+)`).FindSubmatch(out)
	if m == nil {
		return jdk{}, fmt.Errorf("%s -version: no version in %q", real, strings.TrimSpace(string(out)))
	}
	j := jdk{javac: real, java: java, version: string(m[1])}
	if sec, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(filepath.Dir(real)), "conf", "security", "java.security")); err == nil {
		if d := filepath.Dir(filepath.Dir(sec)); strings.HasPrefix(d, "/etc/") {
			j.etc = d
		}
	}
	return j, nil
})

func (j jdk) readOnly() []string {
	if j.etc == "" {
		return nil
	}
	return []string{j.etc}
}

// Runtime is the JDK's java launcher and the directories outside the
// system ones a JVM must read (Debian's /etc/java-17-openjdk), for a
// language that compiles to classes and runs them on this same JVM
// (kotlin): one JDK, found one way, for every JVM language.
func Runtime() (java string, readOnly []string, err error) {
	j, err := findJDK()
	if err != nil {
		return "", nil, err
	}
	return j.java, j.readOnly(), nil
}

func (l *Language) version() string {
	if !l.registered.Load() {
		return "" // at init: no moat process runs javac just by starting
	}
	j, err := findJDK()
	if err != nil {
		return "unavailable"
	}
	return j.version
}

// Info describes Java.
func (l *Language) Info() languages.Info {
	v := l.version()
	return languages.Info{
		Name: "java", Aliases: []string{"jdk", "openjdk"}, Version: v,
		Path: languages.PathNative, Extensions: []string{".java"},
		Toolchain: "OpenJDK " + v + " javac + java (native, confined; the heap from the memory limit)",
		Why: "no JVM runs as a WASI command that is javac's and java's Java; Debian's OpenJDK runs under every kernel layer, " +
			"its heap, stacks and threads told the run's limits",
	}
}

// Available reports what is missing.
func (l *Language) Available() error {
	_, err := findJDK()
	return err
}

// BuildID is part of the build cache key: the compiler's flags.
func (l *Language) BuildID() string { return strings.Join(javacFlags, " ") }

// javacFlags: no annotation processing (a processor is code javac would
// run, found on the class path: nothing a submission should bring), UTF-8
// sources (ValidateCommon holds them to it), and the compiler's own JVM
// held small and single-threaded like the programs it builds.
var javacFlags = []string{
	"-proc:none", "-encoding", "UTF-8", "-implicit:class", "-Xlint:none", "-nowarn",
	"-J-XX:+UseSerialGC", "-J-XX:ActiveProcessorCount=1", "-J-XX:TieredStopAtLevel=1",
	"-J-Xshare:auto", "-J-XX:-UsePerfData", "-J-Xmx512m", "-J-Xss8m",
}

// Limits of a build's output: more class files or bytes than a
// submission of DefaultMaxFiles sources could reasonably make means the
// compiler was turned against the host's disk.
const (
	maxClasses    = 4096
	maxClassBytes = 64 << 20
)

var (
	importRe  = regexp.MustCompile(`^\s*import\s+(?:static\s+)?([\w.]+)(?:\.\*)?\s*;`)
	packageRe = regexp.MustCompile(`(?m)^\s*package\s+([\w.]+)\s*;`)
	// typeRe finds top-level-looking type declarations; publicRe the
	// public one a file must be named after.
	typeRe   = regexp.MustCompile(`\b(?:class|interface|enum|record)\s+([A-Za-z_$][\w$]*)`)
	publicRe = regexp.MustCompile(`(?m)^\s*public\s+(?:(?:final|abstract|sealed|strictfp)\s+)*(?:class|interface|enum|record)\s+([A-Za-z_$][\w$]*)`)
	mainRe   = regexp.MustCompile(`\bstatic\s+(?:final\s+)?void\s+main\s*\(`)
)

// Validate adds the "import:" check and requires a .java file.
func (l *Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	vs = append(vs, languages.DenyLines(src, p, "import:", func(line, target string) bool {
		m := importRe.FindStringSubmatch(line)
		return m != nil && (m[1] == target || strings.HasPrefix(m[1], target+"."))
	})...)
	if !slices.ContainsFunc(src.Files, func(f languages.File) bool { return isSource(f.Name) }) {
		vs = append(vs, languages.Violation{Rule: languages.RuleFiles, File: src.Entry().Name,
			Message: "no Java source file: name the entry file Main.java (or any name ending in .java)"})
	}
	return vs
}

func isSource(name string) bool { return strings.EqualFold(path.Ext(name), ".java") }

// StripComments blanks comments and the insides of string and character
// literals, keeping line breaks, so the declarations found in a file are
// code (a "class Foo" in a comment names nothing). Kotlin's comments and
// literals have the same shape (its raw strings are Java's text blocks),
// so languages/kotlin finds its declarations through it too.
func StripComments(s string) string {
	b := []byte(s)
	out := make([]byte, len(b))
	const (
		code = iota
		line
		block
		str
		chr
		text // a """ text block
	)
	st := code
	for i := 0; i < len(b); i++ {
		c := b[i]
		out[i] = ' '
		if c == '\n' {
			out[i] = '\n'
		}
		switch st {
		case code:
			switch {
			case c == '/' && i+1 < len(b) && b[i+1] == '/':
				st = line
			case c == '/' && i+1 < len(b) && b[i+1] == '*':
				st, i = block, i+1
				out[i] = ' '
			case c == '"' && i+2 < len(b) && b[i+1] == '"' && b[i+2] == '"':
				st = text
				out[i], out[i+1], out[i+2] = '"', ' ', ' '
				i += 2
			case c == '"':
				st, out[i] = str, '"'
			case c == '\'':
				st, out[i] = chr, '\''
			default:
				out[i] = c
			}
		case line:
			if c == '\n' {
				st = code
			}
		case block:
			if c == '*' && i+1 < len(b) && b[i+1] == '/' {
				st, i = code, i+1
				out[i] = ' '
			}
		case str, chr:
			switch {
			case c == '\\' && i+1 < len(b):
				i++
				out[i] = ' '
				if b[i] == '\n' {
					out[i] = '\n'
				}
			case c == '\n':
				st = code // an unterminated literal: javac will say so
			case (st == str && c == '"') || (st == chr && c == '\''):
				st, out[i] = code, c
			}
		case text:
			if c == '\\' && i+1 < len(b) {
				i++
				out[i] = ' '
			} else if c == '"' && i+2 < len(b) && b[i+1] == '"' && b[i+2] == '"' {
				st = code
				i += 2
			}
		}
	}
	return string(out)
}

// MainClass is the class a run starts: Main when the submission declares
// one, else the class of the entry file whose body holds the first
// `static void main(`, else the entry file's public class; qualified by
// the file's package.
func MainClass(src languages.Source) string {
	for _, f := range src.Files {
		if !isSource(f.Name) {
			continue
		}
		code := StripComments(string(f.Content))
		for _, m := range typeRe.FindAllStringSubmatch(code, -1) {
			if m[1] == "Main" {
				return qualify(code, "Main")
			}
		}
	}
	entry := src.Entry()
	code := StripComments(string(entry.Content))
	if loc := mainRe.FindStringIndex(code); loc != nil {
		var name string
		for _, m := range typeRe.FindAllStringSubmatchIndex(code[:loc[0]], -1) {
			name = code[m[2]:m[3]]
		}
		if name != "" {
			return qualify(code, name)
		}
	}
	if m := publicRe.FindStringSubmatch(code); m != nil {
		return qualify(code, m[1])
	}
	return "Main"
}

func qualify(code, class string) string {
	if m := packageRe.FindStringSubmatch(code); m != nil {
		return m[1] + "." + class
	}
	return class
}

// sourceName is the name javac needs for f: javac refuses a public class
// Foo in any file but Foo.java, and a grader's "main.java" or
// "solution.java" holding `public class Main` is the common case, so such
// a file is compiled under its class's name (in its own directory).
func sourceName(f languages.File) string {
	m := publicRe.FindStringSubmatch(StripComments(string(f.Content)))
	if m == nil {
		return f.Name
	}
	return path.Join(path.Dir(f.Name), m[1]+".java")
}

// Build compiles every .java file of the submission with javac, confined,
// into class files that the run sees read-only at /src.
func (l *Language) Build(ctx context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	j, err := findJDK()
	if err != nil {
		return nil, err
	}
	files := make([]languages.File, 0, len(src.Files))
	taken := map[string]bool{}
	for _, f := range src.Files {
		if isSource(f.Name) {
			if n := sourceName(f); !taken[n] {
				f.Name = n
			}
		}
		taken[f.Name] = true
		files = append(files, f)
	}
	if err := languages.WriteSource(filepath.Join(env.WorkDir, "src"), files); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(env.WorkDir, "classes"), 0o755); err != nil {
		return nil, err
	}
	args := append([]string{j.javac}, javacFlags...)
	args = append(args, "-d", "classes", "-sourcepath", "src")
	for _, f := range files {
		if isSource(f.Name) {
			args = append(args, filepath.Join("src", filepath.FromSlash(f.Name)))
		}
	}
	res, err := languages.RunTool(ctx, env, languages.Tool{Command: args, MemoryBytes: 1 << 30, Pids: 128,
		AddressSpace: 4 << 30, ReadOnly: j.readOnly()})
	if err != nil {
		return nil, err
	}
	if err := languages.CompileFailure("java", res); err != nil {
		return nil, err
	}
	classes, err := collectClasses(env.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("java: %w", err)
	}
	if len(classes) == 0 {
		return nil, &languages.CompileError{Language: "java", Output: "javac wrote no class: declare a class Main with `public static void main(String[] args)`"}
	}
	main := MainClass(src)
	return &languages.Artifact{Kind: languages.ArtifactNative, Files: classes,
		Command: []string{j.java, "-cp", languages.SrcGuestPath, main}, BuildLog: string(res.Stderr)}, nil
}

// collectClasses reads the class files javac wrote under dir/classes.
// javac ran confined but in a directory it owned, so nothing there is
// trusted: no symlink is followed (languages.ReadOutput), only regular
// .class files are taken, and their number and size are bounded.
func collectClasses(dir string) ([]languages.File, error) {
	var out []languages.File
	var total int64
	root := filepath.Join(dir, "classes")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".class") {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if len(out) >= maxClasses {
			return fmt.Errorf("javac wrote more than %d classes", maxClasses)
		}
		b, err := languages.ReadOutput(dir, rel)
		if err != nil {
			return err
		}
		if total += int64(len(b)); total > maxClassBytes {
			return fmt.Errorf("javac wrote more than %d bytes of classes", maxClassBytes)
		}
		name, _ := filepath.Rel(root, p)
		out = append(out, languages.File{Name: filepath.ToSlash(name), Content: b})
		return nil
	})
	return out, err
}

// The JVM's share of a run's limits.
const (
	// minHeadroom is what a JVM needs besides its heap at the least:
	// metaspace, the code cache, thread stacks in use, the CDS archive
	// and the runtime's own C heap. A hello world uses about 40 MiB of
	// it.
	minHeadroom = 64 << 20
	// minHeap is the smallest heap a run is given, however low the
	// memory limit: under it the JVM would not start, and the cgroup
	// still ends a run that needs more than its limit.
	minHeap = 16 << 20
	// Pids is the process limit of a Java run: a hello world's JVM has
	// about 20 threads (the launcher's, main, the VM thread, the
	// reference handler and finalizer, the signal dispatcher, two JIT
	// compilers, the service, sweeper, cleaner and periodic-task threads,
	// ...), measured in TestJavaThreads, so 64 leaves a program about 40
	// of its own while a thread bomb stops at the cgroup's pids limit.
	Pids = 64
	// maxStack bounds a thread's stack: deep recursion is what graders'
	// programs do, and 64 threads of it stay inside the address space.
	maxStack = 64 << 20
	minStack = 1 << 20
)

// RunFlags are the JVM flags of a run with memory bytes: the heap is the
// memory less max(64 MiB, a quarter) (never under 16 MiB), fixed from the
// start so a run's peak is its own; metaspace, the compressed class space
// and the code cache are bounded so the JVM's reservations fit the
// address-space limit; the serial collector and one processor keep GC
// and JIT threads few; each stack is a sixteenth of the memory (1 to 64
// MiB). A heap that runs out ends the JVM at once (ExitOnOutOfMemoryError)
// so the run reports the memory limit rather than whatever a program's
// catch of OutOfMemoryError did next.
func RunFlags(memory int64) []string {
	headroom := max(int64(minHeadroom), memory/4)
	heap := max(memory-headroom, int64(minHeap))
	stack := min(max(memory/16, int64(minStack)), int64(maxStack))
	mib := func(b int64) string { return strconv.FormatInt(b>>20, 10) + "m" }
	return []string{
		"-Xmx" + mib(heap), "-Xms" + mib(min(heap, 32<<20)), "-Xss" + mib(stack),
		"-XX:+UseSerialGC", "-XX:ActiveProcessorCount=1",
		"-XX:MaxMetaspaceSize=" + mib(max(headroom/2, 32<<20)), "-XX:CompressedClassSpaceSize=64m",
		"-XX:ReservedCodeCacheSize=64m", "-XX:MaxDirectMemorySize=" + mib(max(heap/4, 8<<20)),
		"-XX:+ExitOnOutOfMemoryError", "-XX:-UsePerfData", "-Xshare:auto",
		// The JVM's own messages (a thread it could not start, the heap's
		// end) go to stderr: its default, stdout, is the program's answer,
		// which a grader compares.
		"-XX:+DisplayVMOutputToStderr", "-Xlog:disable", "-Xlog:all=warning:stderr",
		"-Djava.io.tmpdir=/tmp", "-Dfile.encoding=UTF-8",
	}
}

// OutOfMemory is what the JVM prints (to stderr) as ExitOnOutOfMemoryError
// ends it for a full heap.
const OutOfMemory = "Terminating due to java.lang.OutOfMemoryError: Java heap space"

// TuneNative puts the run's limits into the command line: the JVM flags
// go between java and the class path.
func (l *Language) TuneNative(a *languages.Artifact, lim languages.ExecLimits) languages.NativeTuning {
	j, _ := findJDK() // the build found it
	cmd := []string{a.Command[0]}
	cmd = append(cmd, RunFlags(lim.MemoryBytes)...)
	cmd = append(cmd, a.Command[1:]...)
	return languages.NativeTuning{
		Command: cmd, Pids: Pids, ReadOnly: j.readOnly(),
		// The JVM reserves address space it does not use: the heap at
		// its maximum, 64 MiB each of class space and code cache, every
		// thread's stack. The cgroup bounds what it uses; without one
		// (not root) the flags above do.
		AddressSpace: uint64(lim.MemoryBytes) + uint64(Pids)*uint64(maxStack) + 1<<30,
		OutOfMemory:  OutOfMemory,
		// Each is read by the launcher or the JVM and would override
		// the flags above; the kernel layers would still hold.
		Unset: []string{"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH"},
	}
}
