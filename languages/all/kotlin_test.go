package all_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/java"
	"github.com/moat-sandbox/moat/languages/kotlin"
)

// TestKotlin runs Kotlin through the executor: current Kotlin (readln,
// lowercase, collections, data classes, coroutines) compiles and runs, a
// compile error is reported with kotlinc's message, an exception is a
// runtime error, and the run has java's JVM limits (its heap from the
// memory limit, its threads within java.Pids; the options variables of a
// request are not read).
func TestKotlin(t *testing.T) {
	testenv.Slow(t, "each row is a kotlinc run (6-8 CPU-seconds) and a JVM start")
	needLanguage(t, "kotlin")
	e := newExecutor(t, "")
	for _, tc := range []struct {
		name   string
		files  []languages.File
		stdin  string
		args   []string
		limits languages.ExecLimits
		root   bool // a cgroup limit

		status  languages.Status
		exit    int
		stdout  string
		stderr  string
		message string
		compile string
	}{
		// One compile for the standard library, coroutines and the heap
		// the request's JAVA_TOOL_OPTIONS could not raise: each row is a
		// kotlinc run of several CPU-seconds.
		{name: "stdin, args, the standard library and coroutines", files: file("main.kt", `import kotlinx.coroutines.*

data class P(val name: String, val n: Int)

fun main(args: Array<String>) = runBlocking {
    val n = readln().trim().toInt()
    val xs = readln().split(" ").map { it.toInt() }
    val ps = xs.take(n).mapIndexed { i, x -> P("p$i", x) }.sortedByDescending { it.n }
    val a = async { 20 }
    val b = async { 22 }
    println("${xs.take(n).sum()} ${ps.first()} ${"ABC".lowercase()} ${'a'.code} ${args.joinToString(",")} ${readlnOrNull()} ${a.await() + b.await()}")
    println(Runtime.getRuntime().maxMemory() <= (256L shl 20))
}
`), stdin: "2\n3 4 5\n", args: []string{"x", "y"}, status: languages.StatusOK, stdout: "7 P(name=p1, n=4) abc 97 x,y null 42\ntrue\n"},
		{name: "a package, a second file and a main on an object", files: []languages.File{
			{Name: "Solution.kt", Content: []byte("package app.judge\n\nobject Solution {\n    @JvmStatic fun main(args: Array<String>) { println(twice(21)) }\n}\n")},
			{Name: "util.kt", Content: []byte("package app.judge\n\nfun twice(x: Int) = 2 * x\n")}},
			status: languages.StatusOK, stdout: "42\n"},
		{name: "a file name that is no identifier", files: file("hello-world.kt", "fun main() { println(object {}.javaClass.enclosingClass?.name ?: Thread.currentThread().stackTrace.last().className) }\n"),
			status: languages.StatusOK, stdout: "Hello_worldKt\n"},
		{name: "compile error", files: file("main.kt", "fun main() {\n    val x: Int = \"s\"\n}\n"),
			status: languages.StatusCompileError, compile: "main.kt:2:16: error: initializer type mismatch"},
		{name: "uncaught exception", files: file("main.kt", "fun main() {\n    val a = IntArray(1)\n    println(a[3])\n}\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: "java.lang.ArrayIndexOutOfBoundsException"},
		{name: "time limit", files: file("main.kt", "fun main() {\n    var x = 0L\n    while (true) { x++ }\n}\n"),
			limits: languages.ExecLimits{Timeout: time.Second}, status: languages.StatusTimeout, exit: -1, message: "1s"},
		{name: "heap past the memory limit", files: file("main.kt", "fun main() {\n    val keep = ArrayList<ByteArray>()\n    while (true) keep.add(ByteArray(1 shl 20))\n}\n"),
			limits: languages.ExecLimits{MemoryBytes: 128 << 20}, status: languages.StatusMemoryLimit, exit: 3, message: "128 MiB", stderr: java.OutOfMemory},
		{name: "a thread bomb stops at the process limit", root: true, files: file("main.kt", `fun main() {
    var n = 0
    try {
        while (true) {
            val t = Thread { Thread.sleep(60000) }
            t.isDaemon = true
            t.start()
            n++
        }
    } catch (e: Throwable) {
        println("stopped after $n")
        System.out.flush()
        Runtime.getRuntime().halt(0)
    }
}
`), limits: languages.ExecLimits{Timeout: 10 * time.Second}, status: languages.StatusOK, stdout: "stopped after "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				testenv.Root(t, "the process limit of a native run is a cgroup's, which needs root")
			}
			lim := tc.limits
			lim.CompileTimeout = 5 * time.Minute
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "kotlin", Source: languages.Source{Files: tc.files},
				Stdin: []byte(tc.stdin), Args: tc.args, Limits: lim, Env: map[string]string{"JAVA_TOOL_OPTIONS": "-Xmx4g"}})
			if err != nil {
				t.Fatal(err)
			}
			dump := fmt.Sprintf("status %s exit %d message %q\ncompile: %q\nstdout: %.300q\nstderr: %.600q\ncompile time %s", res.Status, res.ExitCode, res.Message, res.CompileOutput, res.Stdout, res.Stderr, res.CompileTime)
			if res.Status != tc.status || res.ExitCode != tc.exit {
				t.Fatalf("want status %s exit %d; got\n%s", tc.status, tc.exit, dump)
			}
			if tc.root {
				// The JVM's own threads take part of java.Pids: the
				// program gets the rest, and no more.
				var n int
				if _, err := fmt.Sscanf(string(res.Stdout), "stopped after %d", &n); err != nil || n < 16 || n >= java.Pids {
					t.Errorf("a program started %d threads under a process limit of %d (err %v)\n%s", n, java.Pids, err, dump)
				}
				t.Logf("a program started %d threads of its own under the process limit of %d", n, java.Pids)
			} else if tc.status != languages.StatusMemoryLimit && tc.status != languages.StatusTimeout && string(res.Stdout) != tc.stdout {
				t.Errorf("stdout %q, want %q\n%s", res.Stdout, tc.stdout, dump)
			}
			for _, c := range []struct{ got, want string }{{string(res.Stderr), tc.stderr}, {res.Message, tc.message}, {res.CompileOutput, tc.compile}} {
				if !strings.Contains(c.got, c.want) {
					t.Errorf("want %q in %q\n%s", c.want, c.got, dump)
				}
			}
			if strings.Contains(res.CompileOutput, "src/") {
				t.Errorf("the compile output names the build's directory, not the submitter's file:\n%s", dump)
			}
			if strings.Contains(string(res.Stderr), "Picked up") {
				t.Errorf("the JVM read an options variable of the request:\n%s", dump)
			}
			t.Logf("compile %s, run %s, peak %d MiB", res.CompileTime, res.RunTime, res.PeakMemory>>20)
		})
	}
}

