// Package kotlin is the Kotlin language on the JVM: JetBrains' Kotlin
// compiler from the npm registry's kotlin-compiler package (the whole
// compiler distribution, pinned by version and sha512 in
// toolchains/provision.go) runs on Debian's OpenJDK 17 as a confined
// build job (languages.RunTool: the kernel layers, no network, cached by
// content as every build is), and the classes run on the same JDK as a
// confined native process with the limits languages/java tells a JVM
// (java.RunFlags, java.Pids). Import it for its side effect of
// registering "kotlin".
//
// Debian's own kotlin package (1.3.31, 2019) compiles and runs here too
// but lacks what current Kotlin code calls (readln, lowercase, Char.code
// ...); docs/RATIONALE.md has the measurements behind the choice.
//
// The class run is the file facade of the file that declares a top-level
// `fun main` (main.kt's is MainKt), else the object or class around a
// `@JvmStatic fun main`; see MainClass.
//
// Validation profile rules: "import:PACKAGE" refuses an import of PACKAGE
// or of anything under it (e.g. "import:java.net", "import:kotlin.reflect").
package kotlin

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/java"
	"github.com/moat-sandbox/moat/toolchains"
)

func init() {
	languages.Register(Kotlin)
	Kotlin.registered.Store(true)
}

// Kotlin is the registered language.
var Kotlin = &Language{}

// Language compiles Kotlin to classes and runs them on the JVM.
type Language struct {
	registered atomic.Bool
}

// NPMPackage is the npm package that holds the compiler distribution
// (bin/, lib/kotlin-compiler.jar, lib/kotlin-stdlib.jar, ...).
const NPMPackage = "kotlin-compiler"

var _ languages.Language = (*Language)(nil)
var _ languages.Checker = (*Language)(nil)
var _ languages.NativeTuner = (*Language)(nil)
var _ languages.BuildIdentifier = (*Language)(nil)

// home is the compiler distribution found in the toolchains directory,
// and the JDK that runs it and the programs it builds.
type home struct {
	lib     string // .../node_modules/kotlin-compiler/lib, symlinks resolved
	version string // build.txt: "2.4.20"
	java    string
	// readOnly is what a compile and a run read outside the system
	// directories: the distribution's lib and the JDK's /etc directory.
	readOnly []string
}

// jars a program is compiled against and runs with besides its own
// classes: the standard library and kotlinx.coroutines, which the
// distribution ships and Kotlin's own playground offers.
var runtimeJars = []string{"kotlin-stdlib.jar", "kotlinx-coroutines-core-jvm.jar"}

var findHome = sync.OnceValues(func() (home, error) {
	build, err := toolchains.NPMFile(NPMPackage + "/build.txt")
	if err != nil {
		return home{}, err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(build))
	if err != nil {
		return home{}, fmt.Errorf("%w: %s: %v", toolchains.ErrMissing, build, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "build.txt"))
	if err != nil {
		return home{}, fmt.Errorf("%w: %v", toolchains.ErrMissing, err)
	}
	h := home{lib: filepath.Join(dir, "lib"), version: strings.TrimSpace(string(b))}
	for _, jar := range append([]string{"kotlin-compiler.jar", "kotlin-preloader.jar"}, runtimeJars...) {
		if _, err := os.Stat(filepath.Join(h.lib, jar)); err != nil {
			return home{}, fmt.Errorf("%w: the Kotlin compiler in %s has no %s (%s)", toolchains.ErrMissing, dir, jar, toolchains.MissingHint("kotlin"))
		}
	}
	jdk, ro, err := java.Runtime()
	if err != nil {
		return home{}, err
	}
	h.java = jdk
	h.readOnly = append([]string{h.lib}, ro...)
	return h, nil
})

func (l *Language) version() string {
	if !l.registered.Load() {
		return "" // at init: nothing is looked up just by starting
	}
	h, err := findHome()
	if err != nil {
		return "unavailable"
	}
	return h.version
}

// Info describes Kotlin.
func (l *Language) Info() languages.Info {
	v := l.version()
	return languages.Info{
		Name: "kotlin", Aliases: []string{"kt", "kotlinc"}, Version: v,
		Path: languages.PathNative, Extensions: []string{".kt"},
		Toolchain: "Kotlin " + v + " kotlinc (npm kotlin-compiler) + Debian OpenJDK 17 (native, confined; the heap from the memory limit)",
		Why: "Kotlin compiles to JVM classes and no JVM runs as a WASI command; the compiler and the program run on Debian's OpenJDK " +
			"under every kernel layer, the JVM told the run's limits as java's is",
	}
}

// Available reports what is missing.
func (l *Language) Available() error {
	_, err := findHome()
	return err
}

// BuildID is part of the build cache key: the compiler's flags (the
// compiler's version is the language's).
func (l *Language) BuildID() string { return strings.Join(kotlincFlags, " ") }

