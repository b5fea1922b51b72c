package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/hostile"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestRunDeadlineHostile: through the binary, a module that writes the
// counter the host adds is refused at once, and code with no loop ends
// at its deadline with the timeout's exit status, under moat run's
// default confinement.
func TestRunDeadlineHostile(t *testing.T) {
	testenv.Timing(t)
	// The 46-byte module: _start sets global 0 of a module with none.
	fuel := writeModule(t, "fuel", []byte("\x00asm\x01\x00\x00\x00"+
		"\x01\x04\x01\x60\x00\x00"+"\x03\x02\x01\x00"+"\x07\x0a\x01\x06_start\x00\x00"+
		"\x0a\x08\x01\x06\x00\x41\x00\x24\x00\x0b"))
	start := time.Now()
	r := moat(t, "", "run", fuel, "--data", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stderr, "global index 0, but the module declares 0") {
		t.Errorf("moat run fuel.wasm: exit %d, stderr %q; want 1 and the global named", r.code, r.stderr)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the refusal took %s", took)
	}

	// A call tree as a WASI command: ends at --timeout with 124, and a
	// SIGTERM while it runs under a long one ends moat at once.
	tree := writeModule(t, "tree", hostile.CallTreeWasm(60))
	start = time.Now()
	if r := moat(t, "", "run", tree, "--data", t.TempDir(), "--timeout", "1s"); r.code != 124 {
		t.Errorf("moat run tree.wasm --timeout 1s: exit %d, stderr %q; want 124", r.code, r.stderr)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("moat run tree.wasm --timeout 1s took %s", took)
	}
	cmd := exec.Command(moatBin, "run", tree, "--data", t.TempDir(), "--timeout", "10m")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	start = time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		t.Logf("moat run of a call tree ended %s after SIGTERM", time.Since(start))
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Errorf("moat run of a call tree ignored SIGTERM for 10 s")
	}

	start = time.Now()
	r = moat(t, "", "exec", "--data", t.TempDir(), "--lang", "c", "--timeout", "1s", "-e", hostile.CallTreeC(60))
	if r.code != 124 || !strings.Contains(r.stderr, "status=timeout") {
		t.Errorf("moat exec of a C call tree: exit %d, stderr %q; want 124 and status=timeout", r.code, r.stderr)
	}
	t.Logf("the C call tree under a 1 s limit ended after %s, its build included", time.Since(start))
}

// TestServeAnswersWhileGuestsRunTrees: one organization's key sends two
// runs of a C call tree at once, as many as the machine has processors
// in CI; /healthz and another organization's run are answered meanwhile,
// the trees end at their deadline, and the server stops on SIGTERM.
func TestServeAnswersWhileGuestsRunTrees(t *testing.T) {
	testenv.Timing(t)
	data := t.TempDir()
	acme := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	globex := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "globex", "--user", "gus", "--role", "admin").stdout)
	var rest bytes.Buffer
	_, base := startServe(t, &rest, "--data", data, "--listen", "127.0.0.1:0")
	post := func(key, body string) (int, map[string]any, time.Duration) {
		start := time.Now()
		req, _ := http.NewRequest("POST", base+"/v1/runs", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, nil, 0
		}
		defer res.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(res.Body)
		_ = json.Unmarshal(b, &out)
		return res.StatusCode, out, time.Since(start)
	}
	tree, _ := json.Marshal(map[string]any{"language": "c", "files": []map[string]string{{"name": "main.c", "content": hostile.CallTreeC(60)}},
		"limits": map[string]string{"timeout": "3s"}})
	// Built once first, so that the runs below spend their time running.
	if code, out, _ := post(acme, string(tree)); code != 200 || out["status"] != "timeout" {
		t.Fatalf("the first tree: %d %v", code, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, took := post(acme, string(tree))
			// The organization's concurrency (1 by default) queues the
			// second behind the first.
			if code != 200 || out["status"] != "timeout" || took > 2*3*time.Second+2*time.Second {
				t.Errorf("a tree: %d %v after %s", code, out, took)
			}
		}()
	}
	// While they run: /healthz, and another organization's run.
	time.Sleep(300 * time.Millisecond)
	var worst time.Duration
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/healthz", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		worst = max(worst, time.Since(start))
		time.Sleep(50 * time.Millisecond)
	}
	if worst > time.Second {
		t.Errorf("/healthz took up to %s while two call trees ran", worst)
	}
	hello := `{"language":"c","files":[{"name":"main.c","content":"#include <stdio.h>\nint main(void){puts(\"hi\");return 0;}"}]}`
	if code, out, took := post(globex, hello); code != 200 || out["stdout"] != "hi\n" || took > 5*time.Second {
		t.Errorf("another organization's run meanwhile: %d %v after %s", code, out, took)
	}
	wg.Wait()
	t.Logf("/healthz at worst %s while the trees ran", worst)
}
