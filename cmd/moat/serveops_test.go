package main_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/server"
)

// TestServeOperator: what an operator meets first. moat serve
// --print-config writes the sample, and the server starts from it as is;
// with --log-format json every line on stderr is a JSON record (the
// confinement report included); listening on 0.0.0.0 without TLS is a
// warning naming the fix; each request is one log line with its method,
// path without the query, status, bytes, time and correlation id.
func TestServeOperator(t *testing.T) {
	r := moat(t, "", "serve", "--print-config")
	if r.code != 0 || r.stdout != string(server.SampleConfig) {
		t.Fatalf("serve --print-config: exit %d, stderr %q", r.code, r.stderr)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "moat-server.yaml")
	os.WriteFile(conf, []byte(r.stdout), 0o644)

	cmd := exec.Command(moatBin, "serve", "--config", conf, "--data", filepath.Join(dir, "data"), "--listen", "0.0.0.0:0", "--log-format", "json", "--confine", "off")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	records := make(chan map[string]any, 100)
	bad := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec map[string]any
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				bad <- sc.Text()
				continue
			}
			records <- rec
		}
		close(records)
	}()
	next := func(what string, match func(map[string]any) bool) map[string]any {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case rec, ok := <-records:
				if !ok {
					t.Fatalf("moat serve ended before logging %s", what)
				}
				if match(rec) {
					return rec
				}
			case line := <-bad:
				t.Errorf("a line on stderr is not JSON: %q", line)
			case <-deadline:
				t.Fatalf("no log record of %s", what)
			}
		}
	}
	msg := func(m string) func(map[string]any) bool {
		return func(rec map[string]any) bool { s, _ := rec["msg"].(string); return strings.Contains(s, m) }
	}
	next("the missing confinement", msg("running without a kernel layer"))
	listening := next("the URL", msg("listening"))
	port := regexp.MustCompile(`:(\d+)$`).FindStringSubmatch(listening["url"].(string))
	if port == nil {
		t.Fatalf("no port in %v", listening)
	}
	warn := next("the warning", msg("without TLS"))
	if warn["level"] != "WARN" || !strings.Contains(warn["fix"].(string), "tls.cert") {
		t.Errorf("the 0.0.0.0 warning: %v", warn)
	}

	req, _ := http.NewRequest("GET", "http://127.0.0.1:"+port[1]+"/v1/modules?q=secret-term", nil)
	req.Header.Set("X-Request-Id", "req-operator-1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	line := next("the request", msg("http"))
	if line["method"] != "GET" || line["path"] != "/v1/modules" || line["status"] != float64(401) || line["correlation_id"] != "req-operator-1" ||
		line["bytes"] == nil || line["bytes"].(float64) <= 0 || line["took"] == nil || line["level"] != "INFO" {
		t.Errorf("the request's log line: %v", line)
	}
	b, _ := json.Marshal(line)
	if strings.Contains(string(b), "secret-term") {
		t.Errorf("the request's log line holds its query: %s", b)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	next("the shutdown", msg("shutting down"))
	cmd.Wait()
}
