package server_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/server"
)

// TestCodeKeyConfig: code_key_file is read when the config is read, and a
// key too short to be a secret is refused naming the knob and the fix,
// whether it comes from the file or from $MOAT_CODE_KEY; the budget of
// shared code is bounded.
func TestCodeKeyConfig(t *testing.T) {
	dir := t.TempDir()
	good := strings.Repeat("k", 64)
	files := map[string]string{"good": good + "\nignored second line\n", "short": "0123456789abcdef\n", "spaces": "  " + good + "  \n"}
	for name, content := range files {
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600)
	}
	tests := []struct {
		name, yaml, want, key string
	}{
		{name: "a good key file", yaml: "code_key_file: " + filepath.Join(dir, "good"), key: good},
		{name: "spaces around the key", yaml: "code_key_file: " + filepath.Join(dir, "spaces"), key: good},
		{name: "a short key", yaml: "code_key_file: " + filepath.Join(dir, "short"), want: "code_key_file: the key in " + filepath.Join(dir, "short") + " is 16 characters; use at least 32"},
		{name: "no such file", yaml: "code_key_file: " + filepath.Join(dir, "absent"), want: "code_key_file: open"},
		{name: "no key", yaml: "listen: 127.0.0.1:0"},
		{name: "budget too small", yaml: "modules: {shared_code_bytes: 1MiB}", want: "modules.shared_code_bytes: 1 MiB is outside 256 MiB"},
		{name: "budget too large", yaml: "modules: {shared_code_bytes: 2TiB}", want: "modules.shared_code_bytes: 2 TiB is outside 256 MiB (the largest artifact) to 1 TiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := server.ParseConfig("moat-server.yaml", []byte(tt.yaml+"\n"))
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("ParseConfig = %v, want %q", err, tt.want)
				}
				if strings.Contains(err.Error(), "0123456789abcdef") {
					t.Errorf("the error quotes the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.CodeKey != tt.key {
				t.Errorf("CodeKey = %q, want %q", c.CodeKey, tt.key)
			}
		})
	}
	if err := server.ValidateCodeKey("0123456789abcdef"); err == nil || strings.Contains(err.Error(), "0123456789abcdef") || !strings.Contains(err.Error(), "16 characters; use at least 32") {
		t.Errorf("ValidateCodeKey of 16 characters: %v", err)
	}
	cfg := server.DefaultConfig()
	cfg.DataDir, cfg.CodeKey = t.TempDir(), "short"
	if _, err := server.New(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "code_key: the code key is 5 characters") || !strings.Contains(err.Error(), "MOAT_CODE_KEY") {
		t.Errorf("server.New with a 5-character code key: %v", err)
	}
}

// syncBuffer is a log destination several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCodeSharingStartLog: a server on a shared database says once at
// start whether it shares compiled code, and without a key names the knob
// that would make it; a server on SQLite without a key says nothing of it
// (one machine: nothing to share, nothing changed for a newcomer).
func TestCodeSharingStartLog(t *testing.T) {
	db := pgtest.Database(t)
	tests := []struct {
		name, db, key string
		want          []string // substrings of the one line, "" for no line
	}{
		{name: "PostgreSQL without a key", db: db, want: []string{`"level":"WARN"`, "compiled code is not shared between replicas", "MOAT_CODE_KEY", `"knob":"code_key_file"`}},
		{name: "PostgreSQL with a key", db: db, key: strings.Repeat("s", 32), want: []string{`"level":"INFO"`, "compiled code is shared with the other replicas"}},
		{name: "SQLite without a key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncBuffer
			start(t, "", func(c *server.Config) {
				c.DatabaseURL, c.CodeKey, c.CacheDir = tt.db, tt.key, t.TempDir()
				c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			})
			var lines []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "compiled code is") {
					lines = append(lines, l)
				}
			}
			if tt.want == nil {
				if len(lines) != 0 {
					t.Fatalf("want no line about sharing compiled code, got %v", lines)
				}
				return
			}
			if len(lines) != 1 {
				t.Fatalf("want one line about sharing compiled code, got %d:\n%s", len(lines), logs.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("the line lacks %s: %s", w, lines[0])
				}
			}
		})
	}
}