// jvmFlags hold the compiler's own JVM small and single-threaded, like
// javac's.
var jvmFlags = []string{
	"-Xmx768m", "-Xss8m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=1", "-XX:TieredStopAtLevel=1",
	"-Xshare:auto", "-XX:-UsePerfData", "-Djava.io.tmpdir=/tmp",
	// No colours, so no jansi: it would write a native library to /tmp
	// and load it, which the kernel layers refuse (a job's /tmp is
	// noexec), leaving a warning in every build log.
	"-Dkotlin.colors.enabled=false",
}

// kotlincFlags: no warnings (a grader's compile_output is the errors), no
// kotlin-reflect on the class path (the run does not carry it), classes
// for the JDK that runs them, and no compiler plugins or scripts: a
// submission brings sources only.
var kotlincFlags = []string{"-nowarn", "-no-reflect", "-jvm-target", "17"}

// Limits of a build's output, as java's.
const (
	maxClasses    = 4096
	maxClassBytes = 64 << 20
)

var (
	importRe  = regexp.MustCompile(`^\s*import\s+([\w.` + "`" + `]+?)(?:\.\*)?(?:\s+as\s+\w+)?\s*;?\s*$`)
	packageRe = regexp.MustCompile(`(?m)^\s*package\s+([\w.]+)`)
	jvmNameRe = regexp.MustCompile(`@file\s*:\s*JvmName\s*\(\s*"([A-Za-z_$][\w$]*)"\s*\)`)
	// topMainRe is a top-level `fun main(`: at the start of a line, as
	// every formatter writes it (a member main is indented).
	topMainRe = regexp.MustCompile(`(?m)^(?:suspend\s+)?fun\s+main\s*\(`)
	// staticMainRe is a main on an object or companion (`@JvmStatic fun
	// main(`); typeRe the declarations that could hold it.
	staticMainRe = regexp.MustCompile(`@JvmStatic\s+(?:(?:public|suspend)\s+)*fun\s+main\s*\(`)
	typeRe       = regexp.MustCompile(`\b(?:class|object)\s+([A-Za-z_][\w]*)`)
	srcPrefix    = regexp.MustCompile(`(?m)^src/`)
)

// Validate adds the "import:" check and requires a .kt file.
func (l *Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	vs = append(vs, languages.DenyLines(src, p, "import:", func(line, target string) bool {
		m := importRe.FindStringSubmatch(line)
		if m == nil {
			return false
		}
		name := strings.ReplaceAll(m[1], "`", "")
		return name == target || strings.HasPrefix(name, target+".")
	})...)
	if !slices.ContainsFunc(src.Files, func(f languages.File) bool { return isSource(f.Name) }) {
		vs = append(vs, languages.Violation{Rule: languages.RuleFiles, File: src.Entry().Name,
			Message: "no Kotlin source file: name the entry file main.kt (or any name ending in .kt)"})
	}
	return vs
}

func isSource(name string) bool { return strings.EqualFold(path.Ext(name), ".kt") }

// FacadeName is the class kotlinc makes of a file's top-level functions:
// its @file:JvmName, else its base name with every character that is not
// a letter or digit made '_', capitalized, and "Kt" added (main.kt's is
// MainKt, hello-world.kt's Hello_worldKt), as the compiler's
// PackagePartClassUtils names it.
func FacadeName(name, code string) string {
	if m := jvmNameRe.FindStringSubmatch(code); m != nil {
		return m[1]
	}
	base := strings.TrimSuffix(path.Base(name), path.Ext(name))
	if base == "" {
		return "_Kt"
	}
	r := []rune(base)
	for i, c := range r {
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			r[i] = '_'
		}
	}
	if !unicode.IsLetter(r[0]) && r[0] != '_' && r[0] != '$' {
		return "_" + string(r) + "Kt"
	}
	r[0] = unicode.ToUpper(r[0])
	return string(r) + "Kt"
}

// MainClass is the class a run starts: the facade of the entry file when
// it declares a top-level `fun main`, else of the first file that does;
// else the object or class around the first `@JvmStatic fun main`; else
// the entry file's facade (the JVM will say it has no main). Qualified by
// the file's package.
func MainClass(src languages.Source) string {
	entry := src.Entry()
	files := []languages.File{entry}
	for _, f := range src.Files {
		if f.Name != entry.Name {
			files = append(files, f)
		}
	}
	for _, f := range files {
		if !isSource(f.Name) {
			continue
		}
		code := java.StripComments(string(f.Content))
		if topMainRe.MatchString(code) {
			return qualify(code, FacadeName(f.Name, string(f.Content)))
		}
	}
	for _, f := range files {
		if !isSource(f.Name) {
			continue
		}
		code := java.StripComments(string(f.Content))
		if loc := staticMainRe.FindStringIndex(code); loc != nil {
			var name string
			for _, m := range typeRe.FindAllStringSubmatchIndex(code[:loc[0]], -1) {
				if n := code[m[2]:m[3]]; n != "object" { // `companion object` has no name of its own
					name = n
				}
			}
			if name != "" {
				return qualify(code, name)
			}
		}
	}
	return qualify(java.StripComments(string(entry.Content)), FacadeName(entry.Name, string(entry.Content)))
}