// TestKotlinMainClass: the class a run starts, found from the source as
// kotlinc names it.
func TestKotlinMainClass(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []languages.File
		want  string
	}{
		{"main.kt's facade", file("main.kt", "fun main() {}\n"), "MainKt"},
		{"a name made an identifier", file("hello-world.kt", "fun main() {}\n"), "Hello_worldKt"},
		{"a name starting with a digit", file("1st.kt", "fun main() {}\n"), "_1stKt"},
		{"@file:JvmName", file("main.kt", "@file:JvmName(\"Prog\")\n\nfun main() {}\n"), "Prog"},
		{"a package qualifies it", file("main.kt", "package a.b\n\nfun main() {}\n"), "a.b.MainKt"},
		{"suspend main", file("main.kt", "suspend fun main() {}\n"), "MainKt"},
		{"main in a comment is none", file("main.kt", "/*\nfun main() {}\n*/\nobject App {\n    @JvmStatic fun main(args: Array<String>) {}\n}\n"), "App"},
		{"a companion's main is its class's", file("Main.kt", "class Solver {\n    companion object {\n        @JvmStatic\n        fun main(args: Array<String>) {}\n    }\n}\n"), "Solver"},
		{"the file with main, not the entry", []languages.File{{Name: "util.kt", Content: []byte("fun f() = 1\n")}, {Name: "app.kt", Content: []byte("fun main() {}\n")}}, "AppKt"},
		{"nothing: the entry's facade", file("main.kt", "fun f() = 1\n"), "MainKt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kotlin.MainClass(languages.Source{Files: tc.files}); got != tc.want {
				t.Errorf("MainClass = %q, want %q", got, tc.want)
			}
		})
	}
}
