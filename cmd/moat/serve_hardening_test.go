package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestServeHardeningIII: issue 27's server part, through the built
// binary. A keyless request promising a 1 MB body and sending 10 bytes is
// a 401 at once and its connection closed; a key with no role reads only
// its own user's audit events and tasks, while the admin reads the
// organization's.
func TestServeHardeningIII(t *testing.T) {
	testenv.Timing(t)
	data := t.TempDir()
	admin := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	bob := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "bob").stdout)
	if !strings.HasPrefix(admin, "moat_sk_") || !strings.HasPrefix(bob, "moat_sk_") {
		t.Fatalf("keys create: %q %q", admin, bob)
	}
	var rest bytes.Buffer
	_, base := startServe(t, &rest, "--data", data, "--listen", "127.0.0.1:0")
	addr := strings.TrimPrefix(base, "http://")

	t.Run("keyless half-sent body", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		fmt.Fprintf(c, "POST /v1/modules/m/actions/a HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000000\r\n\r\n0123456789", addr)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no response: %v", err)
		}
		var p struct{ Code, Detail string }
		json.NewDecoder(res.Body).Decode(&p)
		if took := time.Since(start); res.StatusCode != 401 || p.Code != "unauthenticated" || took > time.Second {
			t.Errorf("%d %s after %v; want 401 unauthenticated at once", res.StatusCode, p.Code, took)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Errorf("the refused connection is still open (%d, %v)", n, err)
		}
	})

	get := func(t *testing.T, path, key string) []map[string]any {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string][]map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, res.StatusCode, err)
		}
		for _, v := range out {
			return v
		}
		return nil
	}
	t.Run("audit by user", func(t *testing.T) {
		// bob's refused upload is his own event; ann sees it, bob sees
		// only his.
		req, _ := http.NewRequest("POST", base+"/v1/modules?name=x", strings.NewReader("\x00asm\x01\x00\x00\x00"))
		req.Header.Set("Authorization", "Bearer "+bob)
		req.Header.Set("Content-Type", "application/wasm")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 403 {
			t.Fatalf("bob's upload: %d; want 403", res.StatusCode)
		}
		users := func(evs []map[string]any) map[any]bool {
			m := map[any]bool{}
			for _, e := range evs {
				m[e["user"]] = true
			}
			return m
		}
		if u := users(get(t, "/v1/audit", bob)); len(u) != 1 || !u["bob"] {
			t.Errorf("bob's /v1/audit holds the events of %v; want bob's only", u)
		}
		if u := users(get(t, "/v1/audit", admin)); !u["bob"] {
			t.Errorf("the admin's /v1/audit holds the events of %v; want bob's among them", u)
		}
		if tasks := get(t, "/v1/tasks", bob); len(tasks) != 0 {
			t.Errorf("bob lists %d tasks; want none", len(tasks))
		}
	})
}
