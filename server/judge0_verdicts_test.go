package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/server"
)

// judge0Verdict is one submission of the verdict table and the status
// Judge0 CE gives it.
type judge0Verdict struct {
	name     string
	src      string
	expected string // "" sends no expected_output
	memoryKB int    // 0: Judge0's default
	status   int
}

// judge0Want is Judge0's description of each status the table expects
// (app/enumerations/status.rb), asserted as the response carries it.
var judge0Want = map[int]string{
	3: "Accepted", 4: "Wrong Answer", 5: "Time Limit Exceeded", 6: "Compilation Error",
	7: "Runtime Error (SIGSEGV)", 9: "Runtime Error (SIGFPE)", 10: "Runtime Error (SIGABRT)",
	11: "Runtime Error (NZEC)", 12: "Runtime Error (Other)",
}

// judge0VerdictTable is, for each moat language behind a Judge0 id, the
// verdicts that apply to it: Accepted and Wrong Answer (the output judged
// as Judge0 judges it), Time Limit Exceeded, a non-zero exit and an
// uncaught error (NZEC, as Judge0 reports an interpreter's or a JVM's
// exit status 1), a compilation error for the languages a compiler
// checks, the signals a program of the language can die of, and the
// memory limit (Runtime Error (Other), as Judge0 reports the SIGKILL of
// its cgroup's OOM killer) on each path: WASM (C, Python), the JVM's
// heap, and a native process's cgroup (Perl).
var judge0VerdictTable = []struct {
	lang string
	ids  []int // every Judge0 id of the language; the first is submitted
	runs []judge0Verdict
}{
	{"bash", []int{46}, []judge0Verdict{
		{"accepted", "read n; echo $((n * 6))", "42", 0, 3},
		{"wrong answer", "echo 41", "42", 0, 4},
		{"time limit", "while :; do :; done", "", 0, 5},
		{"nzec", "exit 3", "", 0, 11},
	}},
	{"c", []int{50, 48, 49, 75}, []judge0Verdict{
		{"accepted", "#include <stdio.h>\nint main(void){int n;scanf(\"%d\",&n);printf(\"%d\\n\",n*6);return 0;}", "42", 0, 3},
		{"accepted trailing whitespace", "#include <stdio.h>\nint main(void){puts(\"42 \\n\\n\");return 0;}", "42", 0, 3},
		{"wrong answer", "#include <stdio.h>\nint main(void){puts(\"41\");return 0;}", "42", 0, 4},
		{"wrong answer leading space", "#include <stdio.h>\nint main(void){puts(\" 42\");return 0;}", "42", 0, 4},
		{"time limit", "int main(void){volatile int x=0;for(;;)x++;}", "", 0, 5},
		{"compilation error", "int main(void){ oops }", "", 0, 6},
		{"sigsegv", "int main(void){volatile int *p=(int*)0xFFFFFFF0u;*p=1;return 0;}", "", 0, 7},
		{"sigfpe", "#include <stdio.h>\nint main(int c,char**v){volatile int a=1,z=c-1;printf(\"%d\\n\",a/z);return 0;}", "", 0, 9},
		{"sigabrt", "#include <stdlib.h>\nint main(void){abort();}", "", 0, 10},
		{"nzec", "int main(void){return 3;}", "", 0, 11},
		{"memory limit", "#include <stdlib.h>\n#include <string.h>\n#include <stdio.h>\nint main(void){long s=0;for(int i=0;i<400;i++){char *p=malloc(1<<20);if(!p)return 5;memset(p,i,1<<20);s+=p[i];}printf(\"%ld\\n\",s);}", "", 65536, 12},
	}},
	{"cpp", []int{54, 52, 53, 76}, []judge0Verdict{
		{"accepted", "#include <iostream>\nint main(){int n;std::cin>>n;std::cout<<n*6<<std::endl;}", "42", 0, 3},
		{"wrong answer", "#include <iostream>\nint main(){std::cout<<41<<std::endl;}", "42", 0, 4},
		{"time limit", "int main(){volatile int x=0;for(;;)x++;}", "", 0, 5},
		{"compilation error", "int main(){ std::cout << 1; }", "", 0, 6},
		{"sigsegv", "int main(){volatile int *p=(int*)0xFFFFFFF0u;*p=1;}", "", 0, 7},
		{"sigabrt", "#include <cstdlib>\nint main(){std::abort();}", "", 0, 10},
		{"nzec", "int main(){return 3;}", "", 0, 11},
	}},
	{"go", []int{95, 60}, []judge0Verdict{
		{"accepted", "package main\nimport \"fmt\"\nfunc main(){var n int;fmt.Scan(&n);fmt.Println(n*6)}", "42", 0, 3},
		{"wrong answer", "package main\nimport \"fmt\"\nfunc main(){fmt.Println(41)}", "42", 0, 4},
		{"time limit", "package main\nfunc main(){x:=0;for{x++}}", "", 0, 5},
		{"compilation error", "package main\nfunc main(){ oops }", "", 0, 6},
		{"nzec", "package main\nimport \"os\"\nfunc main(){os.Exit(3)}", "", 0, 11},
		{"panic nzec", "package main\nfunc main(){var m map[string]int;m[\"a\"]=1}", "", 0, 11},
	}},
	{"java", []int{91, 62}, []judge0Verdict{
		{"accepted", "import java.util.Scanner;\npublic class Main{public static void main(String[] a){System.out.println(new Scanner(System.in).nextInt()*6);}}", "42", 0, 3},
		{"wrong answer", "public class Main{public static void main(String[] a){System.out.println(41);}}", "42", 0, 4},
		{"time limit", "public class Main{public static void main(String[] a){long x=0;while(true)x++;}}", "", 0, 5},
		{"compilation error", "public class Main{public static void main(String[] a){ oops }}", "", 0, 6},
		{"nzec", "public class Main{public static void main(String[] a){System.exit(3);}}", "", 0, 11},
		{"exception nzec", "public class Main{public static void main(String[] a){throw new RuntimeException(\"boom\");}}", "", 0, 11},
		{"memory limit", "import java.util.*;\npublic class Main{public static void main(String[] a){List<long[]> l=new ArrayList<>();for(int i=0;i<400;i++)l.add(new long[1<<17]);System.out.println(l.size());}}", "", 65536, 12},
	}},
	{"kotlin", []int{78}, []judge0Verdict{
		{"accepted", "fun main() {\n    println(readln().trim().toInt() * 6)\n}\n", "42", 0, 3},
		{"wrong answer", "fun main() {\n    println(41)\n}\n", "42", 0, 4},
		{"time limit", "fun main() {\n    var x = 0L\n    while (true) x++\n}\n", "", 0, 5},
		{"compilation error", "fun main() { oops }\n", "", 0, 6},
		{"nzec", "fun main() {\n    kotlin.system.exitProcess(3)\n}\n", "", 0, 11},
		{"exception nzec", "fun main() {\n    throw RuntimeException(\"boom\")\n}\n", "", 0, 11},
		{"memory limit", "fun main() {\n    val l = ArrayList<LongArray>()\n    repeat(400) { l.add(LongArray(1 shl 17)) }\n    println(l.size)\n}\n", "", 65536, 12},
	}},
	{"javascript", []int{93, 63}, []judge0Verdict{
		{"accepted", "console.log(6*7)", "42", 0, 3},
		{"wrong answer", "console.log(41)", "42", 0, 4},
		{"time limit", "for(;;){}", "", 0, 5},
		{"exception nzec", "throw new Error('boom')", "", 0, 11},
	}},
	{"lua", []int{64}, []judge0Verdict{
		{"accepted", "print(io.read('n')*6)", "42", 0, 3},
		{"wrong answer", "print(41)", "42", 0, 4},
		{"time limit", "while true do end", "", 0, 5},
		{"nzec", "os.exit(3)", "", 0, 11},
		{"error nzec", "error('boom')", "", 0, 11},
	}},
	{"perl", []int{85}, []judge0Verdict{
		{"accepted", "my $n = <STDIN>; print $n*6, \"\\n\";", "42", 0, 3},
		{"wrong answer", "print \"41\\n\";", "42", 0, 4},
		{"time limit", "1 while 1;", "", 0, 5},
		{"nzec", "exit 3;", "", 0, 11},
		{"die nzec", "die 'boom';", "", 0, 11},
		{"memory limit", "my @a; push @a, 'x' x (1<<20) for 1..400; print scalar(@a), \"\\n\";", "", 65536, 12},
	}},
	{"php", []int{68}, []judge0Verdict{
		{"accepted", "<?php echo intval(fgets(STDIN))*6, \"\\n\";", "42", 0, 3},
		{"wrong answer", "<?php echo \"41\\n\";", "42", 0, 4},
		{"time limit", "<?php while (true) {}", "", 0, 5},
		{"nzec", "<?php exit(3);", "", 0, 11},
		{"exception nzec", "<?php throw new Exception('boom');", "", 0, 11},
	}},
	{"python", []int{92, 71}, []judge0Verdict{
		{"accepted", "print(int(input())*6)", "42", 0, 3},
		{"wrong answer", "print(41)", "42", 0, 4},
		{"time limit", "while True: pass", "", 0, 5},
		{"nzec", "raise SystemExit(2)", "", 0, 11},
		{"exception nzec", "1/0", "", 0, 11},
		{"memory limit", "x = [bytearray(1 << 20) for _ in range(400)]\nprint(len(x))", "", 65536, 12},
	}},
	{"ruby", []int{72}, []judge0Verdict{
		{"accepted", "puts gets.to_i * 6", "42", 0, 3},
		{"wrong answer", "puts 41", "42", 0, 4},
		{"time limit", "loop {}", "", 0, 5},
		{"nzec", "exit 3", "", 0, 11},
		{"exception nzec", "raise 'boom'", "", 0, 11},
	}},
	{"rust", []int{73}, []judge0Verdict{
		{"accepted", "use std::io::Read;\nfn main(){let mut s=String::new();std::io::stdin().read_to_string(&mut s).unwrap();let n:i64=s.trim().parse().unwrap();println!(\"{}\",n*6);}", "42", 0, 3},
		{"wrong answer", "fn main(){println!(\"41\");}", "42", 0, 4},
		{"time limit", "fn main(){let mut x:u64=0;loop{x=x.wrapping_add(1);if x==u64::MAX{println!(\"{}\",x);}}}", "", 0, 5},
		{"compilation error", "fn main(){ oops }", "", 0, 6},
		{"nzec", "fn main(){std::process::exit(3);}", "", 0, 11},
		{"panic nzec", "use std::io::Read;\nfn main(){let mut s=String::new();std::io::stdin().read_to_string(&mut s).unwrap();let i:usize=s.trim().parse().unwrap();let v:Vec<i32>=Vec::new();println!(\"{}\",v[i]);}", "", 0, 11},
	}},
	{"typescript", []int{94, 74}, []judge0Verdict{
		{"accepted", "const n: number = 6 * 7;\nconsole.log(n)", "42", 0, 3},
		{"wrong answer", "console.log(41 as number)", "42", 0, 4},
		{"time limit", "for(;;){}", "", 0, 5},
		{"exception nzec", "throw new Error('boom' as string)", "", 0, 11},
	}},
}

