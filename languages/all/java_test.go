package all_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/java"
)

// javaClass is a Main class around body (its main's statements).
func javaClass(imports, body string) string {
	return imports + "public class Main {\n    public static void main(String[] args) throws Exception {\n" + body + "\n    }\n}\n"
}

// TestJava runs Java through the executor: a JVM's limits are the run's
// (its heap from the memory limit, its threads within the process
// limit), a thrown exception is a runtime error, and the class run is
// found whatever the file is called.
func TestJava(t *testing.T) {
	testenv.Slow(t, "each row starts a JVM (about a second) after a javac (several)")
	needLanguage(t, "java")
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
		stdout  string // exact, unless "" and anyOut
		anyOut  bool
		stderr  string
		message string
		compile string
	}{
		{name: "stdin and args", files: file("Main.java", javaClass("import java.util.*;\n",
			`Scanner in = new Scanner(System.in); int a = in.nextInt(), b = in.nextInt(); System.out.println((a + b) + " " + String.join(",", args));`)),
			stdin: "2 40\n", args: []string{"x", "y"}, status: languages.StatusOK, stdout: "42 x,y\n"},
		{name: "main.java holding public class Main", files: file("main.java", javaClass("", `System.out.println("renamed");`)),
			status: languages.StatusOK, stdout: "renamed\n"},
		{name: "a class not named Main", files: file("Solution.java", "class Helper { static int f() { return 7; } }\n// class Decoy in a comment\npublic class Solution {\n  public static void main(String[] a) { System.out.println(Helper.f()); }\n}\n"),
			status: languages.StatusOK, stdout: "7\n"},
		{name: "a package", files: file("Main.java", "package app.judge;\n"+javaClass("", `System.out.println(Main.class.getName());`)),
			status: languages.StatusOK, stdout: "app.judge.Main\n"},
		{name: "two files", files: []languages.File{
			{Name: "Main.java", Content: []byte(javaClass("", `System.out.println(Util.twice(21));`))},
			{Name: "Util.java", Content: []byte("public class Util { static int twice(int x) { return 2 * x; } }\n")}},
			status: languages.StatusOK, stdout: "42\n"},
		{name: "exit code", files: file("Main.java", javaClass("", `System.exit(7);`)),
			status: languages.StatusRuntimeError, exit: 7},
		{name: "uncaught exception", files: file("Main.java", javaClass("", `int[] a = new int[1]; System.out.println(a[3]);`)),
			status: languages.StatusRuntimeError, exit: 1, stderr: "java.lang.ArrayIndexOutOfBoundsException"},
		{name: "deep recursion ends in StackOverflowError", files: file("Main.java", "public class Main {\n static int f(int n) { return f(n + 1) + 1; }\n public static void main(String[] a) { f(0); }\n}\n"),
			status: languages.StatusRuntimeError, exit: 1, stderr: "java.lang.StackOverflowError"},
		{name: "recursion 100000 deep fits the stack", files: file("Main.java", "public class Main {\n static long f(int n) { return n == 0 ? 0 : f(n - 1) + n; }\n public static void main(String[] a) { System.out.println(f(100000)); }\n}\n"),
			status: languages.StatusOK, stdout: "5000050000\n"},
		{name: "compile error", files: file("Main.java", javaClass("", `int x = "s";`)),
			status: languages.StatusCompileError, compile: "incompatible types: String cannot be converted to int"},
		{name: "time limit", files: file("Main.java", javaClass("", `long x = 0; while (true) { x++; }`)),
			limits: languages.ExecLimits{Timeout: time.Second}, status: languages.StatusTimeout, exit: -1, message: "1s"},
		{name: "heap past the memory limit", files: file("Main.java", javaClass("import java.util.*;\n",
			`List<byte[]> keep = new ArrayList<>(); while (true) keep.add(new byte[1 << 20]);`)),
			limits: languages.ExecLimits{MemoryBytes: 128 << 20}, status: languages.StatusMemoryLimit, exit: 3, message: "128 MiB", stderr: java.OutOfMemory},
		{name: "heap within the memory limit", files: file("Main.java", javaClass("",
			`byte[][] keep = new byte[48][]; for (int i = 0; i < keep.length; i++) { keep[i] = new byte[1 << 20]; keep[i][7] = 1; } System.out.println(keep.length);`)),
			limits: languages.ExecLimits{MemoryBytes: 128 << 20}, status: languages.StatusOK, stdout: "48\n"},
		{name: "a thread bomb stops at the process limit", root: true, files: file("Main.java", javaClass("",
			`int n = 0; try { while (true) { Thread t = new Thread(() -> { try { Thread.sleep(60000); } catch (InterruptedException e) {} }); t.setDaemon(true); t.start(); n++; } } catch (Throwable e) { System.out.println("stopped"); System.out.flush(); Runtime.getRuntime().halt(0); }`)),
			limits: languages.ExecLimits{Timeout: 10 * time.Second}, anyOut: true},
		{name: "a program's threads within the limit", files: file("Main.java", javaClass("",
			`Thread[] ts = new Thread[16]; int[] sum = new int[1]; for (int i = 0; i < ts.length; i++) { ts[i] = new Thread(() -> { synchronized (sum) { sum[0]++; } }); ts[i].start(); } for (Thread t : ts) t.join(); System.out.println(sum[0]);`)),
			status: languages.StatusOK, stdout: "16\n"},
		{name: "JAVA_TOOL_OPTIONS cannot raise the heap", files: file("Main.java", javaClass("", `System.out.println(Runtime.getRuntime().maxMemory() <= (256L << 20));`)),
			status: languages.StatusOK, stdout: "true\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				testenv.Root(t, "the process limit of a native run is a cgroup's, which needs root")
			}
			lim := tc.limits
			lim.CompileTimeout = 5 * time.Minute
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "java", Source: languages.Source{Files: tc.files},
				Stdin: []byte(tc.stdin), Args: tc.args, Limits: lim, Env: map[string]string{"JAVA_TOOL_OPTIONS": "-Xmx4g"}})
			if err != nil {
				t.Fatal(err)
			}
			dump := fmt.Sprintf("status %s exit %d message %q\ncompile: %q\nstdout: %.300q\nstderr: %.600q", res.Status, res.ExitCode, res.Message, res.CompileOutput, res.Stdout, res.Stderr)
			if strings.HasPrefix(tc.name, "a thread bomb") {
				// However it ends (the program's catch, the deadline), it
				// ends held at the process limit.
				if res.RunTime > 10*time.Second || !strings.Contains(string(res.Stdout)+res.Message, "stopped") && !strings.Contains(res.Message, "process limit") {
					t.Fatalf("the thread bomb was not stopped by the process limit:\n%s", dump)
				}
				return
			}
			if res.Status != tc.status || res.ExitCode != tc.exit {
				t.Fatalf("want status %s exit %d; got\n%s", tc.status, tc.exit, dump)
			}
			if !tc.anyOut && string(res.Stdout) != tc.stdout {
				t.Errorf("stdout %q, want %q\n%s", res.Stdout, tc.stdout, dump)
			}
			for _, c := range []struct{ got, want string }{{string(res.Stderr), tc.stderr}, {res.Message, tc.message}, {res.CompileOutput, tc.compile}} {
				if !strings.Contains(c.got, c.want) {
					t.Errorf("want %q in %q\n%s", c.want, c.got, dump)
				}
			}
			if strings.Contains(string(res.Stderr), "Picked up") {
				t.Errorf("the JVM read an options variable of the request:\n%s", dump)
			}
		})
	}
}

