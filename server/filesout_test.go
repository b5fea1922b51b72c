package server_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/server"
)

// TestRunsFilesOut: a C program's run writes files in its working
// directory, and POST /v1/runs returns those files_out names, bounded;
// what a program cannot be allowed (past its scratch quota, a link out,
// a pattern leading out) is refused as the field it came in, and no
// scratch directory is left behind.
func TestRunsFilesOut(t *testing.T) {
	ts := start(t, "", withExecutor(t))
	requireC(t, ts)
	key := ts.key(t, "acme", "ann", "admin")
	scratchBefore, _ := filepath.Glob(filepath.Join(os.TempDir(), "moat-scratch-*"))
	run := func(t *testing.T, program string, filesOut []string, limits string) (int, server.RunResult, string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"language": "c", "files": []map[string]string{{"name": "main.c", "content": "#define _POSIX_C_SOURCE 200809L\n#include <errno.h>\n#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n#include <sys/stat.h>\n" + program}},
			"files_out": filesOut, "limits": json.RawMessage(limits)})
		r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(string(body)), "Content-Type", "application/json")
		var res server.RunResult
		json.Unmarshal(r.body, &res)
		return r.status, res, string(r.body)
	}
	cases := []struct {
		name     string
		program  string
		filesOut []string
		limits   string
		check    func(t *testing.T, res server.RunResult, body string)
	}{
		{"round trip: text, bytes, a subdirectory", `int main(void) {
	FILE *f = fopen("out.txt", "w"); fputs("hi", f); fclose(f);
	f = fopen("data.bin", "wb"); for (int i = 0; i < 256; i++) fputc(i, f); fclose(f);
	mkdir("plots", 0755);
	f = fopen("plots/a.svg", "w"); fputs("<svg/>", f); fclose(f);
	f = fopen("skip.log", "w"); fputs("not asked for", f); fclose(f);
	puts("done"); return 0; }`, []string{"*.txt", "*.bin", "plots/*.svg"}, `{}`, func(t *testing.T, res server.RunResult, body string) {
			if res.Status != "ok" || len(res.FilesOut) != 3 {
				t.Fatalf("%s", body)
			}
			want := map[string]string{"out.txt": "hi", "plots/a.svg": "<svg/>"}
			for _, f := range res.FilesOut {
				switch f.Name {
				case "data.bin":
					b, err := base64.StdEncoding.DecodeString(f.Content)
					if err != nil || f.Encoding != "base64" || len(b) != 256 || b[255] != 255 || f.Size != 256 {
						t.Errorf("data.bin: %+v", f)
					}
				default:
					if f.Encoding != "utf-8" || f.Content != want[f.Name] || f.Size != int64(len(want[f.Name])) {
						t.Errorf("%s: %+v", f.Name, f)
					}
				}
			}
		}},
		{"writing past the byte quota is ENOSPC, reported", `int main(void) {
	static char buf[1 << 20];
	FILE *f = fopen("big.bin", "wb");
	setvbuf(f, NULL, _IONBF, 0);
	for (int i = 0; i < 100; i++) {
		if (fwrite(buf, 1, sizeof buf, f) != sizeof buf) { printf("%s after %d MiB\n", errno == ENOSPC ? "ENOSPC" : strerror(errno), i); return 0; }
	}
	puts("wrote 100 MiB"); return 0; }`, []string{"big.bin"}, `{}`, func(t *testing.T, res server.RunResult, body string) {
			if res.Stdout != "ENOSPC after 64 MiB\n" || res.ScratchFull != "bytes" || !strings.Contains(res.Message, "scratch directory is full (at most 67108864 bytes)") {
				t.Fatalf("%.2000s", body)
			}
			if len(res.FilesOut) != 1 || res.FilesOut[0].Content != "" || res.FilesOut[0].Size != 64<<20 || !strings.Contains(res.FilesOut[0].Omitted, "max_output_bytes") {
				t.Fatalf("the file past the output limit: %+v", res.FilesOut)
			}
		}},
		{"10 000 tiny files meet the file cap", `int main(void) {
	char name[32];
	for (int i = 0; i < 10000; i++) {
		snprintf(name, sizeof name, "f%05d", i);
		FILE *f = fopen(name, "w");
		if (!f) { printf("%s after %d files\n", errno == ENOSPC ? "ENOSPC" : strerror(errno), i); return 0; }
		fclose(f);
	}
	puts("made 10000"); return 0; }`, []string{"f*"}, `{}`, func(t *testing.T, res server.RunResult, body string) {
			if res.Stdout != "ENOSPC after 1024 files\n" || res.ScratchFull != "files" {
				t.Fatalf("%.2000s", body)
			}
			if len(res.FilesOut) != 65 || res.FilesOut[0].Name != "f00000" || !strings.Contains(res.FilesOut[64].Omitted, "more than 64 files matched") {
				t.Fatalf("%d files returned, last %+v", len(res.FilesOut), res.FilesOut[len(res.FilesOut)-1])
			}
		}},
		{"a symlink to /etc/passwd cannot be made, and nothing leads out", `int main(void) {
	int s = symlink("/etc/passwd", "pw");
	printf("symlink=%s\n", s == 0 ? "ok" : errno == EPERM ? "EPERM" : strerror(errno));
	int l = link("/etc/passwd", "hard");
	printf("link=%s\n", l == 0 ? "ok" : "refused");
	FILE *f = fopen("../../etc/passwd", "r");
	printf("up=%s\n", f ? "read" : "refused");
	f = fopen("/etc/passwd", "r");
	printf("abs=%s\n", f ? "read" : "absent");
	return 0; }`, []string{"*"}, `{}`, func(t *testing.T, res server.RunResult, body string) {
			if res.Stdout != "symlink=EPERM\nlink=refused\nup=refused\nabs=absent\n" || len(res.FilesOut) != 0 {
				t.Fatalf("%.2000s", body)
			}
		}},
		{"a file past max_output_bytes is listed, not returned", `int main(void) {
	FILE *f = fopen("a.txt", "w"); for (int i = 0; i < 100000; i++) fputc('a', f); fclose(f);
	f = fopen("b.txt", "w"); fputs("small", f); fclose(f);
	return 0; }`, []string{"*.txt"}, `{"max_output_bytes": 65536}`, func(t *testing.T, res server.RunResult, body string) {
			if len(res.FilesOut) != 2 || res.FilesOut[0].Omitted == "" || res.FilesOut[0].Size != 100000 || res.FilesOut[1].Content != "small" {
				t.Fatalf("%.2000s", body)
			}
		}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			status, res, body := run(t, tt.program, tt.filesOut, tt.limits)
			if status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			tt.check(t, res, body)
		})
	}
	for _, bad := range []struct{ pattern, want string }{
		{"../etc/passwd", `files_out: the pattern \"../etc/passwd\" has a \"..\" element`},
		{"/etc/passwd", `files_out: the pattern \"/etc/passwd\" is absolute`},
		{"a/../../x", `has a \"..\" element`},
		{"a//b", `has a \"\" element`},
		{"[", "is malformed"},
		{"", "an empty pattern"},
		{"a\x00b", "is not printable text"},
		{strings.Repeat("x", 300), "is longer than 256 bytes"},
	} {
		t.Run(fmt.Sprintf("pattern %.20q", bad.pattern), func(t *testing.T) {
			status, _, body := run(t, "int main(void) { return 0; }", []string{bad.pattern}, `{}`)
			if status != 400 || !strings.Contains(body, bad.want) {
				t.Fatalf("%d %s, want 400 with %s", status, body, bad.want)
			}
		})
	}
	t.Run("a Piston run writes and reads its working directory", func(t *testing.T) {
		r := ts.do(t, "POST", "/api/v2/execute", "", strings.NewReader(`{"language":"c","version":"*","files":[{"name":"main.c","content":"#include <stdio.h>\nint main(void){FILE *f=fopen(\"o.txt\",\"w\");if(!f)return 9;fputs(\"piston\",f);fclose(f);char b[16]={0};f=fopen(\"o.txt\",\"r\");fread(b,1,15,f);puts(b);return 0;}"}]}`))
		if r.status != 200 || !strings.Contains(string(r.body), `"stdout":"piston\n"`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "moat-scratch-*"))
	if len(after) > len(scratchBefore) {
		t.Errorf("scratch directories left behind: %v (before: %v)", after, scratchBefore)
	}
}
