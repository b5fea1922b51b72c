package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/languages"
)

// TestPistonResultShape: moat's results become Piston's JSON, field for
// field: a compile stage only for compiled languages, no run stage after a
// failed compile, code null when a signal ended the program.
func TestPistonResultShape(t *testing.T) {
	py := languages.Info{Name: "python", Version: "3.12.0", Path: languages.PathInterpreted}
	c := languages.Info{Name: "c", Version: "19.1.7", Path: languages.PathCompiled}
	tests := []struct {
		name string
		info languages.Info
		res  languages.ExecResult
		want string
	}{
		{"interpreted ok", py, languages.ExecResult{Status: languages.StatusOK, Stdout: []byte("hi\n"), Stderr: []byte("warn\n"), RunTime: 12 * time.Millisecond, PeakMemory: 1024},
			`{"language":"python","version":"3.12.0","run":{"stdout":"hi\n","stderr":"warn\n","output":"hi\nwarn\n","code":0,"signal":null,"message":null,"status":null,"cpu_time":0,"wall_time":12,"memory":1024}}`},
		{"compiled ok", c, languages.ExecResult{Version: "19", Status: languages.StatusOK, Stdout: []byte("1"), CompileTime: 300 * time.Millisecond},
			`{"language":"c","version":"19","run":{"stdout":"1","stderr":"","output":"1","code":0,"signal":null,"message":null,"status":null,"cpu_time":0,"wall_time":0,"memory":0},"compile":{"stdout":"","stderr":"","output":"","code":0,"signal":null,"message":null,"status":null,"cpu_time":0,"wall_time":300,"memory":0}}`},
		{"compile error", c, languages.ExecResult{Status: languages.StatusCompileError, CompileOutput: "main.c:1: error", Message: "compilation failed"},
			`{"language":"c","version":"19.1.7","compile":{"stdout":"","stderr":"main.c:1: error","output":"main.c:1: error","code":1,"signal":null,"message":"compilation failed","status":"RE","cpu_time":0,"wall_time":0,"memory":0}}`},
		{"timeout", py, languages.ExecResult{Status: languages.StatusTimeout, Message: "run timed out after 3s"},
			`{"language":"python","version":"3.12.0","run":{"stdout":"","stderr":"","output":"","code":null,"signal":"SIGKILL","message":"run timed out after 3s","status":"TO","cpu_time":0,"wall_time":0,"memory":0}}`},
		{"exit 3", py, languages.ExecResult{Status: languages.StatusRuntimeError, ExitCode: 3, Stderr: []byte("boom"), Message: "exit status 3"},
			`{"language":"python","version":"3.12.0","run":{"stdout":"","stderr":"boom","output":"boom","code":3,"signal":null,"message":"exit status 3","status":"RE","cpu_time":0,"wall_time":0,"memory":0}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(pistonResult(tt.info, &tt.res))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}
