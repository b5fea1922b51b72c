package server_test

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
)

func withJudge0(t *testing.T) func(*server.Config) {
	ex := withExecutor(t)
	return func(c *server.Config) {
		ex(c)
		c.Judge0.Enabled = true
	}
}

// j0 sends a Judge0 request with Judge0's X-Auth-Token header.
func (ts *testServer) j0(t *testing.T, method, path, key, body string) response {
	t.Helper()
	var r *strings.Reader
	if body != "" {
		r = strings.NewReader(body)
	} else {
		r = strings.NewReader("")
	}
	return ts.do(t, method, "/judge0"+path, "", r, "X-Auth-Token", key, "Content-Type", "application/json")
}

// judge0Langs skips unless the languages are offered here.
func judge0Langs(t *testing.T, ts *testServer, key string, ids ...int) {
	r := ts.j0(t, "GET", "/languages", key, "")
	for _, id := range ids {
		if !strings.Contains(string(r.body), fmt.Sprintf(`"id":%d,`, id)) {
			testenv.Require(t, fmt.Sprintf("Judge0 language %d is not available (make toolchains): %s", id, r.body))
		}
	}
}

// TestJudge0DocumentedExamples replays the examples of Judge0 CE's API
// documentation (docs/api/submissions/create_a_submission.md and
// get_a_submission.md) and compares the responses' shapes field by
// field: the same keys in the same order, the same types, the same
// status codes and error bodies.
func TestJudge0DocumentedExamples(t *testing.T) {
	ts := start(t, "", withJudge0(t))
	key := ts.key(t, "acme", "ann", "dev")
	judge0Langs(t, ts, key, 50)
	src := `"#include <stdio.h>\n\nint main(void) {\n  char name[10];\n  scanf(\"%s\", name);\n  printf(\"hello, %s\\n\", name);\n  return 0;\n}"`

	// 201 {"token": ...}
	r := ts.j0(t, "POST", "/submissions", key, `{"source_code": `+src+`, "language_id": 50, "stdin": "world"}`)
	if r.status != http.StatusCreated || !strings.HasPrefix(string(r.body), `{"token":"`) || len(r.json(t)) != 1 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	// 422 {"language_id": ["can't be blank"]}
	r = ts.j0(t, "POST", "/submissions", key, `{"source_code": `+src+`}`)
	if r.status != http.StatusUnprocessableEntity || string(r.body) != `{"language_id":["can't be blank"]}`+"\n" {
		t.Errorf("no language: %d %q", r.status, r.body)
	}
	r = ts.j0(t, "POST", "/submissions", key, `{"source_code": `+src+`, "language_id": 150000, "stdin": "world", "expected_output": "hello, world"}`)
	if r.status != http.StatusUnprocessableEntity || string(r.body) != `{"language_id":["language with id 150000 doesn't exist"]}`+"\n" {
		t.Errorf("unknown language: %d %q", r.status, r.body)
	}
	r = ts.j0(t, "POST", "/submissions", key, `{"source_code": `+src+`, "language_id": 50, "number_of_runs": 1, "stdin": "Judge0", "expected_output": "hello, Judge0", "cpu_time_limit": 1, "cpu_extra_time": 0.5, "wall_time_limit": 100000, "memory_limit": 128000, "stack_limit": 128000, "enable_per_process_and_thread_time_limit": false, "enable_per_process_and_thread_memory_limit": false, "max_file_size": 1024}`)
	if m := r.json(t); r.status != http.StatusUnprocessableEntity || len(m) != 1 || !strings.HasPrefix(fmt.Sprint(m["wall_time_limit"]), "[must be less than or equal to ") {
		t.Errorf("wall_time_limit: %d %s", r.status, r.body)
	}
	// wait=true, language_id as a string, as the documentation sends it.
	r = ts.j0(t, "POST", "/submissions?wait=true", key, `{"source_code": `+src+`, "language_id": "50", "stdin": "Judge0", "expected_output": "hello, Judge0"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("wait=true: %d %s", r.status, r.body)
	}
	keys := jsonKeys(t, r.body)
	if strings.Join(keys, ",") != "stdout,time,memory,stderr,token,compile_output,message,status" {
		t.Errorf("keys %v, want Judge0's order stdout,time,memory,stderr,token,compile_output,message,status", keys)
	}
	var sub struct {
		Stdout        *string `json:"stdout"`
		Time          *string `json:"time"`
		Memory        *int    `json:"memory"`
		Stderr        *string `json:"stderr"`
		Token         string  `json:"token"`
		CompileOutput *string `json:"compile_output"`
		Message       *string `json:"message"`
		Status        struct {
			ID          int    `json:"id"`
			Description string `json:"description"`
		} `json:"status"`
	}
	if err := json.Unmarshal(r.body, &sub); err != nil {
		t.Fatal(err)
	}
	if sub.Stdout == nil || *sub.Stdout != "hello, Judge0\n" || sub.Time == nil || !strings.Contains(*sub.Time, ".") || sub.Memory == nil ||
		sub.Stderr != nil || sub.CompileOutput != nil || sub.Message != nil || sub.Status.ID != 3 || sub.Status.Description != "Accepted" {
		t.Errorf("wait=true: %s", r.body)
	}
	// GET with base64_encoded=true: Ruby's encode64, newline and all.
	g := ts.j0(t, "GET", "/submissions/"+sub.Token+"?base64_encoded=true&fields=stdout,status_id,language_id", key, "")
	if g.status != http.StatusOK || string(g.body) != `{"language_id":50,"stdout":"aGVsbG8sIEp1ZGdlMAo=\n","status_id":3}`+"\n" {
		t.Errorf("GET base64 fields: %d %s", g.status, g.body)
	}
	g = ts.j0(t, "GET", "/submissions/"+sub.Token+"?fields=*", key, "")
	if all := jsonKeys(t, g.body); g.status != http.StatusOK || len(all) < 38 || all[0] != "source_code" {
		t.Errorf("fields=*: %d %s", g.status, g.body)
	}
	g = ts.j0(t, "GET", "/submissions/"+sub.Token+"?fields=stdout,nope", key, "")
	if g.status != http.StatusBadRequest || string(g.body) != `{"error":"invalid fields: [nope]"}`+"\n" {
		t.Errorf("bad fields: %d %s", g.status, g.body)
	}
	// The tables.
	st := ts.j0(t, "GET", "/statuses", key, "")
	if st.status != 200 || !strings.HasPrefix(string(st.body), `[{"id":1,"description":"In Queue"},{"id":2,"description":"Processing"},{"id":3,"description":"Accepted"}`) ||
		!strings.Contains(string(st.body), `{"id":14,"description":"Exec Format Error"}]`) {
		t.Errorf("statuses: %s", st.body)
	}
	l := ts.j0(t, "GET", "/languages/50", key, "")
	if m := l.json(t); l.status != 200 || m["id"] != 50.0 || m["source_file"] != "main.c" || m["is_archived"] != false {
		t.Errorf("language 50: %s", l.body)
	}
	if l := ts.j0(t, "GET", "/languages/9999", key, ""); l.status != 404 {
		t.Errorf("language 9999: %d %s", l.status, l.body)
	}
	if a := ts.do(t, "GET", "/judge0/about", "", nil); a.status != 200 || a.json(t)["version"] == nil {
		t.Errorf("about: %s", a.body)
	}
	// Refusals a moat server makes where a Judge0 host may not.
	r = ts.j0(t, "POST", "/submissions", key, `{"source_code":"x","language_id":50,"enable_network":true,"callback_url":"http://127.0.0.1:1/"}`)
	if r.status != 422 || !strings.Contains(string(r.body), `"enable_network":["enabling network is not allowed"]`) || !strings.Contains(string(r.body), `"callback_url":["setting callback is not allowed"]`) {
		t.Errorf("network, callback: %d %s", r.status, r.body)
	}
	// Authentication: none is Judge0's 401; Authorization: Bearer works too.
	if r := ts.do(t, "GET", "/judge0/statuses", "", nil); r.status != http.StatusUnauthorized || r.json(t)["error"] == nil {
		t.Errorf("no key: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/judge0/statuses", key, nil); r.status != http.StatusOK {
		t.Errorf("bearer: %d %s", r.status, r.body)
	}
	// Another organization's token is not found.
	other := ts.key(t, "globex", "gus", "dev")
	if r := ts.j0(t, "GET", "/submissions/"+sub.Token, other, ""); r.status != http.StatusNotFound {
		t.Errorf("another org's token: %d %s", r.status, r.body)
	}
	if r := ts.j0(t, "GET", "/submissions/batch?tokens="+sub.Token, other, ""); r.status != 200 || string(r.body) != `{"submissions":[null]}`+"\n" {
		t.Errorf("another org's token in a batch: %d %s", r.status, r.body)
	}
}

// jsonKeys lists an object's keys in their order.
func jsonKeys(t *testing.T, b []byte) []string {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(string(b)))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	var keys []string
	for d.More() {
		k, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestJudge0Tests: moat's extension, tests: in a Judge0 submission —
// one compile, a status per test, the submission's status its first
// failing test's.
func TestJudge0Tests(t *testing.T) {
	testenv.Slow(t, "compiles and runs C++")
	ts := start(t, "", withJudge0(t))
	key := ts.key(t, "acme", "ann", "dev")
	judge0Langs(t, ts, key, 54)
	b, _ := json.Marshal(map[string]any{"language_id": 54, "source_code": "#include <iostream>\nint main(){int a,b;std::cin>>a>>b;if(a<0)return 4;std::cout<<a*b<<std::endl;}",
		"tests": []map[string]any{{"stdin": "2 3", "expected_output": "6"}, {"stdin": "4 4", "expected_output": "15"}, {"stdin": "-1 0"}, {"stdin": "5 5", "expected_output": "25"}}})
	r := ts.j0(t, "POST", "/submissions?wait=true&fields=status,tests,compile_output", key, string(b))
	var sub struct {
		Status struct{ ID int }
		Tests  []struct {
			Status struct{ ID int }
			Stdout *string
		}
	}
	if err := json.Unmarshal(r.body, &sub); err != nil || r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	want := []int{3, 4, 11, 3}
	if sub.Status.ID != 4 || len(sub.Tests) != len(want) {
		t.Fatalf("submission: %s", r.body)
	}
	for i, w := range want {
		if sub.Tests[i].Status.ID != w {
			t.Errorf("test %d: status %d, want %d: %s", i, sub.Tests[i].Status.ID, w, r.body)
		}
	}
}

// TestJudge0BatchAcrossRestart: 20 submissions with wait=false, the
// server stopped before they ran and started again on the same data
// directory, and every one polled to Accepted.
func TestJudge0BatchAcrossRestart(t *testing.T) {
	testenv.Slow(t, "runs many programs through the executor")
	dir := t.TempDir()
	ts := start(t, dir, withJudge0(t))
	key := ts.key(t, "acme", "ann", "dev")
	judge0Langs(t, ts, key, 71)
	var subs []map[string]any
	for i := range 20 {
		subs = append(subs, map[string]any{"source_code": fmt.Sprintf("print(input() * %d)", i), "language_id": 71, "stdin": "7", "expected_output": strings.Repeat("7", i)})
	}
	b, _ := json.Marshal(map[string]any{"submissions": subs})
	r := ts.j0(t, "POST", "/submissions/batch", key, string(b))
	var created []struct{ Token string }
	if err := json.Unmarshal(r.body, &created); err != nil || r.status != 201 || len(created) != 20 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	ts.stop(t)
	ts = start(t, dir, withJudge0(t))
	tokens := make([]string, 0, 20)
	for _, c := range created {
		tokens = append(tokens, c.Token)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r := ts.j0(t, "GET", "/submissions/batch?tokens="+strings.Join(tokens, ",")+"&fields=token,status_id,stdout", key, "")
		var page struct {
			Submissions []struct {
				Token    string
				StatusID int `json:"status_id"`
			}
		}
		if err := json.Unmarshal(r.body, &page); err != nil || r.status != 200 || len(page.Submissions) != 20 {
			t.Fatalf("batch show: %d %s", r.status, r.body)
		}
		done, accepted := 0, 0
		for _, s := range page.Submissions {
			if s.StatusID > 2 {
				done++
			}
			if s.StatusID == 3 {
				accepted++
			}
		}
		if done == 20 {
			if accepted != 20 {
				t.Errorf("not all accepted: %s", r.body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart, %d of 20 finished: %s", done, r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestJudge0Callback: callback_url only to a target judge0.callbacks
// grants, the finished submission PUT there as Judge0 sends it (its
// default fields, base64), and the PUT audited.
func TestJudge0Callback(t *testing.T) {
	testenv.Slow(t, "waits for a submission's run and its callback")
	got := make(chan []byte, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPut {
			got <- b
		}
	}))
	defer hook.Close()
	ts := start(t, "", func(c *server.Config) {
		withJudge0(t)(c)
		c.Judge0.Callbacks = []string{hook.URL + "/hooks/"}
	})
	key := ts.key(t, "acme", "ann", "dev")
	judge0Langs(t, ts, key, 71)
	for _, u := range []string{hook.URL + "/other", "http://169.254.169.254/hooks/x", hook.URL + "/hooks/../other", "file:///etc/passwd"} {
		b, _ := json.Marshal(map[string]any{"source_code": "print(1)", "language_id": 71, "callback_url": u})
		if r := ts.j0(t, "POST", "/submissions", key, string(b)); r.status != 422 || !strings.Contains(string(r.body), `"callback_url"`) {
			t.Errorf("callback %s: %d %s", u, r.status, r.body)
		}
	}
	b, _ := json.Marshal(map[string]any{"source_code": "print(1)", "language_id": 71, "callback_url": hook.URL + "/hooks/done", "expected_output": "1"})
	r := ts.j0(t, "POST", "/submissions", key, string(b))
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	token := r.json(t)["token"].(string)
	select {
	case body := <-got:
		if keys := jsonKeys(t, body); strings.Join(keys, ",") != "stdout,time,memory,stderr,token,compile_output,message,status" ||
			!strings.Contains(string(body), `"stdout":"MQo=\n"`) || !strings.Contains(string(body), token) || !strings.Contains(string(body), `"id":3`) {
			t.Errorf("callback body: %s", body)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no callback")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		a := ts.do(t, "GET", "/v1/audit?kind=op", key, nil)
		if strings.Contains(string(a.body), `"judge0.callback"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no judge0.callback in the audit trail: %s", a.body)
		}
	}
}