// TestJudge0VerdictsEveryLanguage submits, in every language GET
// /languages lists, each verdict that applies to it, and asserts
// Judge0's status id and description exactly. A language the table
// lacks fails the test, so that a language added to Judge0's table
// brings its verdicts.
func TestJudge0VerdictsEveryLanguage(t *testing.T) {
	testenv.Slow(t, "runs every language's programs through the executor")
	ts := start(t, "", func(c *server.Config) {
		c.Judge0.Enabled, c.Judge0.Concurrency = true, 2
		// The languages' state (Go's standard library built for WASM)
		// shared with the languages' own tests, as a host keeps it.
		c.NewExecutor = func(h *host.Host, a *audit.Log) (server.Executor, error) {
			e, err := languages.NewExecutor(languages.ExecutorConfig{Host: h, Audit: a, BuildCacheDir: filepath.Join(c.DataDir, "build"),
				StateDir: filepath.Join(os.TempDir(), "moat-test-lang-state")})
			if err != nil {
				return nil, err
			}
			return e, nil
		}
	})
	key := ts.key(t, "acme", "ann", "dev")
	r := ts.j0(t, "GET", "/languages", key, "")
	var listed []struct{ ID int }
	if err := json.Unmarshal(r.body, &listed); err != nil || r.status != 200 {
		t.Fatalf("languages: %d %s", r.status, r.body)
	}
	for _, l := range listed {
		if !slices.ContainsFunc(judge0VerdictTable, func(e struct {
			lang string
			ids  []int
			runs []judge0Verdict
		}) bool {
			return slices.Contains(e.ids, l.ID)
		}) {
			t.Errorf("GET /languages lists id %d, which the verdict table lacks: add its verdicts", l.ID)
		}
	}
	for _, lang := range judge0VerdictTable {
		t.Run(lang.lang, func(t *testing.T) {
			if !slices.ContainsFunc(listed, func(l struct{ ID int }) bool { return l.ID == lang.ids[0] }) {
				testenv.Require(t, fmt.Sprintf("Judge0 language %d (%s) is not offered here (make toolchains): %s", lang.ids[0], lang.lang, r.body))
			}
			// The first (Accepted) alone and awaited: it builds what a
			// cold cache lacks (Go's standard library), so that the rest,
			// run two at a time, are judged on their own time.
			subs := make([]map[string]any, 0, len(lang.runs))
			for _, v := range lang.runs {
				// Judge0's default limits (5 s of CPU, 10 of wall clock),
				// 2 s where the program is to pass them.
				s := map[string]any{"source_code": v.src, "language_id": lang.ids[0], "stdin": "7"}
				if v.status == 5 {
					s["cpu_time_limit"], s["wall_time_limit"] = 2, 2
				}
				if v.expected != "" {
					s["expected_output"] = v.expected
				}
				if v.memoryKB != 0 {
					s["memory_limit"] = v.memoryKB
				}
				subs = append(subs, s)
			}
			type sub struct {
				Status struct {
					ID          int    `json:"id"`
					Description string `json:"description"`
				} `json:"status"`
				Stdout        *string `json:"stdout"`
				Stderr        *string `json:"stderr"`
				CompileOutput *string `json:"compile_output"`
				Message       *string `json:"message"`
			}
			const fields = "fields=token,status,stdout,stderr,compile_output,message"
			var page struct{ Submissions []sub }
			await := func(tokens []string) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
					g := ts.j0(t, "GET", "/submissions/batch?"+fields+"&tokens="+strings.Join(tokens, ","), key, "")
					page.Submissions = nil
					if err := json.Unmarshal(g.body, &page); err != nil || g.status != 200 || len(page.Submissions) != len(tokens) {
						t.Fatalf("batch show: %d %s", g.status, g.body)
					}
					if !slices.ContainsFunc(page.Submissions, func(s sub) bool { return s.Status.ID <= 2 }) {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("not finished in 5 minutes: %s", g.body)
					}
				}
			}
			b, _ := json.Marshal(subs[0])
			fr := ts.j0(t, "POST", "/submissions", key, string(b))
			first, _ := fr.json(t)["token"].(string)
			if fr.status != 201 || first == "" {
				t.Fatalf("first: %d %s", fr.status, fr.body)
			}
			await([]string{first})
			b, _ = json.Marshal(map[string]any{"submissions": subs[1:]})
			cr := ts.j0(t, "POST", "/submissions/batch", key, string(b))
			var created []struct{ Token string }
			if err := json.Unmarshal(cr.body, &created); err != nil || cr.status != 201 || len(created) != len(subs)-1 {
				t.Fatalf("batch: %d %s", cr.status, cr.body)
			}
			tokens := []string{first}
			for _, c := range created {
				tokens = append(tokens, c.Token)
			}
			await(tokens)
			str := func(p *string) string {
				if p == nil {
					return "null"
				}
				return fmt.Sprintf("%.300q", *p)
			}
			for i, v := range lang.runs {
				got := page.Submissions[i]
				if got.Status.ID != v.status || got.Status.Description != judge0Want[v.status] {
					t.Errorf("%s: status %d %q, want %d %q; stdout %s stderr %s compile_output %s message %s", v.name,
						got.Status.ID, got.Status.Description, v.status, judge0Want[v.status],
						str(got.Stdout), str(got.Stderr), str(got.CompileOutput), str(got.Message))
				}
			}
		})
	}
}
