package main_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestDeployRefuses: moat deploy refuses, before it sends anything, a
// server URL that would leak the key (plain http to another machine, user
// info, a query) and a key that is missing or not one line; it names the
// fix each time.
func TestDeployRefuses(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	work := t.TempDir()
	if r := moatIn(t, work, "new", "p", "--lang", "javascript"); r.code != 0 {
		t.Fatalf("new: %+v", r)
	}
	keyFile := filepath.Join(work, "key")
	writeFile(t, keyFile, "moat_abc\nmoat_def\n")
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"plain http elsewhere", "k", []string{"--server", "http://10.1.2.3:8080"}, "in clear; use https://"},
		{"user info", "k", []string{"--server", "https://ann:pw@moat.example.com"}, "no user info"},
		{"query", "k", []string{"--server", "https://moat.example.com/?x=1"}, "without a query"},
		{"scheme", "k", []string{"--server", "ftp://moat.example.com"}, "http(s)://HOST"},
		{"no key", "", nil, "set $MOAT_API_KEY"},
		{"two lines", "", []string{"--key-file", keyFile}, "does not hold an API key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := append([]string{"deploy", "p"}, tc.args...)
			r := moatEnvIn(t, work, []string{"MOAT_API_KEY=" + tc.env, "MOAT_SERVER="}, cmd...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d (want 2), want %q in:\n%s", r.code, tc.want, r.stderr)
			}
		})
	}
}

// TestDeployNoRedirect: a server answering the upload with a redirect does
// not get the key sent on to where it points.
func TestDeployNoRedirect(t *testing.T) {
	var leaked atomic.Bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Store(true)
		}
	}))
	defer elsewhere.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/v1/modules", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	work := t.TempDir()
	if r := moatIn(t, work, "new", "p", "--lang", "javascript"); r.code != 0 {
		t.Fatalf("new: %+v", r)
	}
	r := moatEnvIn(t, work, []string{"MOAT_API_KEY=moat_secret"}, "deploy", "p", "--server", srv.URL)
	if r.code == 0 || !strings.Contains(r.stderr, "307") {
		t.Errorf("deploy to a redirecting server: %+v", r)
	}
	if leaked.Load() {
		t.Error("the API key followed the redirect to another server")
	}
	if strings.Contains(r.stderr, "moat_secret") {
		t.Error("the key is in the error")
	}
}

// moatEnvIn runs moat in dir with extra environment variables.
func moatEnvIn(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(moatBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return runCmd(t, cmd)
}
