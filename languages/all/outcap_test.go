package all_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/languages"
)

// TestOutputCapCleanExit: a program that passes its output cap in one
// write and then exits 0 at once is output-limit on every runner (WASI
// command, interpreter, Ruby's reactor, native), its output cut at the
// cap: a clean exit never turns a truncated output into ok.
func TestOutputCapCleanExit(t *testing.T) {
	e := newExecutor(t, "")
	const limit = 4096
	for _, tt := range []struct {
		lang, file, code, msg string
	}{
		{"c", "main.c", "#include <unistd.h>\n#include <string.h>\nstatic char b[8192];\nint main(void){memset(b,'x',sizeof b); write(1,b,sizeof b); return 0;}\n", "stdout exceeded 4096 bytes"},
		{"c", "main.c", "#include <unistd.h>\n#include <string.h>\nstatic char b[8192];\nint main(void){memset(b,'x',sizeof b); write(2,b,sizeof b); _exit(0);}\n", "stderr exceeded 4096 bytes"},
		{"python", "main.py", "import os\nos.write(1, b'x' * 8192)\nos._exit(0)\n", "stdout exceeded 4096 bytes"},
		{"javascript", "main.js", "console.log('x'.repeat(8192));\n", "stdout exceeded 4096 bytes"},
		{"ruby", "main.rb", "$stdout.syswrite('x' * 8192) rescue nil\nexit!(0)\n", "stdout exceeded 4096 bytes"},
		{"bash", "main.sh", "head -c 8192 /dev/zero | tr '\\0' x\nexit 0\n", "the output passed 4096 bytes"},
	} {
		t.Run(tt.lang+" "+tt.msg, func(t *testing.T) {
			needLanguage(t, tt.lang)
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tt.lang, Source: src(tt.file, tt.code),
				Limits: languages.ExecLimits{MaxOutputBytes: limit, CompileTimeout: 5 * time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != languages.StatusOutputLimit || !strings.Contains(res.Message, tt.msg) {
				t.Fatalf("status %s %q, want %s %q (compile %q, stderr %q)", res.Status, res.Message, languages.StatusOutputLimit, tt.msg, res.CompileOutput, res.Stderr)
			}
			if len(res.Stdout) > limit || len(res.Stderr) > limit {
				t.Fatalf("kept %d/%d bytes, cap %d", len(res.Stdout), len(res.Stderr), limit)
			}
		})
	}
}