func qualify(code, class string) string {
	if m := packageRe.FindStringSubmatch(code); m != nil {
		return m[1] + "." + class
	}
	return class
}

func (h home) classPath(prefix string) string {
	parts := []string{}
	if prefix != "" {
		parts = append(parts, prefix)
	}
	for _, j := range runtimeJars {
		parts = append(parts, filepath.Join(h.lib, j))
	}
	return strings.Join(parts, ":")
}

// Build compiles every .kt file of the submission with kotlinc, confined,
// into class files that the run sees read-only at /src.
func (l *Language) Build(ctx context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	h, err := findHome()
	if err != nil {
		return nil, err
	}
	if err := languages.WriteSource(filepath.Join(env.WorkDir, "src"), src.Files); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(env.WorkDir, "classes"), 0o755); err != nil {
		return nil, err
	}
	// The compiler runs as the kotlinc script runs it (the preloader
	// loads the compiler's jar), without the script: no shell, and no
	// JAVA_OPTS or KOTLIN_* variable of anyone's chooses its flags.
	args := append([]string{h.java}, jvmFlags...)
	args = append(args, "-Dkotlin.home="+filepath.Dir(h.lib),
		"-cp", filepath.Join(h.lib, "kotlin-preloader.jar"), "org.jetbrains.kotlin.preloading.Preloader",
		"-cp", filepath.Join(h.lib, "kotlin-compiler.jar"), "org.jetbrains.kotlin.cli.jvm.K2JVMCompiler")
	args = append(args, kotlincFlags...)
	args = append(args, "-classpath", h.classPath(""), "-d", "classes")
	for _, f := range src.Files {
		if isSource(f.Name) {
			args = append(args, filepath.Join("src", filepath.FromSlash(f.Name)))
		}
	}
	res, err := languages.RunTool(ctx, env, languages.Tool{Command: args, MemoryBytes: 1536 << 20, Pids: 128,
		AddressSpace: 6 << 30, ReadOnly: h.readOnly})
	if err != nil {
		return nil, err
	}
	if err := languages.CompileFailure("kotlin", res); err != nil {
		// kotlinc names a file by the path it was given (src/main.kt):
		// the submitter named it main.kt.
		if ce, ok := err.(*languages.CompileError); ok {
			ce.Output = srcPrefix.ReplaceAllString(ce.Output, "")
		}
		return nil, err
	}
	classes, err := collectClasses(env.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("kotlin: %w", err)
	}
	if len(classes) == 0 {
		return nil, &languages.CompileError{Language: "kotlin", Output: "kotlinc wrote no class: declare `fun main()` in main.kt"}
	}
	return &languages.Artifact{Kind: languages.ArtifactNative, Files: classes,
		Command: []string{h.java, "-cp", h.classPath(languages.SrcGuestPath), MainClass(src)}, BuildLog: string(res.Stderr)}, nil
}

// collectClasses reads what kotlinc wrote under dir/classes: the class
// files and the module's .kotlin_module metadata. kotlinc ran confined
// but in a directory it owned, so nothing there is trusted: no symlink is
// followed (languages.ReadOutput), only regular files of those kinds are
// taken, and their number and size are bounded.
func collectClasses(dir string) ([]languages.File, error) {
	var out []languages.File
	var total int64
	root := filepath.Join(dir, "classes")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".class") && !strings.HasSuffix(p, ".kotlin_module") {
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
			return fmt.Errorf("kotlinc wrote more than %d classes", maxClasses)
		}
		b, err := languages.ReadOutput(dir, rel)
		if err != nil {
			return err
		}
		if total += int64(len(b)); total > maxClassBytes {
			return fmt.Errorf("kotlinc wrote more than %d bytes of classes", maxClassBytes)
		}
		name, _ := filepath.Rel(root, p)
		out = append(out, languages.File{Name: filepath.ToSlash(name), Content: b})
		return nil
	})
	return out, err
}

// TuneNative puts the run's limits into the command line as java's: the
// JVM flags between java and the class path, the same process limit,
// and the compiler's lib (the standard library) readable.
func (l *Language) TuneNative(a *languages.Artifact, lim languages.ExecLimits) languages.NativeTuning {
	h, _ := findHome() // the build found it
	t := java.Java.TuneNative(&languages.Artifact{Command: a.Command[:1]}, lim)
	t.Command = append(t.Command, a.Command[1:]...)
	t.ReadOnly = h.readOnly
	return t
}