// TestJudge0Hostile: every bound a Judge0 client can reach, each refused
// with Judge0's error shape naming the field.
func TestJudge0Hostile(t *testing.T) {
	ts := start(t, "", func(c *server.Config) {
		withJudge0(t)(c)
		c.Limits.MaxRequestBytes = 256 << 10
		c.Limits.Archive.MaxBytes, c.Limits.Archive.MaxEntryBytes, c.Limits.Archive.MaxEntries = 1<<20, 1<<20, 16
	})
	key := ts.key(t, "acme", "ann", "dev")
	judge0Langs(t, ts, key, 71)
	post := func(path string, body any) response {
		b, _ := json.Marshal(body)
		return ts.j0(t, "POST", path, key, string(b))
	}
	sub := func(extra map[string]any) map[string]any {
		m := map[string]any{"source_code": "print(1)", "language_id": 71}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	many := make([]map[string]any, 21)
	for i := range many {
		many[i] = sub(nil)
	}
	zipOf := func(files map[string]string) string {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for n, c := range files {
			w, _ := zw.Create(n)
			w.Write([]byte(c))
		}
		zw.Close()
		return base64.StdEncoding.EncodeToString(buf.Bytes())
	}
	symlinkZip := func() string {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		h := &zip.FileHeader{Name: "data.txt"}
		h.SetMode(os.ModeSymlink | 0o777)
		w, _ := zw.CreateHeader(h)
		w.Write([]byte("/etc/shadow"))
		zw.Close()
		return base64.StdEncoding.EncodeToString(buf.Bytes())
	}()
	manyFiles := map[string]string{}
	for i := range 17 {
		manyFiles[fmt.Sprintf("f%d.txt", i)] = "x"
	}
	for _, tc := range []struct {
		name   string
		r      response
		status int
		want   string
	}{
		{"batch of 21", post("/submissions/batch", map[string]any{"submissions": many}), 400, `{"error":"number of submissions in a batch should be less than or equal to 20"}`},
		{"empty batch", post("/submissions/batch", map[string]any{"submissions": []any{}}), 400, `{"error":"there should be at least one submission in a batch"}`},
		{"21 tokens", ts.j0(t, "GET", "/submissions/batch?tokens="+strings.Repeat("a,", 21), key, ""), 400, `less than or equal to 20`},
		{"stored submission too large", post("/submissions", sub(map[string]any{"stdin": strings.Repeat("x", 70<<10)})), 422, `"source_code":["the submission`},
		{"body too large", post("/submissions", sub(map[string]any{"stdin": strings.Repeat("x", 300<<10)})), 413, `{"error":"the request body is over`},
		{"fields too long", ts.j0(t, "GET", "/submissions/t0?fields="+strings.Repeat("a", 3000), key, ""), 400, `invalid fields`},
		{"101 tests", post("/submissions", sub(map[string]any{"tests": make([]map[string]any, 101)})), 422, `"tests":["holds 101 tests`},
		{"additional_files not a zip", post("/submissions", sub(map[string]any{"additional_files": base64.StdEncoding.EncodeToString([]byte("not a zip"))})), 422, `"additional_files":["is not a zip`},
		{"additional_files zip bomb", post("/submissions", sub(map[string]any{"additional_files": zipOf(map[string]string{"a": strings.Repeat("0", 8<<20)})})), 422, `"additional_files":[`},
		{"additional_files climbing", post("/submissions", sub(map[string]any{"additional_files": zipOf(map[string]string{"../x": "1"})})), 422, `"additional_files":["\"../x\": climbs out`},
		{"additional_files climbing inside", post("/submissions", sub(map[string]any{"additional_files": zipOf(map[string]string{"a/../../x": "1"})})), 422, `"additional_files":["\"a/../../x\": climbs out`},
		{"additional_files absolute", post("/submissions", sub(map[string]any{"additional_files": zipOf(map[string]string{"/etc/cron.d/x": "1"})})), 422, `"additional_files":["\"/etc/cron.d/x\": is an absolute path`},
		{"additional_files symlink", post("/submissions", sub(map[string]any{"additional_files": symlinkZip})), 422, `"additional_files":["\"data.txt\": is a symbolic link`},
		{"additional_files too many", post("/submissions", sub(map[string]any{"additional_files": zipOf(manyFiles)})), 422, `"additional_files":["`},
		{"additional_files the source's name", post("/submissions", sub(map[string]any{"additional_files": zipOf(map[string]string{"script.py": "print(666)"})})), 422, `"additional_files":["\"script.py\": the submission's source`},
		{"memory over the maximum", post("/submissions", sub(map[string]any{"memory_limit": 1 << 30})), 422, `"memory_limit":["must be less than or equal to`},
		{"negative cpu time", post("/submissions", sub(map[string]any{"cpu_time_limit": -1})), 422, `"cpu_time_limit":["must be greater than or equal to 0"]`},
		{"language id a fraction", post("/submissions", sub(map[string]any{"language_id": 71.5})), 422, `"language_id":["language with id 71.5 doesn't exist"]`},
		{"scala (not offered)", post("/submissions", sub(map[string]any{"language_id": 81})), 422, `"language_id":["language with id 81 doesn't exist"]`},
		{"language id text", post("/submissions", sub(map[string]any{"language_id": "seventy"})), 400, `{"error":"the body is not a Judge0 submission`},
		{"not base64", ts.j0(t, "POST", "/submissions?base64_encoded=true", key, `{"source_code":"%%%","language_id":71}`), 422, `"source_code":["is not base64`},
		{"compiler options", post("/submissions", sub(map[string]any{"compiler_options": "-fplugin=/tmp/x.so"})), 422, `"compiler_options":["setting compiler options is not allowed"]`},
		{"long arguments", post("/submissions", sub(map[string]any{"command_line_arguments": strings.Repeat("a", 513)})), 422, `"command_line_arguments":["is too long`},
		{"token climbing", ts.j0(t, "GET", "/submissions/..%2F..%2Fetc", key, ""), 404, `{"error":"Not Found"}`},
		{"token long", ts.j0(t, "GET", "/submissions/"+strings.Repeat("t", 5000), key, ""), 404, `{"error":"Not Found"}`},
	} {
		if tc.r.status != tc.status || !strings.Contains(string(tc.r.body), tc.want) {
			t.Errorf("%s: %d %.300s; want %d and %s", tc.name, tc.r.status, tc.r.body, tc.status, tc.want)
		}
	}
	if testing.Short() {
		return // the runs below take seconds (make check is -short)
	}
	// additional_files: the program reads them in its working directory,
	// where Judge0 unpacks them, and beside its source.
	r := ts.j0(t, "POST", "/submissions?wait=true&fields=stdout,status_id", key, func() string {
		b, _ := json.Marshal(sub(map[string]any{"source_code": "import os\nprint(open('data.txt').read().strip() + open(os.path.join(os.path.dirname(__file__), 'data.txt')).read().strip())", "additional_files": zipOf(map[string]string{"data.txt": "from the zip\n"}), "expected_output": "from the zipfrom the zip"}))
		return string(b)
	}())
	if r.status != 201 || !strings.Contains(string(r.body), `"status_id":3`) {
		t.Errorf("additional_files: %d %s", r.status, r.body)
	}
	// A native run too (Perl, Bash): the files, in their directories, are
	// in its working directory, which it may write.
	for _, tc := range []struct {
		id  int
		src string
	}{
		{85, "open my $f, '<', 'data.txt' or die $!; my $a = <$f>; open my $g, '<', 'in/more.txt' or die $!; my $b = <$g>;\nopen my $w, '>', 'out.txt' or die $!; print $a . $b;"},
		{46, "cat data.txt in/more.txt > out.txt && cat out.txt"},
	} {
		r := post("/submissions?wait=true&fields=stdout,stderr,status_id,message", map[string]any{"source_code": tc.src, "language_id": tc.id,
			"additional_files": zipOf(map[string]string{"data.txt": "from the zip\n", "in/more.txt": "nested\n"}), "expected_output": "from the zip\nnested"})
		if r.status == 422 && strings.Contains(string(r.body), "doesn't exist") {
			continue // the language is not offered here
		}
		if r.status != 201 || !strings.Contains(string(r.body), `"status_id":3`) {
			t.Errorf("additional_files, native language %d: %d %s", tc.id, r.status, r.body)
		}
	}
	// Output that is not UTF-8, without base64: Judge0's error beside the token.
	r = post("/submissions?wait=true", sub(map[string]any{"source_code": "import sys\nsys.stdout.buffer.write(b'\\xfe')"}))
	if m := r.json(t); r.status != 201 || m["token"] == nil || m["error"] != "some attributes for this submission cannot be converted to UTF-8, use base64_encoded=true query parameter" {
		t.Errorf("non-UTF-8 output: %d %s", r.status, r.body)
	}
}