// TestJavaThreads measures the room a program has under java.Pids: the
// threads it can start before the process limit refuses one (the JVM's
// own, about 20, take the rest), and that the refusal is an exception the
// program sees, not a hang.
func TestJavaThreads(t *testing.T) {
	needLanguage(t, "java")
	testenv.Root(t, "the process limit of a native run is a cgroup's, which needs root")
	e := newExecutor(t, "")
	res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "java", Limits: languages.ExecLimits{CompileTimeout: 5 * time.Minute},
		Source: src("Main.java", javaClass("",
			`int n = 0; try { while (true) { Thread t = new Thread(() -> { try { Thread.sleep(60000); } catch (InterruptedException e) {} }); t.setDaemon(true); t.start(); n++; } } catch (OutOfMemoryError e) { System.out.println(n); System.out.flush(); Runtime.getRuntime().halt(0); }`))})
	if err != nil || res.Status != languages.StatusOK {
		t.Fatalf("%v %+v %s", err, res, res.Stderr)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	t.Logf("a program started %d threads of its own before the process limit of %d; run %s, peak %d MiB", n, java.Pids, res.RunTime, res.PeakMemory>>20)
	if n < 16 || n >= java.Pids {
		t.Errorf("%d threads: want at least 16 and fewer than the limit of %d", n, java.Pids)
	}
}

// TestJavaMainClass: the class a run starts, found from the source.
func TestJavaMainClass(t *testing.T) {
	for _, tc := range []struct{ name, code, want string }{
		{"Main by convention", "class Helper { public static void main(String[] a) {} }\nclass Main { public static void main(String[] a) {} }\n", "Main"},
		{"the class with main", "class A {}\npublic class Solution { public static void main(String[] a) {} }\n", "Solution"},
		{"a class named in a comment or string is not one", "/* class Main */ public class P { String s = \"class Main\"; public static void main(String[] a) {} }\n", "P"},
		{"a package qualifies it", "package x.y;\npublic class P { public static void main(String[] a) {} }\n", "x.y.P"},
		{"no main: the public class", "public class Q {}\n", "Q"},
		{"nothing public: Main", "interface I {}\n", "Main"},
		{"empty", "", "Main"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := java.MainClass(src("Main2.java", tc.code)); got != tc.want {
				t.Errorf("MainClass = %q, want %q", got, tc.want)
			}
		})
	}
}
